//! `heapsnap mcp` driven by a client nobody here wrote: the official MCP Python SDK (pinned,
//! installed into target/mcp-venv by scripts/mcp-client.sh, which scripts/test.sh runs). The
//! client lists the tools, asks `top` by root and `path` of a snapshot with OCaml names, `diff`
//! of a leaking series, and `summary` of a damaged snapshot; and asks for files outside the
//! server's roots.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dump_support::series::three_snapshots;
use crate::dump_support::{heapsnap, repo, samples_dir, toolchain_prefix};

fn client_python() -> PathBuf {
    let out = Command::new(repo().join("scripts/mcp-client.sh")).output().expect("run scripts/mcp-client.sh");
    assert!(out.status.success(), "the MCP Python SDK did not install: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn run_client(root: &Path, named: &Path, damaged: &Path, series: &[PathBuf]) -> Value {
    let out = Command::new(client_python())
        .arg(repo().join("tests/analysis/mcp_client.py"))
        .arg(heapsnap())
        .arg(root)
        .arg(named)
        .arg(damaged)
        .args(series)
        .output()
        .expect("run the MCP client");
    assert!(out.status.success(), "the client failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn an_agent_asks_who_keeps_the_cache_alive() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = toolchain_prefix("5.3.0");
    let cmt = samples_dir().parent().unwrap().join(".build/5.3.0/cmt");
    let series = three_snapshots(dir.path(), &["--ocaml", prefix.to_str().unwrap(), "--cmt", cmt.to_str().unwrap()]);
    assert_eq!(series.len(), 3, "{series:?}");
    let named = &series[2];
    // A damaged snapshot: the last one with a stretch of its middle overwritten.
    let damaged = dir.path().join("damaged.heapsnap");
    let mut bytes = std::fs::read(named).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..middle + 4096].fill(0xa5);
    std::fs::write(&damaged, &bytes).unwrap();

    let seen = run_client(dir.path(), named, &damaged, &series);
    assert_eq!(seen["server"], "heapsnap");
    assert!(["2025-06-18", "2025-03-26", "2024-11-05"].contains(&seen["protocol"].as_str().unwrap()), "{}", seen["protocol"]);
    let tools: Vec<&str> = seen["tools"].as_object().unwrap().keys().map(String::as_str).collect();
    for tool in ["summary", "top", "dominators", "path", "inspect", "diff", "info", "sites"] {
        assert!(tools.contains(&tool), "{tool} is not a tool: {tools:?}");
    }
    assert_eq!(seen["tools"]["diff"]["required"], serde_json::json!(["snapshots"]));

    // top by root: the cache global, by its OCaml name, retains most of the heap.
    let top = &seen["top"];
    assert_eq!(top["isError"], false, "{top}");
    let first = &top["body"]["groups"][0];
    assert_eq!(first["name"], "Cache_leak.cache", "{top}");
    assert!(first["retained"].as_u64().unwrap() * 2 > top["body"]["reachable_bytes"].as_u64().unwrap(), "{top}");
    assert_eq!(top["body"]["groups"].as_array().unwrap().len(), 3, "the limit holds: {top}");
    assert!(top["body"]["total_groups"].as_u64().unwrap() > 3, "says what it left out: {top}");

    // path to the Hashtbl: from the global, by name.
    let path = &seen["path"];
    assert_eq!(path["isError"], false, "{path}");
    let roots: Vec<&str> = path["body"]["paths"].as_array().unwrap().iter().map(|p| p["root"].as_str().unwrap()).collect();
    assert!(roots.contains(&"Cache_leak.cache"), "{path}");

    // diff of the series: the cache's Hashtbl grows at every step.
    let diff = &seen["diff"];
    assert_eq!(diff["isError"], false, "{diff}");
    assert_eq!(diff["body"]["snapshots"].as_array().unwrap().len(), 3);
    let suspects = diff["body"]["suspects"].as_array().unwrap();
    assert!(!suspects.is_empty(), "leak suspects: {diff}");
    assert!(suspects.iter().all(|s| s["delta_count"].as_i64().unwrap() > 0 && s["grew_every_step"] == true), "{diff}");

    // Errors are the tool's answer, and the server goes on.
    let damaged = &seen["damaged"];
    assert_eq!(damaged["isError"], true, "{damaged}");
    let said = damaged["body"].as_str().unwrap();
    assert!(said.contains("checksum") && said.ends_with("(bad_snapshot)"), "says what is wrong: {damaged}");
    // cache_leak runs without Gc.Memprof: `sites` says there is nothing sampled.
    let sites = &seen["sites"];
    assert_eq!(sites["isError"], true, "{sites}");
    assert!(sites["body"].as_str().unwrap().contains("no sampled blocks"), "{sites}");
    let bad = &seen["bad_by"];
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(bad["body"].as_str().unwrap().contains("colour"), "{bad}");
    assert_eq!(seen["summary"]["isError"], false);
    assert!(seen["summary"]["body"]["objects"].as_u64().unwrap() > 10_000);
}

/// The same answer as the command line's `--json`, for the same arguments.
#[test]
fn a_tool_answers_as_the_command_line_does() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("s.heapsnap");
    let mut s = crate::dump_support::Sample::start(&samples_dir().join("cache_leak"), &[]);
    s.wait_ready(1);
    crate::dump_support::dump_ok(s.pid(), &snap, &[]);
    drop(s);
    let cli = crate::dump_support::analyse("dominators", &[&snap], &["--depth", "2", "--max-children", "3"]);
    let request = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "dominators", "arguments": {"snapshot": snap, "depth": 2, "max_children": 3}}});
    let mut child = Command::new(heapsnap())
        .arg("mcp")
        .arg("--root")
        .arg(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    writeln!(child.stdin.take().unwrap(), "{request}").unwrap();
    let out = child.wait_with_output().unwrap();
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), cli);
}

