//! Why a question could not be answered: the one error type of `heapsnap fleet`.

use std::path::PathBuf;

/// Why a question could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("no directory given: name one or more directories of exported snapshots (heapsnap export SNAP --format parquet -o DIR)")]
    NoDirectory,
    #[error("{0}: not a directory")]
    NotADirectory(PathBuf),
    #[error("{0}: no exported snapshots in it (no {0}/snapshots/*.parquet; `heapsnap export SNAP --format parquet -o DIR` writes them)")]
    NoSnapshots(PathBuf),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{0}: not a readable Parquet file (corrupt or truncated?): {1}")]
    NotParquet(PathBuf, String),
    #[error("{file}: not the `{table}` table heapsnap exports: {problem}")]
    Schema { file: PathBuf, table: String, problem: String },
    #[error("the query engine failed: {0}")]
    Engine(#[from] datafusion::error::DataFusionError),
    #[error("the query engine failed: {0}")]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
}
