//! `heapsnap mcp`: the reports as Model Context Protocol tools, for AI agents. JSON-RPC 2.0,
//! one message a line on stdin and stdout (the MCP "stdio" transport); logs and warnings go
//! to stderr. The tools are the reports' registry: one tool per report, its arguments the
//! command line's by name, its result the report's JSON.
//!
//! Hand-written over serde_json rather than the `rmcp` SDK: the server needs five methods
//! over a blocking line protocol, and rmcp would bring tokio, futures and schemars into a
//! build that has none of them.

use super::errors;
use clap::Args;
use heapsnap_reports::registry::REPORTS;
use heapsnap_reports::{json_args, Entry, Files};
use serde_json::{json, Map, Value};
use std::io::{BufRead, Write};
use std::process::ExitCode;

#[derive(Args)]
pub struct McpArgs {}

/// The protocol versions this server speaks, newest first.
const PROTOCOL_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];

/// The most JSON text a tool answers with: past it, the answer is refused with the limits to
/// lower, rather than flooding the agent's context. The reports' default limits stay far below.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

const INSTRUCTIONS: &str = "heapsnap answers questions about heap snapshots of OCaml programs (.heapsnap files): \
start with `summary`, then `top` (by kind, root, type, closure, site), `dominators`, `path` (who keeps an object \
or a kind alive), `inspect` (one object) and `diff` (2+ snapshots of one program: what grew, leak suspects). \
Every tool takes the snapshot's path; lists are bounded by `limit`-style arguments (0: no limit) and say what \
they left out (`total_groups`, `omitted_children`, `more_fields`, ...). The tools only read: the first report on \
a snapshot saves its analysis index beside it (SNAP.hsidx).";

pub fn run(_args: McpArgs) -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        if let Some(reply) = handle_line(&line) {
            writeln!(stdout, "{reply}")?;
            stdout.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The reply to one line: a message, a batch of them, or nothing (notifications).
pub fn handle_line(line: &str) -> Option<Value> {
    match serde_json::from_str::<Value>(line) {
        Err(e) => Some(error_reply(Value::Null, -32700, &format!("parse error: {e}"))),
        Ok(Value::Array(batch)) if !batch.is_empty() => {
            let replies: Vec<Value> = batch.iter().filter_map(handle_message).collect();
            (!replies.is_empty()).then_some(Value::Array(replies))
        }
        Ok(message) => handle_message(&message),
    }
}

fn error_reply(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn handle_message(message: &Value) -> Option<Value> {
    let id = message.get("id").cloned();
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        // A response from the client (this server sends no requests), or nonsense.
        return match id {
            Some(id) if message.get("result").is_none() && message.get("error").is_none() => {
                Some(error_reply(id, -32600, "invalid request: no method"))
            }
            _ => None,
        };
    };
    // Notifications (`notifications/initialized`, `notifications/cancelled`, ...) get no reply.
    let id = id?;
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some(error_reply(id, -32600, "invalid request: jsonrpc must be \"2.0\""));
    }
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let result = match method {
        "initialize" => Ok(initialize(&params)),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": REPORTS.iter().map(|r| tool(*r)).collect::<Vec<_>>()})),
        "tools/call" => call(&params),
        other => Err((-32601, format!("method not found: {other}"))),
    };
    Some(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, text)) => error_reply(id, code, &text),
    })
}

/// The client's protocol version when this server speaks it, else the newest this one speaks
/// (the client then decides whether to go on).
fn initialize(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked.filter(|v| PROTOCOL_VERSIONS.contains(v)).unwrap_or(PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "heapsnap", "version": env!("CARGO_PKG_VERSION")},
        "instructions": INSTRUCTIONS,
    })
}

fn tool(report: &dyn Entry) -> Value {
    json!({
        "name": report.name(),
        "description": report.about(),
        "inputSchema": json_args::schema(&report.arguments()),
        "annotations": {"readOnlyHint": true, "openWorldHint": false},
    })
}

