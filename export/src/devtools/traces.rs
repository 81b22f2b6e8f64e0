//! Allocation stacks in V8's format: statmemprof's sampled blocks with a known stack
//! (`heapsnap_analyze::sites`) become DevTools' allocation trace tree, so the Memory panel shows
//! a sampled object's "Allocation stack", and memlab reads it. `trace_function_infos` holds one
//! function per distinct frame (function id, name, script name, script id, line, column: lines
//! are 1-based as V8 writes them, columns unknown, 0); `trace_tree` is the tree of stacks from
//! the outermost frame, each node `[id, function_info_index, count, size, [children...]]`,
//! count and size those of the sampled blocks allocated exactly there; a sampled node's
//! `trace_node_id` is its stack's innermost tree node (0 for other nodes).

use super::strings::StringTable;
use heapsnap_analyze::sites::Sites;
use heapsnap_analyze::{AnalysedHeap, NodeId};
use rustc_hash::FxHashMap;

/// The trace tree's root has function 0, `(root)`.
const ROOT_ID: u32 = 1;

#[derive(Default)]
pub struct Traces {
    /// The trace node of each sampled block.
    pub by_node: FxHashMap<NodeId, u32>,
    pub function_count: u64,
    /// `trace_function_infos`, 6 numbers a function.
    infos: Vec<u64>,
    /// Per tree node (index = id - 1): function, count, size, children.
    tree: Vec<(u32, u64, u64, Vec<u32>)>,
}

impl Traces {
    /// The trace tree of the sampled blocks' stacks; names go into `table`.
    pub fn build<'s>(a: &impl AnalysedHeap<'s>, sites: &Sites, table: &mut StringTable) -> Traces {
        let mut t = Traces::default();
        let mut script_ids: FxHashMap<&str, u64> = FxHashMap::default();
        // Function 0: the root; function 1 + f: frame f.
        let root_name = u64::from(table.intern("(root)"));
        let empty = u64::from(table.intern(""));
        t.infos.extend([0, root_name, empty, 0, 0, 0]);
        for (f, frame) in sites.frames.iter().enumerate() {
            let next = script_ids.len() as u64 + 1;
            let script = *script_ids.entry(frame.file.as_str()).or_insert(next);
            t.infos.extend([
                f as u64 + 1,
                u64::from(table.intern(&frame.function)),
                u64::from(table.intern(&frame.file)),
                script,
                u64::from(frame.line),
                0,
            ]);
        }
        t.function_count = sites.frames.len() as u64 + 1;
        t.tree.push((0, 0, 0, Vec::new()));
        let mut child_of: FxHashMap<(u32, u32), u32> = FxHashMap::default();
        for b in &sites.blocks {
            let mut node = ROOT_ID;
            for &f in sites.stacks[b.stack as usize].iter().rev() {
                node = *child_of.entry((node, f)).or_insert_with(|| {
                    t.tree.push((f + 1, 0, 0, Vec::new()));
                    let id = t.tree.len() as u32;
                    t.tree[node as usize - 1].3.push(id);
                    id
                });
            }
            let entry = &mut t.tree[node as usize - 1];
            entry.1 += 1;
            entry.2 += a.shallow(b.node);
            t.by_node.insert(b.node, node);
        }
        t
    }

    /// The file's arrays after `edges`, up to the opening of `strings`.
    pub fn tail(&self) -> String {
        let numbers = |xs: &[u64]| xs.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let mut tree = String::new();
        if !self.tree.is_empty() {
            // Depth first, without recursion: (node, children written so far).
            let mut stack: Vec<(u32, usize)> = vec![(ROOT_ID, 0)];
            let open = |tree: &mut String, id: u32| {
                let (f, count, size, _) = &self.tree[id as usize - 1];
                tree.push_str(&format!("{id},{f},{count},{size},["));
            };
            open(&mut tree, ROOT_ID);
            while let Some((id, done)) = stack.pop() {
                let children = &self.tree[id as usize - 1].3;
                match children.get(done) {
                    Some(&c) => {
                        if done > 0 {
                            tree.push(',');
                        }
                        stack.push((id, done + 1));
                        open(&mut tree, c);
                        stack.push((c, 0));
                    }
                    None => tree.push(']'),
                }
            }
        }
        format!(
            "],\n\"trace_function_infos\":[{}],\n\"trace_tree\":[{tree}],\n\"samples\":[],\n\"locations\":[],\n\"strings\":[",
            numbers(&self.infos)
        )
    }
}
