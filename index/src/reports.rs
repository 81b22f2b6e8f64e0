//! The reports of `heapsnap-analyze`, answered from an index: the same structs and the same
//! JSON (REPORTS.md), compared against the full analysis in this crate's tests.

use crate::build::grouping_name;
use crate::view::{IndexView, NodeKind};
use heapsnap_analyze::blocks::{BlockRef, NodeId, NO_NODE};
use heapsnap_analyze::groups::{shape_key, Group, GroupBy, GroupKey};
use heapsnap_analyze::inspect::{Field, Inspection};
use heapsnap_analyze::ocaml;
use heapsnap_analyze::paths::{MergedPath, PathQuery, PathsReport, Step};
use heapsnap_analyze::reports::{Summary, TreeNode};
use heapsnap_analyze::AnalyzeError;
use rustc_hash::FxHashMap as HashMap;

const NO_FIELD: u32 = u32::MAX;
const FOLDED: u32 = u32::MAX - 1;
/// As in `heapsnap_analyze::paths`: merged paths fold the field index of larger blocks.
const FOLD_ABOVE_FIELDS: u64 = 16;
const STEP_BUDGET: usize = 4_000_000;

impl<'s> IndexView<'s> {
    pub fn summary(&self, top: usize) -> Summary {
        let mut s = self.meta.summary.clone();
        s.top_groups = self.groups(GroupBy::Kind).iter().take(top).cloned().collect();
        s
    }

    pub fn groups(&self, by: GroupBy) -> &[Group] {
        self.meta.groups.get(grouping_name(by)).map_or(&[], Vec::as_slice)
    }

    /// One node of the dominator tree report, without children.
    pub fn tree_node(&self, v: NodeId) -> TreeNode {
        let total = self.reachable_bytes().max(1);
        let root = match self.idom(v) {
            Some(d) if d < self.meta.first_block_node => (self.node_kind(v) == Some(NodeKind::Block)).then(|| self.top_label(v)),
            _ => None,
        };
        TreeNode {
            node: v,
            address: self.address(v).map(|x| format!("{x:#x}")),
            description: self.describe(v),
            root,
            shallow: self.shallow(v),
            retained: self.retained(v),
            percent: self.retained(v) as f64 * 100.0 / total as f64,
            children: Vec::new(),
            omitted_children: 0,
            omitted_retained: 0,
            similar: None,
        }
    }

    /// The dominator tree report (as `heapsnap_analyze::reports::dominator_report`).
    pub fn dominator_report(&self, depth: usize, min_percent: f64, max_children: usize) -> TreeNode {
        self.subtree(0, depth, min_percent, max_children)
    }

    /// The tree below `v`, `depth` levels deep.
    pub fn subtree(&self, v: NodeId, depth: usize, min_percent: f64, max_children: usize) -> TreeNode {
        let total = self.reachable_bytes().max(1);
        let mut node = self.tree_node(v);
        let kids: Vec<NodeId> = self.children(v).collect();
        let keep = if depth == 0 {
            0
        } else {
            kids.iter().take(max_children).take_while(|&&c| self.retained(c) as f64 * 100.0 / total as f64 >= min_percent).count()
        };
        node.omitted_children = (kids.len() - keep) as u64;
        node.omitted_retained = kids[keep..].iter().map(|&c| self.retained(c)).sum();
        node.children = kids[..keep].iter().map(|&c| self.subtree(c, depth - 1, min_percent, max_children)).collect();
        node
    }

    fn key_name(&self, key: &GroupKey) -> String {
        match *key {
            GroupKey::Reserved(v) => format!("reserved {v}"),
            GroupKey::Structure(s) => s.name().to_string(),
            GroupKey::Block { tag, size } => format!("{} tag {tag} size {size}", ocaml::tag_name(tag)),
            GroupKey::Tagged(t) => ocaml::tag_name(t).to_string(),
            GroupKey::Closure(code) => format!("closure {}", self.names.closure_function(code)),
            GroupKey::Custom(ops) => format!("custom {}", self.names.custom_identifier(ops).unwrap_or("?")),
        }
    }

    fn blocks(&self) -> impl Iterator<Item = BlockRef<'s>> + '_ {
        self.block_nodes().filter_map(|v| self.block(v))
    }

    /// The objects a path query selects.
    pub fn select(&self, query: &PathQuery) -> Result<Vec<NodeId>, AnalyzeError> {
        match query {
            PathQuery::Address(x) => Ok(vec![self.node_at(*x).ok_or(AnalyzeError::NoBlockAt(*x))?]),
            PathQuery::Tag(t) => Ok(self.blocks().filter(|b| b.header.tag == *t).map(|b| b.node).collect()),
            PathQuery::Reserved(v) => {
                heapsnap_analyze::paths::check_reserved_bits(self.layout.reserved_bits())?;
                Ok(self.blocks().filter(|b| b.header.reserved == *v).map(|b| b.node).collect())
            }
            PathQuery::Kind(k) => {
                let mut names: HashMap<GroupKey, bool> = HashMap::default();
                Ok(self
                    .blocks()
                    .filter(|b| {
                        let key = shape_key(b);
                        *names.entry(key).or_insert_with(|| self.key_name(&key).contains(k.as_str()))
                    })
                    .map(|b| b.node)
                    .collect())
            }
        }
    }

