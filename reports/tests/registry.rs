//! The registry is the one list of reports: the table in analyze/REPORTS.md is that list, and
//! every report's arguments make a JSON schema and parse from JSON.

use heapsnap_reports::json_args;
use heapsnap_reports::registry::{self, REPORTS};
use serde_json::{json, Map, Value};

/// The rows between the markers of analyze/REPORTS.md: (report, what it answers).
fn documented() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../analyze/REPORTS.md")).unwrap();
    let start = text.find("<!-- reports: begin").expect("the begin marker");
    let end = text.find("<!-- reports: end -->").expect("the end marker");
    text[start..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| {
            let (name, rest) = l.split_once("` | ").expect("| `name` | about |");
            (name.to_string(), rest.trim_end_matches(" |").to_string())
        })
        .collect()
}

#[test]
fn reports_md_lists_the_registry() {
    let registered: Vec<(String, String)> = REPORTS.iter().map(|r| (r.name().to_string(), r.about().to_string())).collect();
    assert_eq!(documented(), registered, "analyze/REPORTS.md's table of reports is not the registry");
}

#[test]
fn every_report_has_a_schema_and_takes_json() {
    for report in REPORTS {
        let command = report.arguments();
        let schema = json_args::schema(&command);
        let properties = schema["properties"].as_object().unwrap();
        let snapshot = if properties.contains_key("snapshots") { "snapshots" } else { "snapshot" };
        assert!(schema["required"].as_array().unwrap().contains(&json!(snapshot)), "{}: {schema}", report.name());
        assert!(!properties.contains_key("json"), "{}: --json is the command line's", report.name());
        // Every property the schema names is an argument the JSON parser takes.
        for (name, property) in properties {
            let Some(default) = property.get("default") else { continue };
            let mut args = Map::new();
            args.insert(snapshot.into(), if snapshot == "snapshots" { json!(["a", "b"]) } else { json!("a") });
            if report.name() == "path" {
                args.insert("tag".into(), json!(0));
            }
            if report.name() == "inspect" {
                args.insert("address".into(), json!("0x10"));
            }
            let value = if property["type"] == "integer" { json!(default.as_f64().unwrap() as u64) } else { default.clone() };
            args.insert(name.clone(), value);
            json_args::matches(&command, &args).unwrap_or_else(|e| panic!("{} {name}: {e}", report.name()));
        }
    }
}

#[test]
fn json_arguments_are_checked_as_the_command_line_checks_them() {
    let top = registry::find("top").unwrap().arguments();
    let args = |v: Value| v.as_object().unwrap().clone();
    let m = json_args::matches(&top, &args(json!({"snapshot": "s.heapsnap", "by": "root", "limit": 0}))).unwrap();
    assert_eq!(m.get_one::<usize>("limit"), Some(&usize::MAX), "0 is no limit, as on the command line");
    assert_eq!(m.get_one::<std::path::PathBuf>("snapshot").unwrap().to_str(), Some("s.heapsnap"));
    let m = json_args::matches(&top, &args(json!({"snapshot": "-s.heapsnap", "site-depth": 2}))).unwrap();
    assert_eq!(m.get_one::<std::path::PathBuf>("snapshot").unwrap().to_str(), Some("-s.heapsnap"), "a value, not a flag");
    assert_eq!(m.get_one::<u32>("site_depth"), Some(&2));
    for (bad, says) in [
        (json!({"snapshot": "s", "by": "colour"}), "colour"),
        (json!({"snapshot": "s", "limit": -1}), "-1"),
        (json!({"snapshot": "s", "limit": [1, 2]}), "list"),
        (json!({"snapshot": "s", "json": true}), "unknown argument \"json\""),
        (json!({}), "<SNAPSHOT>"),
    ] {
        let e = json_args::matches(&top, &args(bad.clone())).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let path = registry::find("path").unwrap().arguments();
    let e = json_args::matches(&path, &args(json!({"address": "0x10"}))).unwrap_err();
    assert!(e.contains("snapshot"), "the address is not taken for the snapshot: {e}");
    let e = json_args::matches(&path, &args(json!({"snapshot": "s", "tag": 0, "kind": "Hashtbl"}))).unwrap_err();
    assert!(e.contains("cannot be used with"), "{e}");
    let diff = registry::find("diff").unwrap().arguments();
    let e = json_args::matches(&diff, &args(json!({"snapshots": ["a"]}))).unwrap_err();
    assert!(e.contains("2 values required") || e.contains("more values required"), "{e}");
}
