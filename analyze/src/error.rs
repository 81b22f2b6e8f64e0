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
}
