//! The rows of every table, made from one analysis with the functions the reports use: the
//! summary's totals, `top`'s groups, `suspects`, the diff's dominator trie by path signature,
//! and the allocation sites of statmemprof's samples.

use super::identity::key;
use crate::flame::signature_steps;
use heapsnap_analyze::signatures::classify::classify_with_types;
use heapsnap_analyze::signatures::domtrie::{dominator_trie, NOT_A_BLOCK};
use heapsnap_analyze::signatures::trie::{signature_text, SigTrie, StepText};
use heapsnap_analyze::sites::report::site_groups;
use heapsnap_analyze::sites::Sites;
use heapsnap_analyze::{AnalysedHeap, Analysis, GroupBy, MergedPath, NO_NODE};

/// The suspects a snapshot's table keeps at most (the report's default threshold).
pub const SUSPECTS_CAP: usize = 100;
/// The groups of one grouping a table keeps at most, largest retained first.
pub const GROUPS_CAP: usize = 10_000;

/// What to export beside the analysis.
pub struct Options {
    pub snapshot_id: String,
    pub host: Option<String>,
    /// The snapshot file's size in bytes.
    pub snapshot_file_bytes: u64,
    /// How many path signatures `dominator_paths` keeps, largest retained first.
    pub paths: usize,
}

pub struct SnapshotRow {
    pub program: String,
    pub executable: Option<String>,
    pub build_id: Option<String>,
    pub ocaml_version: String,
    pub host: Option<String>,
    pub pid: Option<i64>,
    pub captured_at_us: i64,
    pub trigger: String,
    pub capture_method: Option<String>,
    pub objects: i64,
    pub heap_bytes: i64,
    pub reachable_objects: i64,
    pub reachable_bytes: i64,
    pub unreachable_objects: i64,
    pub unreachable_bytes: i64,
    pub has_names: bool,
    pub typed_bytes: Option<i64>,
    pub snapshot_file_bytes: i64,
    pub heapsnap_version: String,
}

pub struct GroupRow {
    pub grouping: &'static str,
    pub key: i64,
    pub name: String,
    pub count: i64,
    pub shallow_bytes: i64,
    pub retained_bytes: i64,
    pub rank: i32,
}

pub struct SuspectRow {
    pub rank: i32,
    /// `None` only for a suspect without a recorded signature.
    pub key: Option<i64>,
    pub r#type: Option<String>,
    pub kind: String,
    pub description: String,
    pub elements: Option<i64>,
    pub elements_of: Option<String>,
    pub shallow_bytes: i64,
    pub retained_bytes: i64,
    pub percent: f64,
    pub held_by: String,
    pub signature: String,
    pub path_text: String,
    pub path_steps: Vec<String>,
}

pub struct PathRow {
    pub key: i64,
    pub parent_key: Option<i64>,
    pub depth: i32,
    pub root: String,
    pub shape: String,
    pub signature: String,
    pub count: i64,
    pub retained_bytes: i64,
    pub rank: i32,
}

pub struct SiteRow {
    pub key: i64,
    pub location: String,
    pub function: Option<String>,
    pub count: i64,
    pub shallow_bytes: i64,
    pub retained_bytes: i64,
    pub samples: i64,
    pub estimated_bytes: Option<i64>,
    pub rank: i32,
}

pub struct Tables {
    pub snapshot: SnapshotRow,
    pub groups: Vec<GroupRow>,
    pub suspects: Vec<SuspectRow>,
    pub dominator_paths: Vec<PathRow>,
    /// `None` when the snapshot has no statmemprof tables.
    pub sites: Option<Vec<SiteRow>>,
}

