//! What the reports read of an analysed snapshot: the heap facts ([`HeapFacts`]) and what is
//! computed from them (kinds, retained sizes, the dominator tree's children, groups, root
//! shares, types). The full analysis (`Analysis`) answers it from the graph; the analysis index (crate
//! `heapsnap-index`) answers it from what the first analysis saved. Each report (`dominators`,
//! `path`, `inspect`, `top`) is written once, against this trait, so both give the same answer.

use crate::blocks::{BlockRef, NodeId};
use crate::error::AnalyzeError;
use crate::facts::HeapFacts;
use crate::model::{Group, GroupBy, GroupKey, NodeKind, RootShare};
use crate::typed::Typing;
use heapsnap_values as ocaml;
use std::borrow::Cow;

/// Nodes of one kind among a node's children ([`AnalysedHeap::tally_children`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindTally {
    pub kind: Option<GroupKey>,
    pub count: u64,
    /// What they retain together.
    pub retained: u64,
    /// The first of them (the largest: children come largest first) and what it retains.
    pub first: (NodeId, u64),
}

/// Children counted by kind, in the order each kind's first member comes (a snapshot may have
/// thousands of kinds: each is found in a map, the last one first, as neighbours are often of
/// one kind).
#[derive(Default)]
pub struct KindTallies {
    tallies: Vec<KindTally>,
    at: std::collections::BTreeMap<Option<GroupKey>, usize>,
    last: Option<usize>,
}

impl KindTallies {
    /// Counts one child, or `t.count` children of one kind (their first, `t.first`, comes
    /// after every child counted so far).
    #[inline]
    pub fn add(&mut self, t: KindTally) {
        let i = match self.last {
            Some(i) if self.tallies[i].kind == t.kind => i,
            _ => match self.at.get(&t.kind) {
                Some(&i) => i,
                None => {
                    self.at.insert(t.kind, self.tallies.len());
                    self.tallies.push(KindTally { count: 0, retained: 0, ..t });
                    self.tallies.len() - 1
                }
            },
        };
        self.last = Some(i);
        self.tallies[i].count += t.count;
        self.tallies[i].retained += t.retained;
    }

    /// Adds the tallies of the children that come after these.
    pub fn merge(&mut self, later: Vec<KindTally>) {
        later.into_iter().for_each(|t| self.add(t));
    }

    pub fn into_vec(self) -> Vec<KindTally> {
        self.tallies
    }
}

