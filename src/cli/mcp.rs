//! `heapsnap mcp`: the reports as Model Context Protocol tools, for AI agents. JSON-RPC 2.0,
//! one message a line on stdin and stdout (the MCP "stdio" transport); logs and warnings go
//! to stderr. The tools are the reports' registry: one tool per report, its arguments the
//! command line's by name, its result the report's JSON.
//!
//! Hand-written over serde_json rather than the `rmcp` SDK: the server needs five methods
//! over a blocking line protocol, and rmcp would bring tokio, futures and schemars into a
//! build that has none of them.

use super::errors;
use super::mcp_roots::Roots;
use clap::Args;
use heapsnap_reports::registry::REPORTS;
use heapsnap_reports::{json_args, Entry, Files};
use serde_json::{json, Map, Value};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct McpArgs {
    /// A directory whose snapshots the tools may read (repeatable), besides the roots the
    /// client declares; no path elsewhere is read.
    #[arg(long, value_name = "DIR")]
    root: Vec<PathBuf>,
}

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
a snapshot saves its analysis index beside it (SNAP.hsidx). Files are read only under the roots the client declares \
(MCP roots) and the directories the server was started with (`--root DIR`): a path elsewhere, with `..` in it, or \
through a link that leads out of them is refused.";

pub fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let mut server = Server::new(Roots::given(&args.root)?);
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        for message in server.handle_line(&line) {
            writeln!(stdout, "{message}")?;
        }
        stdout.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The id of this server's `roots/list` requests (the only requests it sends).
const ROOTS_REQUEST: &str = "heapsnap-roots";

/// One session with one client: where it may read, and the calls that wait for the client's
/// roots.
pub struct Server {
    roots: Roots,
    /// The client said in `initialize` that it has roots: they are asked for once it is
    /// initialised, and again when it says they changed.
    client_has_roots: bool,
    /// A `roots/list` was sent and not answered: tool calls wait for the answer.
    roots_pending: bool,
    waiting_calls: Vec<Value>,
}

impl Server {
    pub fn new(roots: Roots) -> Server {
        Server { roots, client_has_roots: false, roots_pending: false, waiting_calls: Vec::new() }
    }

    /// What to write for one line: replies (a batch's in one array), requests to the client,
    /// and the replies to calls that waited for the client's roots.
    pub fn handle_line(&mut self, line: &str) -> Vec<Value> {
        let mut out = Vec::new();
        match serde_json::from_str::<Value>(line) {
            Err(e) => out.push(error_reply(Value::Null, -32700, &format!("parse error: {e}"))),
            Ok(Value::Array(batch)) if !batch.is_empty() => {
                let replies: Vec<Value> = batch.iter().filter_map(|m| self.handle_message(m, &mut out)).collect();
                if !replies.is_empty() {
                    out.insert(0, Value::Array(replies));
                }
            }
            Ok(message) => {
                if let Some(reply) = self.handle_message(&message, &mut out) {
                    out.insert(0, reply);
                }
            }
        }
        out
    }