/// `tools/call`: an unknown tool is a protocol error; anything that goes wrong running a known
/// one (bad arguments, a missing or damaged snapshot) is a tool result with `isError`.
fn call(params: &Value) -> Result<Value, (i64, String)> {
    let name = params.get("name").and_then(Value::as_str).ok_or((-32602, "tools/call needs a tool name".to_string()))?;
    let report = heapsnap_reports::registry::find(name).ok_or_else(|| (-32602, format!("unknown tool: {name}")))?;
    let empty = Map::new();
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(other) => return Ok(tool_error(&format!("arguments must be an object, not {other}"))),
    };
    let matches = match json_args::matches(&report.arguments(), arguments) {
        Ok(m) => m,
        Err(e) => return Ok(tool_error(&format!("bad arguments for {name}: {e}"))),
    };
    // A report that panics on some snapshot is that call's error, not the server's end.
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| report.answer(&matches, &Files)));
    Ok(match answer {
        Ok(Ok(answer)) => {
            let text = serde_json::to_string(&answer.json).expect("JSON values serialise");
            if text.len() > MAX_ANSWER_BYTES {
                tool_error(&format!(
                    "the answer is {} bytes, more than the {MAX_ANSWER_BYTES} this server gives at once: ask for less (a smaller `limit`, `max_children`, `depth`, `max_fields`; 0 means no limit)",
                    text.len()
                ))
            } else {
                // `verify` answers a failing snapshot with its report: the report is the result.
                json!({"content": [{"type": "text", "text": text}], "isError": false})
            }
        }
        Ok(Err(err)) => tool_error(&format!("{} ({})", errors::message(&err), errors::kind(&err))),
        Err(panic) => {
            let what = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            tool_error(&format!("internal error in {name}: {}", what.unwrap_or_default()))
        }
    })
}

fn tool_error(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &str) -> Value {
        handle_line(line).expect("a reply")
    }

    #[test]
    fn negotiates_the_protocol_version() {
        let r = reply(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        );
        assert_eq!(r["result"]["protocolVersion"], "2024-11-05");
        let r = reply(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#);
        assert_eq!(r["result"]["protocolVersion"], PROTOCOL_VERSIONS[0]);
        assert!(r["result"]["capabilities"]["tools"].is_object());
    }

    #[test]
    fn notifications_get_no_reply() {
        assert!(handle_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_none());
    }

    #[test]
    fn protocol_faults_are_json_rpc_errors() {
        assert_eq!(reply("{not json")["error"]["code"], -32700);
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":3,"method":"resources/list"}"#)["error"]["code"], -32601);
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"dump"}}"#)["error"]["code"], -32602);
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":5}"#)["error"]["code"], -32600);
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#)["result"], json!({}));
    }

    #[test]
    fn the_tools_are_the_reports() {
        let r = reply(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
        let names: Vec<&str> = r["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        let reports: Vec<&str> = REPORTS.iter().map(|r| r.name()).collect();
        assert_eq!(names, reports);
        let top = &r["result"]["tools"][1];
        assert_eq!(top["inputSchema"]["required"], json!(["snapshot"]));
        assert_eq!(top["inputSchema"]["properties"]["limit"]["default"], json!(30.0));
        assert!(top["inputSchema"]["properties"]["by"]["enum"].as_array().unwrap().contains(&json!("site")));
        assert!(top["inputSchema"]["properties"].get("json").is_none());
    }

    #[test]
    fn bad_arguments_and_missing_files_are_tool_errors() {
        let call = |args: &str| {
            reply(&format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"top","arguments":{args}}}}}"#))
        };
        let r = call(r#"{"snapshot":"/nonexistent/x.heapsnap"}"#);
        assert_eq!(r["result"]["isError"], true);
        assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("/nonexistent/x.heapsnap"), "{r}");
        let r = call(r#"{"snapshot":"x","by":"colour"}"#);
        assert_eq!(r["result"]["isError"], true);
        assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("colour"), "{r}");
        let r = call(r#"{"snapshot":"x","lmit":3}"#);
        assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("unknown argument \"lmit\""), "{r}");
        let r = call(r#"{}"#);
        assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("<SNAPSHOT>"), "{r}");
    }
}