/// Bytes and counts as Parquet's signed 64-bit integers (no heap comes near 2^63).
fn int(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

pub fn tables(a: &Analysis<'_>, options: &Options) -> Result<Tables, heapsnap_analyze::AnalyzeError> {
    let named = heapsnap_analyze::diff::has_names(a.snap);
    let mut groups = Vec::new();
    let mut groupings = vec![GroupBy::Kind, GroupBy::Root];
    if named {
        groupings.push(GroupBy::Type);
    }
    for by in groupings {
        let top = heapsnap_analyze::top(a, by, GROUPS_CAP)?;
        groups.extend(top.groups.iter().enumerate().map(|(i, g)| GroupRow {
            grouping: by.name(),
            key: key(by.name(), &g.name),
            name: g.name.clone(),
            count: int(g.count),
            shallow_bytes: int(g.shallow),
            retained_bytes: int(g.retained),
            rank: i as i32 + 1,
        }));
    }
    let sites = match a.snap.memprof() {
        Some(m) if !m.is_empty() => {
            let (site_group_rows, site_rows) = sites(a)?;
            groups.extend(site_group_rows);
            Some(site_rows)
        }
        _ => None,
    };
    // The diff's dominator trie by path signature, with every reachable block's signature.
    let classes = classify_with_types(a, GroupBy::Kind, a.typing());
    let dom = dominator_trie(a, &classes);
    let signatures = Signatures::new(&dom.trie);
    let dominator_paths = dominator_paths(&dom.trie, &signatures, options.paths);
    let signature_of = |v: heapsnap_analyze::NodeId| -> Option<u32> {
        let p = *a.tree.pre_of.get(v as usize)?;
        let sig = *dom.sig_pre.get(p as usize).filter(|_| p != NO_NODE)?;
        (sig != NOT_A_BLOCK && sig != 0).then_some(sig)
    };
    let report = heapsnap_analyze::suspects(a, heapsnap_analyze::SUMMARY_SUSPECTS_MIN_PERCENT, SUSPECTS_CAP);
    let suspects = report
        .suspects
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let sig = signature_of(s.node);
            let (path_text, path_steps) = s.path.as_ref().map(path_text).unwrap_or_default();
            SuspectRow {
                rank: i as i32 + 1,
                key: sig.map(|id| signatures.key(id)),
                r#type: s.r#type.clone(),
                kind: s.kind.clone(),
                description: s.description.clone(),
                elements: s.elements.as_ref().map(|e| int(e.count)),
                elements_of: s.elements.as_ref().map(|e| e.of.clone()),
                shallow_bytes: int(s.shallow),
                retained_bytes: int(s.retained),
                percent: s.percent,
                held_by: s.held_by.clone(),
                signature: sig.map_or_else(String::new, |id| signatures.text(id)),
                path_text,
                path_steps,
            }
        })
        .collect();
    Ok(Tables { snapshot: snapshot_row(a, options, named), groups, suspects, dominator_paths, sites })
}