pub trait AnalysedHeap<'s>: HeapFacts<'s> {
    /// What a block is ([`crate::kinds::kind_key`]: a recognised structure, else its shape).
    fn kind_of(&self, b: &BlockRef<'_>) -> GroupKey;
    /// The kind of a node's block (`None`: not a block).
    fn kind_of_node(&self, v: NodeId) -> Option<GroupKey> {
        self.block(v).map(|b| self.kind_of(&b))
    }

    /// Every kind some block has, reachable or not.
    fn kinds(&self) -> Vec<GroupKey>;
    /// The block nodes `keep` selects, ascending.
    fn blocks_where(&self, keep: &(dyn Fn(&BlockRef<'s>) -> bool + Sync)) -> Vec<NodeId>;
    /// The block nodes of these kinds, ascending.
    fn blocks_of_kinds(&self, kinds: &[GroupKey]) -> Vec<NodeId>;
    fn retained(&self, v: NodeId) -> u64;
    /// Total heap bytes reachable from the roots (static data excluded).
    fn reachable_bytes(&self) -> u64;
    fn is_reachable(&self, v: NodeId) -> bool;
    /// Children in the dominator tree, largest retained first (ties by node).
    fn children(&self, v: NodeId) -> Vec<NodeId>;
    /// [`AnalysedHeap::children`] with what each retains (an index answers it without looking
    /// each child up: a node may have millions).
    fn children_retained<'a>(&'a self, v: NodeId) -> Box<dyn Iterator<Item = (NodeId, u64)> + 'a> {
        Box::new(self.children(v).into_iter().map(move |c| (c, self.retained(c))))
    }
    /// Those of [`AnalysedHeap::children`] that retain at least `min` bytes, in its order: a
    /// root kind's node has millions of children, and the suspects want only the few big ones.
    fn children_retaining(&self, v: NodeId, min: u64) -> Vec<NodeId> {
        self.children_retained(v).take_while(|&(_, r)| r >= min).map(|(c, _)| c).collect()
    }
    /// The first of [`AnalysedHeap::children`] that `keep` accepts, without ordering the others.
    fn first_child_where(&self, v: NodeId, keep: &dyn Fn(NodeId) -> bool) -> Option<NodeId> {
        self.children_retained(v).map(|(c, _)| c).find(|&c| keep(c))
    }
    /// The children of `v` from the `skip`th on, counted by kind ([`AnalysedHeap::kind_of_node`]),
    /// the kinds in the order their first member comes (the dominator report summarises a
    /// node's millions of small children so; an index counts them on every core).
    fn tally_children(&self, v: NodeId, skip: usize) -> Vec<KindTally> {
        let mut tallies = KindTallies::default();
        for (c, retained) in self.children_retained(v).skip(skip) {
            tallies.add(KindTally { kind: self.kind_of_node(c), count: 1, retained, first: (c, retained) });
        }
        tallies.into_vec()
    }
    /// The name of a top object (right below the super-root or a root kind): its most stable
    /// roots (`Retainers`).
    fn top_label(&self, v: NodeId) -> String;
    /// Up to `max` nodes with a strong edge to `v`, ascending.
    fn referrers(&self, v: NodeId, max: usize) -> Vec<NodeId>;
    /// A node's parent in one breadth-first search from the super-root over strong edges (the
    /// super-root's is itself; `None`: unreachable, or no such node). Asked node by node, so
    /// that an index may keep the parents in a compact form rather than as one array.
    fn bfs_parent(&self, v: NodeId) -> Option<NodeId>;
    /// The groups of a grouping, largest retained first.
    fn groups(&self, by: GroupBy) -> Result<Cow<'_, [Group]>, AnalyzeError>;
    /// Per root: what it retains alone and shared ([`crate::retainers::Retainers`]).
    fn root_shares(&self) -> Cow<'_, [RootShare]>;
    /// Live blocks no root reaches and their bytes, counted apart from every group.
    fn unreachable(&self) -> (u64, u64);
    /// The blocks' OCaml types ([`Typing`]), computed on first use; `None` when the
    /// snapshot has no OCaml names.
    fn typing(&self) -> Option<&Typing<'_>>;

    /// The heap bytes (static data excluded) of the blocks `v` dominates, itself included, that
    /// have an OCaml type; `None` without types, or where this view cannot tell.
    fn typed_bytes_dominated_by(&self, _v: NodeId) -> Option<u64> {
        None
    }

    /// A node's OCaml type, as reports show it (`Server.session`, `Cons : int list`); `None`
    /// when untyped, or when the type says no more than the block's own description (strings,
    /// floats, boxed integers).
    fn type_label(&self, v: NodeId) -> Option<String> {
        let b = self.block(v)?;
        if matches!(b.header.tag, ocaml::STRING_TAG | ocaml::DOUBLE_TAG | ocaml::CUSTOM_TAG) {
            return None;
        }
        self.typing()?.describe(v, b.header.tag, b.fields.first().copied())
    }

    /// The name of field `i` of node `v` when its type names it (a record label, `[i]`).
    fn field_label(&self, v: NodeId, i: usize) -> Option<String> {
        if let Some(m) = self.module_of(v) {
            let symbol = format!("caml{m}");
            return self.names().global_path(&symbol, i as u64).map(str::to_string);
        }
        let b = self.block(v)?;
        self.typing()?.field_name(v, b.header.tag, i)
    }

    /// A one-line description of any node: a recognised structure with its size
    /// (`Hashtbl (5000 entries)`), else the block's own description; a module block says so.
    fn describe(&self, v: NodeId) -> String {
        match self.node_kind(v) {
            Some(NodeKind::SuperRoot) => "(all roots)".into(),
            Some(NodeKind::Roots(k)) => format!("({k} roots)"),
            Some(NodeKind::Block(_)) => {
                let Some(b) = self.block(v) else { return format!("(no block for node {v})") };
                let d = match (self.kind_of(&b), self.type_label(v)) {
                    (GroupKey::Structure(s), Some(t)) => format!("{t} ({})", crate::structures::describe(s, &b)),
                    (_, Some(t)) => t,
                    (GroupKey::Structure(s), None) => crate::structures::describe(s, &b),
                    _ => self.names().describe(&b),
                };
                match self.module_of(v) {
                    Some(m) => format!("module {m} ({d})"),
                    None => d,
                }
            }
            None => format!("(no node {v})"),
        }
    }

    /// Describes a node with its address first, as `inspect` lists nodes.
    fn with_address(&self, v: NodeId) -> String {
        match self.address(v) {
            Some(x) => format!("{x:#x} {}", self.describe(v)),
            None => self.describe(v),
        }
    }
}
