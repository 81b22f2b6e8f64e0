//! A report's arguments given as JSON (MCP tool calls, the web UI's queries): named as the
//! command line's arguments are (`snapshot`, `by`, `limit`, `max_children`; `max-children` is
//! taken too), checked and defaulted by the same clap definitions, so both front ends accept
//! exactly the same things. The JSON schema of the arguments (MCP's `inputSchema`) comes from
//! the same definitions.

use clap::builder::ArgAction;
use clap::{Arg, ArgMatches, Command};
use serde_json::{json, Map, Value};
use std::any::TypeId;

/// Arguments that are the command line's alone: clap's own, and `--json` (JSON callers always
/// get JSON).
fn is_cli_only(arg: &Arg) -> bool {
    matches!(arg.get_id().as_str(), "help" | "version" | "json")
}

/// The command as clap completes it before parsing (positions numbered).
fn built(cmd: &Command) -> Command {
    let mut cmd = cmd.clone().color(clap::ColorChoice::Never);
    cmd.build();
    cmd
}

fn json_args(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| !is_cli_only(a) && !a.is_hide_set())
}

fn is_switch(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse)
}

fn is_list(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|n| n.max_values() > 1)
}

/// The JSON type of one value of an argument.
fn value_schema(arg: &Arg) -> Value {
    let values: Vec<String> = arg.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| v.get_name().to_string()).collect();
    if !values.is_empty() {
        return json!({"type": "string", "enum": values});
    }
    let id = arg.get_value_parser().type_id();
    let integers =
        [TypeId::of::<u8>(), TypeId::of::<u16>(), TypeId::of::<u32>(), TypeId::of::<u64>(), TypeId::of::<usize>(), TypeId::of::<i64>()];
    if arg.get_value_names().is_some_and(|n| n.iter().any(|n| n.as_str() == "ADDRESS")) {
        // Addresses are hex strings everywhere in heapsnap's JSON (`"0x7f..."`); decimal is taken too.
        json!({"type": ["string", "integer"]})
    } else if integers.iter().any(|t| id == *t) {
        json!({"type": "integer", "minimum": 0})
    } else if id == TypeId::of::<f64>() {
        json!({"type": "number"})
    } else {
        json!({"type": "string"})
    }
}

/// The JSON schema (an object) of a report's arguments.
pub fn schema(cmd: &Command) -> Value {
    let cmd = &built(cmd);
    let mut properties = Map::new();
    let mut required = Vec::new();
    for arg in json_args(cmd) {
        let mut s = if is_switch(arg) {
            json!({"type": "boolean"})
        } else if is_list(arg) {
            let mut list = json!({"type": "array", "items": value_schema(arg)});
            if let Some(min) = arg.get_num_args().map(|n| n.min_values()).filter(|&n| n > 1) {
                list["minItems"] = json!(min);
            }
            list
        } else {
            value_schema(arg)
        };
        let help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string());
        if let Some(help) = help {
            s["description"] = json!(help);
        }
        let defaults: Vec<String> = arg.get_default_values().iter().map(|d| d.to_string_lossy().into_owned()).collect();
        if let [d] = defaults.as_slice() {
            if !is_switch(arg) {
                s["default"] = match (s["type"].as_str(), d.parse::<f64>()) {
                    (Some("integer" | "number"), Ok(x)) => json!(x),
                    _ => json!(d),
                };
            }
        }
        if arg.is_required_set() {
            required.push(json!(arg.get_id().as_str()));
        }
        properties.insert(arg.get_id().to_string(), s);
    }
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

/// One JSON value as a command-line word.
fn word(name: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(format!("{name}: expected a string or a number, got {other}")),
    }
}

/// Parses JSON arguments with the report's own clap definitions: the same defaults, checks
/// and errors as on the command line.
pub fn matches(cmd: &Command, args: &Map<String, Value>) -> Result<ArgMatches, String> {
    let cmd = &built(cmd);
    let known: Vec<&Arg> = json_args(cmd).collect();
    let mut options = Vec::new();
    let mut positionals: Vec<(usize, Vec<String>)> = Vec::new();
    for (key, value) in args {
        let id = key.replace('-', "_");
        let Some(arg) = known.iter().find(|a| a.get_id().as_str() == id) else {
            let names: Vec<&str> = known.iter().map(|a| a.get_id().as_str()).collect();
            return Err(format!("unknown argument {key:?} (the arguments are: {})", names.join(", ")));
        };
        if value.is_null() {
            continue;
        }
        if is_switch(arg) {
            match value {
                // "true" and "false" as text too: URL queries hold nothing else.
                Value::Bool(true) => options.push(format!("--{}", arg.get_long().unwrap_or(&id))),
                Value::String(s) if s == "true" => options.push(format!("--{}", arg.get_long().unwrap_or(&id))),
                Value::Bool(false) => {}
                Value::String(s) if s == "false" => {}
                other => return Err(format!("{key}: expected true or false, got {other}")),
            }
            continue;
        }
        let values: Vec<String> = match value {
            Value::Array(items) if is_list(arg) => items.iter().map(|v| word(key, v)).collect::<Result<_, _>>()?,
            Value::Array(_) => return Err(format!("{key}: expected one value, got a list")),
            v => vec![word(key, v)?],
        };
        match (arg.get_index(), arg.get_long()) {
            (Some(i), _) => positionals.push((i, values)),
            // `--name=value`: a value that starts with `-` stays a value.
            (None, Some(long)) => options.extend(values.iter().map(|v| format!("--{long}={v}"))),
            (None, None) => return Err(format!("{key}: not an argument a JSON caller can give")),
        }
    }
    positionals.sort();
    // Positional values fill the positions in order: one left out would shift the next into
    // its place (an address taken for the snapshot).
    for (n, (index, _)) in positionals.iter().enumerate() {
        if *index != n + 1 {
            let missing = known.iter().find(|a| a.get_index() == Some(n + 1)).map_or("?", |a| a.get_id().as_str());
            return Err(format!("missing argument {missing:?}"));
        }
    }
    // After `--`, every word is a positional value, whatever it looks like.
    let argv = std::iter::once(cmd.get_name().to_string())
        .chain(options)
        .chain(std::iter::once("--".to_string()))
        .chain(positionals.into_iter().flat_map(|(_, v)| v));
    cmd.clone().try_get_matches_from(argv).map_err(|e| clap_message(&e))
}

/// A clap error on one line, without the usage and `--help` lines meant for a terminal:
/// `the following required arguments were not provided: <SNAPSHOT>`.
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let said: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
    let line = said.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}
