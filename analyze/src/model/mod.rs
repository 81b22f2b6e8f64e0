//! The vocabulary every layer shares: what a node stands for, what a block is (its kind,
//! recognised structure and role), how blocks are grouped and what a group reports, and what a
//! root retains. Plain data with names; no part of the analysis.

mod grouping;
mod node;
mod retention;
mod structure;

pub use grouping::{Group, GroupBy, GroupKey};
pub use node::NodeKind;
pub use retention::{RootShare, NO_LABEL};
pub use structure::{Role, Structure};

/// The type id of an untyped node, in a typing's type ids by node.
pub const NO_TYPE: u32 = u32::MAX;