    fn chain(&self, v: NodeId) -> Option<Vec<NodeId>> {
        let mut c = vec![v];
        let mut x = v;
        while x != 0 {
            x = self.bfs_parent(x);
            if x == NO_NODE || c.len() > self.node_count() {
                return None;
            }
            c.push(x);
        }
        c.reverse();
        (c.len() >= 3).then_some(c)
    }

    /// The first scanned field of `from` that points to `to`.
    pub fn field_pointing(&self, from: NodeId, to: NodeId) -> Option<usize> {
        let b = self.block(from)?;
        if let Some(target) = self.address(to) {
            let start = b.header.first_scanned_field(b.fields).unwrap_or(b.fields.len());
            if let Some(i) = b.fields.iter().skip(start).position(|&w| w == target) {
                return Some(start + i);
            }
        }
        let mut found = None;
        b.header.scanned_fields(b.fields, |i, v| {
            if found.is_none() && self.resolve(v) == Ok(to) {
                found = Some(i);
            }
        });
        if found.is_none() && b.header.tag == ocaml::ABSTRACT_TAG {
            found = b.fields.iter().position(|&v| ocaml::is_pointer(v) && self.resolve(v) == Ok(to));
        }
        found
    }

    /// Retainer paths (as `heapsnap_analyze::paths::paths`).
    pub fn paths(&self, query: &PathQuery, limit: usize, max_paths: usize) -> Result<PathsReport, AnalyzeError> {
        let targets = self.select(query)?;
        let single = matches!(query, PathQuery::Address(_));
        let mut sample: Vec<NodeId> = if targets.len() > limit {
            let stride = targets.len() as f64 / limit as f64;
            (0..limit).map(|i| targets[(i as f64 * stride) as usize]).collect()
        } else {
            targets.clone()
        };
        let mut unreachable = 0;
        let mut chains: Vec<Vec<NodeId>> = Vec::new();
        if single {
            let v = sample[0];
            match self.chain(v) {
                None => unreachable = 1,
                Some(c) => {
                    chains.push(c);
                    for &r in self.referrers(v).iter().take(16) {
                        if r == self.bfs_parent(v) {
                            continue;
                        }
                        if let Some(mut c) = self.chain(r).filter(|c| !c.contains(&v)) {
                            c.push(v);
                            chains.push(c);
                        }
                    }
                    chains.sort_by_key(|c| c.len());
                }
            }
        } else {
            let mut budget = STEP_BUDGET;
            let mut followed = 0;
            for &v in &sample {
                if budget == 0 {
                    break;
                }
                followed += 1;
                match self.chain(v) {
                    None => unreachable += 1,
                    Some(c) => {
                        budget = budget.saturating_sub(c.len());
                        chains.push(c);
                    }
                }
            }
            sample.truncate(followed);
        }
        let mut merged: Vec<MergedPath> = Vec::new();
        type Shape = (String, Vec<(String, Option<String>)>);
        let mut index: HashMap<Shape, usize> = HashMap::default();
        let mut memo: HashMap<NodeId, (String, u32, u64)> = HashMap::default();
        let mut label_cache: HashMap<GroupKey, String> = HashMap::default();
        for c in chains {
            let kind = self.root_kind_label(c[1]).unwrap_or("?").to_string();
            let root = self.top_label(c[2]);
            let mut steps: Vec<Step> = Vec::new();
            for (i, &v) in c.iter().enumerate().skip(2) {
                let (label, field, address) = memo
                    .entry(v)
                    .or_insert_with(|| {
                        let block = self.block(v);
                        let label = if single {
                            self.describe(v)
                        } else if let Some(m) = self.module_of(v) {
                            format!("module {m}")
                        } else {
                            match &block {
                                Some(b) => {
                                    let key = shape_key(b);
                                    label_cache.entry(key).or_insert_with(|| self.key_name(&key)).clone()
                                }
                                None => self.describe(v),
                            }
                        };
                        let field = if i > 2 {
                            let parent_size = self.block(c[i - 1]).map_or(0, |b| b.header.wosize);
                            if !single && parent_size > FOLD_ABOVE_FIELDS {
                                FOLDED
                            } else {
                                self.field_pointing(c[i - 1], v).map_or(NO_FIELD, |f| f as u32)
                            }
                        } else {
                            NO_FIELD
                        };
                        (label, field, block.map_or(0, |b| b.address))
                    })
                    .clone();
                let field_text = match field {
                    NO_FIELD => None,
                    FOLDED => Some("*".to_string()),
                    f => Some(f.to_string()),
                };
                match steps.last_mut() {
                    Some(last) if !single && last.label == label && last.field == field_text && field_text.is_some() => {
                        last.repeat_min += 1;
                        last.repeat_max += 1;
                    }
                    _ => steps.push(Step { label, field: field_text, repeat_min: 1, repeat_max: 1, example: format!("{address:#x}") }),
                }
            }
            let shape = (root.clone(), steps.iter().map(|s| (s.label.clone(), s.field.clone())).collect::<Vec<_>>());
            match index.get(&shape) {
                Some(&i) if !single => {
                    let m = &mut merged[i];
                    m.count += 1;
                    for (s, new) in m.steps.iter_mut().zip(&steps) {
                        s.repeat_min = s.repeat_min.min(new.repeat_min);
                        s.repeat_max = s.repeat_max.max(new.repeat_max);
                    }
                }
                _ => {
                    index.insert(shape, merged.len());
                    merged.push(MergedPath { count: 1, root_kind: kind, root, steps });
                }
            }
        }
        if !single {
            merged.sort_by(|x, y| y.count.cmp(&x.count).then(x.steps.len().cmp(&y.steps.len())));
        }
        merged.truncate(max_paths);
        Ok(PathsReport { targets: targets.len() as u64, sampled: sample.len() as u64, unreachable, paths: merged })
    }

