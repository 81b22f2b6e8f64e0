//! `export --format parquet`: what the reports compute for one snapshot, as Parquet tables
//! that query engines (DataFusion, DuckDB, Spark) read across many
//! snapshots. One file per table and snapshot, `DIR/TABLE/SNAPSHOT_ID.parquet`, so that many
//! exports share one directory and an engine reads a table as a glob; the schemas are in
//! [`batches`], the rows in [`rows`], the ids and keys in [`identity`].

pub mod batches;
pub mod identity;
pub mod rows;

use crate::output::AtomicFile;
use crate::ExportError;
use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::Compression;
use ::parquet::file::properties::WriterProperties;
use arrow_array::RecordBatch;
use heapsnap_analyze::{Analysis, Progress};
use serde::Serialize;
use std::path::Path;

pub use rows::{Options, GROUPS_CAP, SUSPECTS_CAP};

/// How many path signatures `dominator_paths` keeps by default.
pub const DEFAULT_PATHS: usize = 1000;

/// One table written.
#[derive(Serialize, Debug, Clone)]
pub struct TableFile {
    pub table: &'static str,
    pub file: String,
    pub rows: usize,
    pub bytes: u64,
}

/// What an export wrote (`export --format parquet --json`).
#[derive(Serialize, Debug, Clone)]
pub struct ParquetReport {
    pub format: &'static str,
    pub output: String,
    pub snapshot_id: String,
    pub host: Option<String>,
    pub tables: Vec<TableFile>,
    /// All the tables' bytes.
    pub bytes: u64,
    pub snapshot_file_bytes: u64,
    /// `bytes` as a percentage of the snapshot file's.
    pub percent_of_snapshot: f64,
}

/// Writes the tables of the analysed snapshot into `dir` (created owner-only when missing).
pub fn export(a: &Analysis<'_>, options: &Options, dir: &Path, progress: &Progress) -> Result<ParquetReport, ExportError> {
    // Refused before the work: a directory that cannot be one.
    create_dir(dir)?;
    let step = progress.step("parquet: tables", 0);
    let tables = rows::tables(a, options).map_err(|e| ExportError::Parquet(e.to_string()))?;
    step.finish_and_clear();
    let id = options.snapshot_id.as_str();
    let arrow = |r: Result<RecordBatch, arrow_schema::ArrowError>| r.map_err(|e| ExportError::Parquet(e.to_string()));
    let mut batches = vec![
        ("snapshots", arrow(batches::snapshots(id, &tables.snapshot))?),
        ("groups", arrow(batches::groups(id, &tables.groups))?),
        ("suspects", arrow(batches::suspects(id, &tables.suspects))?),
        ("dominator_paths", arrow(batches::dominator_paths(id, &tables.dominator_paths))?),
    ];
    if let Some(sites) = &tables.sites {
        batches.push(("sites", arrow(batches::sites(id, sites))?));
    }
    let step = progress.step("parquet: writing", 0);
    let mut files = Vec::new();
    for (table, batch) in &batches {
        let sub = dir.join(table);
        create_dir(&sub)?;
        let path = sub.join(format!("{id}.parquet"));
        let bytes = write(&path, batch)?;
        files.push(TableFile { table, file: path.display().to_string(), rows: batch.num_rows(), bytes });
    }
    step.finish_and_clear();
    let bytes = files.iter().map(|f| f.bytes).sum();
    Ok(ParquetReport {
        format: "parquet",
        output: dir.display().to_string(),
        snapshot_id: options.snapshot_id.clone(),
        host: options.host.clone(),
        tables: files,
        bytes,
        snapshot_file_bytes: options.snapshot_file_bytes,
        percent_of_snapshot: 100.0 * bytes as f64 / options.snapshot_file_bytes.max(1) as f64,
    })
}

/// `dir`, created owner-only (0700) with its missing parents; an error that says so when
/// something else than a directory is there.
fn create_dir(dir: &Path) -> Result<(), ExportError> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.exists() && !dir.is_dir() {
        return Err(ExportError::Parquet(format!(
            "{} is not a directory (the Parquet export writes a directory of tables)",
            dir.display()
        )));
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    Ok(())
}

/// One table's file: Snappy-compressed columns, dictionary-encoded where they repeat, written
/// owner-only to a temporary file renamed into place.
fn write(path: &Path, batch: &RecordBatch) -> Result<u64, ExportError> {
    let properties = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
    let file = AtomicFile::create(path)?;
    let parquet = |e: ::parquet::errors::ParquetError| ExportError::Parquet(format!("{}: {e}", path.display()));
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).map_err(parquet)?;
    writer.write(batch).map_err(parquet)?;
    let file = writer.into_inner().map_err(parquet)?;
    Ok(file.commit()?)
}
