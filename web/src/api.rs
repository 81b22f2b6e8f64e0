//! The JSON answers of `/api/...`, each from a snapshot's index.

use crate::App;
use heapsnap_analyze::sites::report::site_top;
use heapsnap_analyze::sites::Sites;
use heapsnap_analyze::{AnalysedHeap, GroupBy, HeapFacts, NodeId, PathQuery, PointsTo};
use heapsnap_index::IndexView;
use serde_json::{json, Value};

type Answer = Result<Value, (u16, String)>;

fn bad(message: impl Into<String>) -> (u16, String) {
    (400, message.into())
}

fn param<'q>(query: &'q [(String, String)], name: &str) -> Option<&'q str> {
    query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn number<T: std::str::FromStr>(query: &[(String, String)], name: &str, default: T) -> Result<T, (u16, String)> {
    match param(query, name) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| bad(format!("bad {name}: {v:?}"))),
    }
}

pub fn answer(app: &App, route: &str, query: &[(String, String)]) -> Answer {
    if route == "snapshots" {
        return Ok(json!({
            "snapshots": app.snapshots.iter().enumerate().map(|(i, s)| json!({
                "index": i,
                "name": s.name,
                "objects": s.view.meta.summary.objects,
                "reachable_bytes": s.view.reachable_bytes(),
            })).collect::<Vec<_>>(),
            "diff": app.diff.is_some(),
        }));
    }
    if route == "diff" {
        return app.diff.clone().ok_or((404, "the diff needs two snapshots or more".into()));
    }
    if let Some(name) = route.strip_prefix("report/") {
        return crate::served::report(app, name, query);
    }
    let s: usize = number(query, "s", 0)?;
    let shown = app.snapshots.get(s).ok_or((404, format!("no snapshot {s}")))?;
    let view = &shown.view;
    match route {
        // The page's summary: the `summary` report with its 15 largest kinds.
        "summary" => crate::served::report(app, "summary", &[("s".into(), s.to_string()), ("limit".into(), "15".into())]),
        "groups" => {
            let name = param(query, "by").unwrap_or("kind");
            let by = GroupBy::from_name(name).ok_or_else(|| bad(format!("no grouping {name}")))?;
            // A grouping the snapshot cannot give (`tag` without reserved bits) lists no groups.
            let groups = view.groups(by).unwrap_or_default();
            Ok(json!({ "reachable_bytes": view.reachable_bytes(), "groups": groups }))
        }
        "tree" => {
            let node: NodeId = number(query, "node", 0)?;
            let limit: usize = number(query, "limit", 50)?;
            let offset: usize = number(query, "offset", 0)?;
            Ok(tree(view, node, offset, limit.min(1000)))
        }
        "object" => {
            let node: NodeId = match param(query, "address") {
                Some(a) => {
                    let x = u64::from_str_radix(a.trim_start_matches("0x"), 16).map_err(|_| bad(format!("bad address {a:?}")))?;
                    view.node_at(x).map_err(|_| (404, format!("no block at {a}")))?
                }
                None => number(query, "node", 0)?,
            };
            object(view, node)
        }
        "sites" => {
            // Allocation sites from the call stacks the program's tracker stored (memtrace ids
            // need their trace: `heapsnap top --by site --memtrace FILE`).
            let depth: usize = number(query, "depth", 1)?;
            let sites = shown.sites.get_or_init(|| Sites::new(view, None).map_err(|e| e.to_string()));
            let sites = sites.as_ref().map_err(|e| (404, e.clone()))?;
            Ok(serde_json::to_value(site_top(view, sites, depth.clamp(1, 64), 500)).expect("serialises"))
        }
        _ => Err((404, format!("no such view: {route}"))),
    }
}

/// The flame graph (SVG) of snapshot `snapshot`, stacked `by` (`root`, `kind`, `reserved` or
/// `closure`). Not `s`: inferno's script reads `s` from its URL as a search term.
pub fn flame(app: &App, query: &[(String, String)]) -> Result<std::sync::Arc<Vec<u8>>, (u16, String)> {
    let s: usize = number(query, "snapshot", 0)?;
    let shown = app.snapshots.get(s).ok_or((404, format!("no snapshot {s}")))?;
    let name = param(query, "by").unwrap_or("root");
    let by = GroupBy::from_name(name).ok_or_else(|| bad(format!("no grouping {name}")))?;
    app.flames.svg(s, &shown.name, shown.indexed, by).map_err(|e| (500, e))
}

fn tree_row(view: &IndexView<'_>, v: NodeId) -> Value {
    let mut row = serde_json::to_value(view.tree_node(v)).expect("serialises");
    row["children_count"] = json!(view.children_count(v));
    row
}

/// A node and one page of its children in the dominator tree, largest first.
fn tree(view: &IndexView<'_>, node: NodeId, offset: usize, limit: usize) -> Value {
    let children: Vec<Value> = view.children_iter(node).skip(offset).take(limit).map(|c| tree_row(view, c)).collect();
    let total = view.children_count(node);
    json!({ "node": tree_row(view, node), "children": children, "offset": offset, "total": total })
}

/// One object: what `inspect` says, its fields' targets as nodes, its dominator chain and its
/// merged retainer paths.
fn object(view: &IndexView<'_>, node: NodeId) -> Answer {
    let chain: Vec<Value> = view.dominator_chain(node).into_iter().map(|v| tree_row(view, v)).collect();
    let Some(address) = view.address(node) else {
        // The super-root and the root kinds: no block, their children are the view.
        return Ok(json!({ "node": tree_row(view, node), "chain": chain }));
    };
    let inspection = heapsnap_analyze::inspect(view, address, 256).map_err(|e| (404, e.to_string()))?;
    let links: Vec<Value> = inspection
        .fields
        .iter()
        .filter_map(|f| {
            let raw = u64::from_str_radix(f.raw.trim_start_matches("0x"), 16).ok()?;
            if raw & 1 == 1 || raw == 0 || !matches!(f.kind.as_str(), "pointer" | "weak" | "ephemeron_data") {
                return None;
            }
            match view.resolve(raw) {
                PointsTo::Node(n) => Some(json!({ "index": f.index, "node": n })),
                _ => None,
            }
        })
        .collect();
    let referrers: Vec<Value> =
        view.referrers(node, 16).into_iter().map(|u| json!({ "node": u, "description": view.with_address(u) })).collect();
    let paths = heapsnap_analyze::paths(view, &PathQuery::Address(address), 1, 10).map_err(|e| (404, e.to_string()))?;
    Ok(json!({
        "node": tree_row(view, node),
        "inspection": inspection,
        "links": links,
        "referrers": referrers,
        "chain": chain,
        "paths": paths,
    }))
}