    /// Describes a node with its address, as `inspect` lists them.
    pub fn with_address(&self, v: NodeId) -> String {
        match self.address(v) {
            Some(x) => format!("{x:#x} {}", self.describe(v)),
            None => self.describe(v),
        }
    }

    /// One object (as `heapsnap_analyze::inspect::inspect`).
    pub fn inspect(&self, address: u64, max_fields: usize) -> Result<Inspection, AnalyzeError> {
        let node = self.node_at(address).ok_or(AnalyzeError::NoBlockAt(address))?;
        let b = self.block(node).ok_or(AnalyzeError::NoBlockAt(address))?;
        let region = self.snap.region(b.region as usize);
        let h = b.header;
        let scanned_from = h.first_scanned_field(b.fields);
        let is_ephemeron = self.snap.ephemerons().contains(&b.address);
        let node_name = |v: u64| -> (String, Option<String>) {
            match self.resolve(v) {
                Ok(n) => ("pointer".into(), Some(format!("{v:#x} {}", self.describe(n)))),
                Err(false) => ("external".into(), self.names.symbol(v).map(str::to_string)),
                Err(true) => ("bad_pointer".into(), Some("no block here".into())),
            }
        };
        let mut fields = Vec::new();
        for (i, &v) in b.fields.iter().enumerate().take(max_fields) {
            let (kind, value) = if h.tag == ocaml::CONT_TAG && i == 0 {
                ("stack".to_string(), Some(format!("stack at {:#x}", v & !1)))
            } else if is_ephemeron && i >= ocaml::EPHE_DATA_FIELD {
                let (k, val) = if ocaml::is_pointer(v) { node_name(v) } else { ("int".into(), Some(((v as i64) >> 1).to_string())) };
                let role = if i == ocaml::EPHE_DATA_FIELD { "ephemeron_data" } else { "weak" };
                (if k == "pointer" { role.to_string() } else { k }, val)
            } else if h.tag == ocaml::CLOSURE_TAG && scanned_from.is_some_and(|s| i < s) {
                if v & 1 == 1 && i > 1 && (v & 0xff) as u8 == ocaml::INFIX_TAG {
                    ("infix_header".into(), Some(format!("offset {} words", self.layout.wosize(v))))
                } else if v & 1 == 1 {
                    ("closinfo".into(), Some(format!("arity {} env at {}", ocaml::arity_closinfo(v), ocaml::start_env_closinfo(v))))
                } else {
                    ("code".into(), Some(self.names.closure_function(v)))
                }
            } else if scanned_from.is_none_or(|s| i < s) {
                ("raw".into(), None)
            } else if v & 1 == 1 {
                ("int".into(), Some(((v as i64) >> 1).to_string()))
            } else if v == 0 {
                ("raw".into(), None)
            } else {
                node_name(v)
            };
            fields.push(Field { index: i, raw: format!("{v:#x}"), kind, value });
        }
        let roots = self
            .roots_of(node)
            .into_iter()
            .filter_map(|r| self.snap.roots().get(r as usize))
            .map(|rec| heapsnap_analyze::names::root_label(self.snap, rec))
            .collect();
        Ok(Inspection {
            node,
            address: format!("{:#x}", b.address),
            region_kind: region.kind().label().to_string(),
            domain: (region.header.domain != heapsnap_format::NO_DOMAIN).then_some(region.header.domain),
            description: self.describe(node),
            header: format!("{:#x}", h.raw),
            tag: h.tag,
            wosize: h.wosize,
            colour: h.colour,
            reserved: h.reserved,
            shallow: h.bytes(),
            retained: self.retained(node),
            reachable: self.is_reachable(node),
            immediate_dominator: self.idom(node).map(|d| self.with_address(d)),
            roots,
            more_fields: b.fields.len().saturating_sub(max_fields) as u64,
            fields,
            referrers: self.referrers(node).iter().take(16).map(|&u| self.with_address(u)).collect(),
        })
    }
}
