//! What the roots retain: each root's share, and the label of a top object.

/// Not a top object, or a top object no root names (its label is then its description).
pub const NO_LABEL: u32 = u32::MAX;

/// What one root (by name) retains: alone, and together with other roots of its rank.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct RootShare {
    pub root: String,
    /// Bytes freed if this root alone dropped its references.
    pub alone: u64,
    /// Bytes this root reaches together with other roots, freed only when all of them drop
    /// their references.
    pub shared: u64,
    /// The other roots it shares with (at most a few).
    pub shared_with: Vec<String>,
}
