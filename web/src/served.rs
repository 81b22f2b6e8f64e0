//! The reports of the registry (`heapsnap_reports::registry`) as routes: `/api/report/NAME`,
//! the report's arguments as query parameters, named as the command line names them
//! (`by=root&limit=5`). The snapshot is `s=N`, the N-th given to `heapsnap serve` (a request
//! names no file); `diff` compares all of them. Answers come from the indexes already open.

use crate::App;
use heapsnap_index::store::Indexed;
use heapsnap_index::Needs;
use heapsnap_reports::{json_args, registry, Loaded, Loader};
use serde_json::{Map, Value};
use std::path::Path;

/// The served snapshots, lent to the reports; any other path is refused.
struct Served<'a>(&'a App);

impl Served<'_> {
    fn find(&self, path: &Path) -> anyhow::Result<&'static Indexed> {
        let shown = self.0.snapshots.iter().find(|s| s.path == path);
        shown.map(|s| s.indexed).ok_or_else(|| anyhow::anyhow!("{} is not a snapshot this server shows", path.display()))
    }
}

impl Loader for Served<'_> {
    fn indexed(&self, path: &Path, needs: Needs) -> anyhow::Result<Loaded<'_>> {
        let indexed = self.find(path)?;
        indexed.view(needs)?;
        Ok(Loaded::Lent(indexed))
    }

    fn snapshot(&self, path: &Path) -> anyhow::Result<heapsnap_format::Snapshot> {
        self.find(path)?;
        heapsnap_reports::open_snapshot(path)
    }
}

/// Runs report `name` on the query's snapshot (`s`, default 0).
pub fn report(app: &App, name: &str, query: &[(String, String)]) -> Result<Value, (u16, String)> {
    let report = registry::find(name).ok_or_else(|| (404, format!("no report {name}")))?;
    let command = report.arguments();
    let mut args = Map::new();
    for (key, value) in query.iter().filter(|(k, _)| k != "token" && k != "s") {
        args.insert(key.clone(), Value::String(value.clone()));
    }
    let s: usize = match query.iter().find(|(k, _)| k == "s") {
        Some((_, v)) => v.parse().map_err(|_| (400, format!("bad s: {v:?}")))?,
        None => 0,
    };
    let shown = app.snapshots.get(s).ok_or((404, format!("no snapshot {s}")))?;
    let path = |p: &Path| Value::String(p.display().to_string());
    if command.get_arguments().any(|a| a.get_id() == "snapshots") {
        args.insert("snapshots".into(), Value::Array(app.snapshots.iter().map(|s| path(&s.path)).collect()));
    } else {
        args.insert("snapshot".into(), path(&shown.path));
    }
    let matches = json_args::matches(&command, &args).map_err(|e| (400, e))?;
    let answer = report.answer(&matches, &Served(app)).map_err(|e| (400, format!("{e:#}")))?;
    Ok(answer.json)
}
