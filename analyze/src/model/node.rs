//! What a node of the object graph stands for.

use heapsnap_format::{RegionKind, RootKind};

/// What a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    SuperRoot,
    Roots(RootKind),
    Block(RegionKind),
}
