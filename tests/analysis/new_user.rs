//! A new user's first look at the cache and closure samples: every command names the same
//! object, its kind and its root the same way, with the same sizes (issue 18's acceptance).

use crate::dump_support::*;
use serde_json::Value;
use std::path::Path;

/// The sample paused at READY 1, dumped.
fn dumped(name: &str, dir: &Path) -> std::path::PathBuf {
    let mut sample = Sample::start(&sample_path(name), &[]);
    sample.wait_ready(1);
    let path = dir.join(format!("{name}.heapsnap"));
    dump_ok(sample.pid(), &path, &[]);
    sample.release();
    sample.finish();
    path
}

/// The biggest object below the roots in `dominators`.
fn top_object(snapshot: &Path) -> Value {
    let mut node = analyse("dominators", &[snapshot], &[]);
    while node.get("address").is_none() {
        node = node["children"][0].clone();
    }
    node
}

#[test]
fn the_cache_is_the_same_object_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dumped("cache_leak", dir.path());
    let top = top_object(&snap);
    let (address, retained) = (top["address"].as_str().unwrap(), &top["retained"]);
    assert!(top["description"].as_str().unwrap().starts_with("Hashtbl ("), "{top:#}");
    assert_eq!(top["root"], "Cache_leak.1", "{top:#}");

    let by_root = analyse("top", &[&snap], &["--by", "root"]);
    assert_eq!(by_root["groups"][0]["name"], "Cache_leak.1", "{by_root:#}");
    assert_eq!(&by_root["groups"][0]["retained"], retained, "top --by root and dominators");

    let by_kind = analyse("top", &[&snap], &["--by", "kind", "--limit", "0"]);
    let hashtbl = by_kind["groups"].as_array().unwrap().iter().find(|g| g["name"] == "Hashtbl").expect("a Hashtbl group");
    assert_eq!((&hashtbl["count"], &hashtbl["retained"]), (&Value::from(1), retained), "top --by kind and dominators");

    let inspect = analyse("inspect", &[&snap], &[address]);
    assert_eq!(inspect["description"], top["description"], "inspect and dominators");
    assert_eq!(&inspect["retained"], retained);
    assert!(inspect["roots"].as_array().unwrap().iter().any(|r| r == "Cache_leak.1"), "{inspect:#}");

    let by_address = analyse("path", &[&snap], &[address]);
    assert_eq!(by_address["paths"][0]["root"], "Cache_leak.1", "{by_address:#}");
    let by_kind_path = analyse("path", &[&snap], &["--kind", "Hashtbl"]);
    assert_eq!((&by_kind_path["targets"], &by_kind_path["paths"][0]["root"]), (&Value::from(1), &Value::from("Cache_leak.1")));
}

#[test]
fn the_closures_are_named_alike_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dumped("closure_list", dir.path());
    let by_closure = analyse("top", &[&snap], &["--by", "closure"]);
    let closures = &by_closure["groups"][0];
    let name = closures["name"].as_str().unwrap();
    assert!(name.starts_with("closure camlClosure_list.") && name.contains("closure_list.ml:"), "{by_closure:#}");
    let by_kind = analyse("top", &[&snap], &["--by", "kind", "--limit", "0"]);
    let same = by_kind["groups"].as_array().unwrap().iter().find(|g| g["name"] == name).expect("the closures' kind");
    assert_eq!((&same["count"], &same["shallow"]), (&closures["count"], &closures["shallow"]), "--by kind and --by closure");

    let top = top_object(&snap);
    let root = top["root"].as_str().unwrap().to_string();
    assert!(root.starts_with("Closure_list."), "{top:#}");
    let by_root = analyse("top", &[&snap], &["--by", "root"]);
    assert_eq!((&by_root["groups"][0]["name"], &by_root["groups"][0]["retained"]), (&Value::from(root.as_str()), &top["retained"]));
    let paths = analyse("path", &[&snap], &["--kind", name]);
    assert_eq!(paths["targets"], closures["count"], "path --kind finds every closure of the group");
    assert_eq!(paths["paths"][0]["root"], root.as_str(), "{paths:#}");
}