/// What the MCP client saw for each path: `summary` asked of it, with the server's roots set
/// as `mode` says (`client-roots ROOT`, `server-root ROOT` or `no-roots`).
fn ask_paths(mode: &[&Path], paths: &[&Path]) -> Vec<Value> {
    let out = Command::new(client_python())
        .arg(repo().join("tests/analysis/mcp_roots_client.py"))
        .arg(heapsnap())
        .args(mode)
        .args(paths)
        .output()
        .expect("run the MCP client");
    assert!(out.status.success(), "the client failed: {}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    seen.as_array().unwrap().clone()
}

/// The server reads only under the roots the client declares or `--root` gives: a path
/// outside, a link out of them and a path with `..` are refused, and no answer holds any of
/// the files' content (a file that is not a snapshot inside the roots is read, and its error
/// says so without its bytes).
#[test]
fn an_agent_cannot_read_outside_the_roots() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("snapshots");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let secret = tmp.path().join("secret.heapsnap");
    std::fs::write(&secret, "root:*:20000:SECRET-OUTSIDE\n".repeat(10)).unwrap();
    let inside = root.join("notes.heapsnap");
    std::fs::write(&inside, "SECRET-INSIDE: not a snapshot\n".repeat(10)).unwrap();
    let link = root.join("link.heapsnap");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let dotdot = root.join("sub/../../secret.heapsnap");
    let dotdot_inside = root.join("sub/../notes.heapsnap");
    let paths = [inside.as_path(), secret.as_path(), link.as_path(), dotdot.as_path(), dotdot_inside.as_path()];
    // The bytes of either file, as text or as the hex list an error once showed.
    let leaks = |text: &str| ["SECRET", "root:", "72, 6f", "53, 45", "0x72", "0x53"].iter().any(|s| text.contains(s));

    for mode in [&[Path::new("client-roots"), &root][..], &[Path::new("server-root"), &root][..]] {
        let seen = ask_paths(mode, &paths);
        assert_eq!(seen.len(), paths.len(), "{seen:?}");
        let mode = mode[0].display();
        for answer in &seen {
            assert_eq!(answer["isError"], true, "{mode}: {answer}");
            assert!(!leaks(answer["text"].as_str().unwrap()), "{mode}: content in the answer: {answer}");
        }
        let text = |i: usize| seen[i]["text"].as_str().unwrap();
        assert!(text(0).contains("not a heapsnap snapshot (bad magic)"), "{mode}: the file inside is read: {}", seen[0]);
        assert!(text(1).contains("refused: outside the roots"), "{mode}: {}", seen[1]);
        assert!(text(2).contains("refused: a link leads out of the roots"), "{mode}: {}", seen[2]);
        assert!(text(3).contains("refused: a path with `..`"), "{mode}: {}", seen[3]);
        assert!(text(4).contains("refused: a path with `..`"), "{mode}: {}", seen[4]);
    }
    // No roots at all: nothing is read.
    let seen = ask_paths(&[Path::new("no-roots")], &[&inside]);
    assert!(seen[0]["text"].as_str().unwrap().contains("has none"), "{}", seen[0]);
}
