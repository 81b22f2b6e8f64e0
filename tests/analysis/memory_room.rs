//! A heap that cannot fit in the memory left is refused before the analysis allocates for it,
//! with both figures and the limit that binds (`HEAPSNAP_TEST_MEMORY_ROOM` pretends a room,
//! a test hook of the `heapsnap` that `cargo test` builds).

use heapsnap_testkit::synth::{Space, SynthHeap, Value};
use std::path::Path;
use std::process::{Command, Output};

/// A module holding a list of 1,000 cells: 1,000 blocks and a few more.
fn list_snapshot(dir: &Path) -> std::path::PathBuf {
    let mut h = SynthHeap::new();
    let mut list = Value::Int(0);
    for i in 0..1000 {
        list = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Int(i), list]));
    }
    h.add_module("Lists", &[list]);
    let path = dir.join("lists.heapsnap");
    h.write(&path).unwrap();
    path
}

fn summary(snapshot: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapsnap"))
        .args(["summary", "--json"])
        .arg(snapshot)
        .envs(env.iter().copied())
        .env("XDG_CACHE_HOME", snapshot.parent().unwrap())
        .output()
        .expect("run heapsnap")
}

#[test]
fn a_heap_that_cannot_fit_is_refused_before_the_analysis_allocates() {
    let dir = tempfile::tempdir().unwrap();
    let path = list_snapshot(dir.path());
    // 1,000 blocks need at least 24,000 bytes (the module block is static data): 20,000 cannot hold them.
    let out = summary(&path, &[("HEAPSNAP_TEST_MEMORY_ROOM", "20000")]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("analysing this snapshot's 1000 objects needs at least 23.4 KiB of memory")
            && err.contains("only 19.5 KiB is left under HEAPSNAP_TEST_MEMORY_ROOM")
            && err.contains("give that limit 3.9 KiB more")
            && !err.contains("panicked"),
        "{err}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["error"]["kind"], "memory", "{json}");
    // Nothing half made is left: no index beside the snapshot or in the cache.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("lists.heapsnap")], "{left:?}");

    // Room enough, or the check turned off: the same heap is analysed, as with the real room
    // (each from a snapshot of its own, which no index answers for).
    let fresh = || {
        let dir = tempfile::tempdir().unwrap();
        let path = list_snapshot(dir.path());
        (dir, path)
    };
    let (_real_dir, real_path) = fresh();
    let real = summary(&real_path, &[]);
    assert!(real.status.success(), "{}", String::from_utf8_lossy(&real.stderr));
    let real: serde_json::Value = serde_json::from_slice(&real.stdout).unwrap();
    assert!(real["reachable_objects"].as_u64().unwrap() >= 1000, "{real}");
    for env in [
        [("HEAPSNAP_TEST_MEMORY_ROOM", "30000"), ("HEAPSNAP_MEMORY_CHECK", "on")],
        [("HEAPSNAP_TEST_MEMORY_ROOM", "20000"), ("HEAPSNAP_MEMORY_CHECK", "off")],
    ] {
        let (_dir, path) = fresh();
        let out = summary(&path, &env);
        assert!(out.status.success(), "{env:?}: {}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["reachable_objects"], real["reachable_objects"], "{env:?}: {json}");
    }
}