    /// The reply to one message, if it gets one; anything else to write goes to `also`.
    fn handle_message(&mut self, message: &Value, also: &mut Vec<Value>) -> Option<Value> {
        let id = message.get("id").cloned();
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            if id.as_ref().and_then(Value::as_str) == Some(ROOTS_REQUEST) {
                self.roots_answered(message, also);
                return None;
            }
            // A response to no request of this server's, or nonsense.
            return match id {
                Some(id) if message.get("result").is_none() && message.get("error").is_none() => {
                    Some(error_reply(id, -32600, "invalid request: no method"))
                }
                _ => None,
            };
        };
        match method {
            "notifications/initialized" | "notifications/roots/list_changed" if self.client_has_roots => {
                self.roots_pending = true;
                also.push(json!({"jsonrpc": "2.0", "id": ROOTS_REQUEST, "method": "roots/list"}));
            }
            "tools/call" if self.roots_pending && id.is_some() => {
                self.waiting_calls.push(message.clone());
                return None;
            }
            _ => {}
        }
        // Notifications (`notifications/initialized`, `notifications/cancelled`, ...) get no reply.
        let id = id?;
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Some(error_reply(id, -32600, "invalid request: jsonrpc must be \"2.0\""));
        }
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let result = match method {
            "initialize" => {
                self.client_has_roots = params.pointer("/capabilities/roots").is_some_and(Value::is_object);
                Ok(initialize(&params))
            }
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": REPORTS.iter().map(|r| tool(*r)).collect::<Vec<_>>()})),
            "tools/call" => call(&params, &self.roots),
            other => Err((-32601, format!("method not found: {other}"))),
        };
        Some(match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, text)) => error_reply(id, code, &text),
        })
    }

    /// The client's answer to `roots/list`: its roots from now on (none, if it answered with an
    /// error), then the calls that waited for them.
    fn roots_answered(&mut self, response: &Value, also: &mut Vec<Value>) {
        let uris: Vec<&str> = response
            .pointer("/result/roots")
            .and_then(Value::as_array)
            .map(|roots| roots.iter().filter_map(|r| r.get("uri").and_then(Value::as_str)).collect())
            .unwrap_or_default();
        if let Some(error) = response.get("error") {
            eprintln!("heapsnap mcp: the client answered roots/list with an error: {error}");
        }
        self.roots.declare(&uris);
        self.roots_pending = false;
        for call in std::mem::take(&mut self.waiting_calls) {
            if let Some(reply) = self.handle_message(&call, also) {
                also.push(reply);
            }
        }
    }
}

fn error_reply(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
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
fn call(params: &Value, roots: &Roots) -> Result<Value, (i64, String)> {
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
    for path in paths_given(&report.arguments(), &matches) {
        if let Err(refused) = roots.check(&path) {
            return Ok(tool_error(&refused));
        }
    }
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

/// Every file or directory path among a call's arguments (the arguments whose values are paths).
fn paths_given(arguments: &clap::Command, matches: &clap::ArgMatches) -> Vec<PathBuf> {
    arguments
        .get_arguments()
        .filter(|arg| arg.get_value_parser().type_id() == std::any::TypeId::of::<PathBuf>())
        .filter_map(|arg| matches.get_raw(arg.get_id().as_str()))
        .flatten()
        .map(|raw| Path::new(raw).to_path_buf())
        .collect()
}

fn tool_error(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle_line(line: &str) -> Option<Value> {
        Server::new(Roots::default()).handle_line(line).into_iter().next()
    }

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

    /// A client with roots is asked for them once initialised; a call made meanwhile waits for
    /// the answer, then reads under them only.
    #[test]
    fn tool_calls_wait_for_the_clients_roots_and_stay_under_them() {
        let tmp = tempfile::tempdir().unwrap();
        let inside = tmp.path().join("inside.heapsnap");
        std::fs::write(&inside, "SECRET-CONTENT\n".repeat(10)).unwrap();
        let mut server = Server::new(Roots::default());
        let init = server
            .handle_line(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"roots":{"listChanged":true}}}}"#);
        assert_eq!(init.len(), 1);
        let asked = server.handle_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(asked, [json!({"jsonrpc": "2.0", "id": ROOTS_REQUEST, "method": "roots/list"})]);
        let call = |path: &Path| {
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "summary", "arguments": {"snapshot": path}}})
                .to_string()
        };
        assert!(server.handle_line(&call(&inside)).is_empty(), "the call waits for the roots");
        let roots =
            json!({"jsonrpc": "2.0", "id": ROOTS_REQUEST, "result": {"roots": [{"uri": format!("file://{}", tmp.path().display())}]}});
        let replies = server.handle_line(&roots.to_string());
        assert_eq!(replies.len(), 1, "{replies:?}");
        let text = replies[0]["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("not a heapsnap snapshot (bad magic)") && !text.contains("SECRET") && !text.contains("53, 45"), "{text}");
        let replies = server.handle_line(&call(Path::new("/etc/passwd")));
        let text = replies[0]["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("outside the roots") && !text.contains("root:"), "{text}");
    }
}