fn snapshot_row(a: &Analysis<'_>, options: &Options, has_names: bool) -> SnapshotRow {
    let meta = a.snap.metadata();
    let totals = heapsnap_analyze::summary(a, 0);
    let program = meta
        .executable
        .as_deref()
        .map(|e| std::path::Path::new(e).file_name().map_or_else(|| e.to_string(), |f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    SnapshotRow {
        program,
        executable: meta.executable.clone(),
        build_id: meta.build_id.clone(),
        ocaml_version: meta.ocaml_version.clone(),
        host: options.host.clone(),
        pid: meta.pid.map(i64::from),
        captured_at_us: int(meta.time_unix_ns / 1000),
        trigger: serde_json::to_value(meta.trigger).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        capture_method: meta.capture.as_ref().map(|c| c.method.clone()),
        objects: int(totals.objects),
        heap_bytes: int(totals.bytes),
        reachable_objects: int(totals.reachable_objects),
        reachable_bytes: int(totals.reachable_bytes),
        unreachable_objects: int(totals.unreachable_objects),
        unreachable_bytes: int(totals.unreachable_bytes),
        has_names,
        typed_bytes: a.typing().map(|t| int(t.typed_bytes)),
        snapshot_file_bytes: int(options.snapshot_file_bytes),
        heapsnap_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// The text and key of each signature of a dominator trie.
struct Signatures<'t> {
    trie: &'t SigTrie,
}

impl<'t> Signatures<'t> {
    fn new(trie: &'t SigTrie) -> Self {
        Signatures { trie }
    }

    fn steps(&self, id: u32) -> Vec<StepText> {
        signature_steps(self.trie, id)
    }

    /// As REPORTS.md writes a path signature (`+` after a folded run).
    fn text(&self, id: u32) -> String {
        signature_text(&self.steps(id), false)
    }

    /// The key of the place: its signature without the `+` of folded runs, which say how many
    /// objects this snapshot has there (one cell or a run), not which place it is.
    fn key(&self, id: u32) -> i64 {
        let mut steps = self.steps(id);
        for s in &mut steps {
            s.folded = false;
        }
        key("path", &signature_text(&steps, false))
    }
}

/// The `limit` signatures that retain most (ties by signature text), ranked.
fn dominator_paths(trie: &SigTrie, signatures: &Signatures<'_>, limit: usize) -> Vec<PathRow> {
    let retained = |id: u32| trie.nodes[id as usize].retained;
    let mut ids: Vec<u32> = (1..trie.len() as u32).collect();
    ids.sort_unstable_by_key(|&id| std::cmp::Reverse(retained(id)));
    // Those tied with the last one kept are ordered by their text, so that the rows do not
    // depend on the order the trie met them in; the text is made for those only.
    let cut = ids.get(limit.saturating_sub(1)).map_or(0, |&id| retained(id));
    let keep = if ids.len() > limit { ids.iter().take_while(|&&id| retained(id) >= cut).count() } else { ids.len() };
    ids.truncate(keep);
    let mut texts: Vec<(u32, String)> = ids.into_iter().map(|id| (id, signatures.text(id))).collect();
    texts.sort_by(|(x, tx), (y, ty)| retained(*y).cmp(&retained(*x)).then_with(|| tx.cmp(ty)));
    texts.truncate(limit);
    texts
        .into_iter()
        .enumerate()
        .map(|(i, (id, signature))| {
            let node = &trie.nodes[id as usize];
            let shape = signatures.steps(id).pop().map(|s| s.shape).unwrap_or_default();
            PathRow {
                key: signatures.key(id),
                parent_key: (node.parent != 0).then(|| signatures.key(node.parent)),
                depth: i32::from(node.depth),
                root: trie.root_labels.get(node.root as usize).cloned().unwrap_or_default(),
                shape,
                signature,
                count: int(node.count),
                retained_bytes: int(node.retained),
                rank: i as i32 + 1,
            }
        })
        .collect()
}

/// A suspect's shortest path from its root, as one text and as steps (`ROOT`, then `SHAPE` or
/// `.FIELD SHAPE` per object; `[*]` for an element of a large block).
fn path_text(p: &MergedPath) -> (String, Vec<String>) {
    let mut steps = vec![p.root.clone()];
    for s in &p.steps {
        let repeat = if s.repeat_max > 1 { format!(" (x{}..{})", s.repeat_min, s.repeat_max) } else { String::new() };
        steps.push(match s.field.as_deref() {
            None => format!("{}{repeat}", s.label),
            Some("*") => format!("[*] {}{repeat}", s.label),
            Some(f) => format!(".{f} {}{repeat}", s.label),
        });
    }
    (steps.join(" -> "), steps)
}

/// The groups by allocation site (innermost frame outside the standard library), and the
/// `sites` table's rows: both ranked by retained bytes.
fn sites(a: &Analysis<'_>) -> Result<(Vec<GroupRow>, Vec<SiteRow>), heapsnap_analyze::AnalyzeError> {
    let sites = Sites::new(a, None)?;
    let mut all = site_groups(a, &sites, 1);
    all.sort_by(|x, y| y.retained.cmp(&x.retained).then_with(|| x.site.cmp(&y.site)));
    all.truncate(GROUPS_CAP);
    let groups = all
        .iter()
        .enumerate()
        .map(|(i, g)| GroupRow {
            grouping: "site",
            key: key("site", &g.site),
            name: g.site.clone(),
            count: int(g.count),
            shallow_bytes: int(g.sampled_bytes),
            retained_bytes: int(g.retained),
            rank: i as i32 + 1,
        })
        .collect();
    let rows = all
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let frame = g.frames.first();
            SiteRow {
                key: key("site", &g.site),
                location: frame.map_or_else(|| g.site.clone(), |f| f.location()),
                function: frame.map(|f| f.function.clone()).filter(|f| !f.is_empty()),
                count: int(g.count),
                shallow_bytes: int(g.sampled_bytes),
                retained_bytes: int(g.retained),
                samples: int(g.samples),
                estimated_bytes: Some(int(g.estimated_bytes)),
                rank: i as i32 + 1,
            }
        })
        .collect();
    Ok((groups, rows))
}
