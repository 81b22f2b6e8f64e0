//! `heapsnap dominators`: the dominator tree with retained sizes.

use crate::loader::Loader;
use crate::report::Report;
use heapsnap_analyze::{dominator_report, human_bytes, TreeNode};
use heapsnap_index::Needs;
use std::io::Write;
use std::path::PathBuf;

pub struct Dominators;

#[derive(clap::Args)]
pub struct DominatorsArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// Levels of the tree to show below the super-root.
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Hide subtrees retaining less than this percentage of the reachable bytes.
    #[arg(long, default_value_t = 1.0)]
    min_percent: f64,
    /// At most this many children per node (0: no limit).
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = crate::args::parse_limit)]
    max_children: usize,
}

impl Report for Dominators {
    const NAME: &'static str = "dominators";
    const ABOUT: &'static str = "The dominator tree with retained sizes";
    type Args = DominatorsArgs;
    type Output = TreeNode;

    fn run(args: &DominatorsArgs, loader: &dyn Loader) -> anyhow::Result<TreeNode> {
        crate::loader::answer(
            loader,
            &args.snapshot,
            Needs::Tree,
            |a| Ok(dominator_report(a, args.depth, args.min_percent, args.max_children)),
            |view| Ok(dominator_report(view, args.depth, args.min_percent, args.max_children)),
        )
    }

    fn print(_args: &DominatorsArgs, tree: &TreeNode, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(out, "{:>12} {:>7} {:>10}  object", "retained", "%", "shallow")?;
        let mut stack: Vec<(&TreeNode, usize)> = vec![(tree, 0)];
        while let Some((n, level)) = stack.pop() {
            let mut indent = "  ".repeat(level);
            if let Some(s) = &n.similar {
                writeln!(
                    out,
                    "{:>12} {:>6.1}% {:>10}  {indent}{} {}, largest {}; the largest:",
                    human_bytes(s.retained),
                    s.percent,
                    "",
                    s.count,
                    s.kind,
                    human_bytes(s.largest)
                )?;
                indent.push_str("  ");
            }
            let addr = n.address.as_deref().map(|x| format!("{x} ")).unwrap_or_default();
            let root = n.root.as_deref().map(|r| format!(" <- {r}")).unwrap_or_default();
            writeln!(
                out,
                "{:>12} {:>6.1}% {:>10}  {indent}{addr}{}{root}",
                human_bytes(n.retained),
                n.percent,
                human_bytes(n.shallow),
                n.description
            )?;
            if n.omitted_children > 0 {
                writeln!(
                    out,
                    "{:>12} {:>7} {:>10}  {indent}  ({} smaller children)",
                    human_bytes(n.omitted_retained),
                    "",
                    "",
                    n.omitted_children
                )?;
            }
            for c in n.children.iter().rev() {
                stack.push((c, level + 1));
            }
        }
        Ok(())
    }
}
