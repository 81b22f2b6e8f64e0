use heapsnap_format::FormatError;

/// What can stop an analysis.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error(transparent)]
    Format(#[from] FormatError),

    #[error("snapshot too large for this analyser: {0}")]
    TooLarge(String),

    #[error("no block at address {0:#x}")]
    NoBlockAt(u64),

    #[error("{0}")]
    BadQuery(String),

    /// The heap cannot fit: refused before the big arrays are allocated, rather than the
    /// kernel's out-of-memory killer ending the analysis (or something else) halfway.
    #[error(
        "analysing this snapshot's {objects} objects needs at least {} of memory ({} bytes an object for \
         its graph and dominators, at the least), but only {} is left under {of}: free memory, give that limit \
         {} more, or analyse the snapshot on a bigger machine (HEAPSNAP_MEMORY_CHECK=off tries anyway)",
        crate::human_bytes(*needs),
        crate::mem::LEAST_BYTES_PER_OBJECT,
        crate::human_bytes(*room),
        crate::human_bytes(needs.saturating_sub(*room))
    )]
    NotEnoughMemory { objects: u64, needs: u64, room: u64, of: String },
}
