//! `heapsnap fleet`: the standard questions over many snapshots exported as Parquet
//! (`heapsnap export SNAP --format parquet -o DIR`), answered by DataFusion embedded in the binary.
//!
//! The questions are SQL kept as text in [`queries`], the same text DuckDB and Spark run in the
//! tests; [`tables`] finds and checks the exported files and registers them; [`render`] prints
//! an answer for people.

mod error;
pub mod queries;
pub mod render;
pub mod tables;

pub use error::FleetError;
pub use queries::{By, Question};

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::{SessionConfig, SessionContext};
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// An answer to one question.
#[derive(Debug, Serialize)]
pub struct Answer {
    pub question: &'static str,
    /// The grouping of `growth` (absent for the other questions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<&'static str>,
    pub directories: Vec<PathBuf>,
    /// Snapshots and hosts in the directories.
    pub snapshots: u64,
    pub hosts: u64,
    /// At most this many rows (0: all).
    pub limit: usize,
    /// The query that ran, exactly.
    pub sql: String,
    pub columns: Vec<String>,
    /// One object per row, by column.
    pub rows: Rows,
    /// Why the answer is empty, where the tables tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Answers a question over the exported snapshots of `dirs`.
pub fn answer(dirs: &[PathBuf], question: Question, limit: usize) -> Result<Answer, FleetError> {
    let tables = tables::Tables::open(dirs, question.tables())?;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| FleetError::Io(PathBuf::from("(tokio runtime)"), e))?;
    runtime.block_on(answer_with(&tables, question, limit, threads))
}

async fn answer_with(tables: &tables::Tables, question: Question, limit: usize, threads: usize) -> Result<Answer, FleetError> {
    let context = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(threads));
    tables.register(&context).await?;
    let sql = question.sql(limit);
    let frame = context.sql(&sql).await?;
    // The query's columns, also when it has no row (and so no batch).
    let columns: Vec<String> = frame.schema().fields().iter().map(|f| f.name().clone()).collect();
    let rows = json_rows(&frame.collect().await?)?.1;
    let counts = json_rows(
        &context.sql("SELECT COUNT(*) AS snapshots, COUNT(DISTINCT COALESCE(host, '')) AS hosts FROM snapshots").await?.collect().await?,
    )?
    .1;
    let count = |name: &str| counts.first().and_then(|row| row.get(name)).and_then(Value::as_u64).unwrap_or(0);
    let (snapshots, hosts) = (count("snapshots"), count("hosts"));
    let note = if rows.is_empty() { Some(why_empty(&context, tables, question, hosts).await?) } else { None };
    Ok(Answer {
        question: question.name(),
        by: match question {
            Question::Growth(by) => Some(by.name()),
            _ => None,
        },
        directories: tables.dirs.clone(),
        snapshots,
        hosts,
        limit,
        sql,
        columns,
        rows,
        note,
    })
}

/// What the tables say about an empty answer.
async fn why_empty(context: &SessionContext, tables: &tables::Tables, question: Question, hosts: u64) -> Result<String, FleetError> {
    let single = |sql: &str| {
        let sql = sql.to_string();
        async move {
            let rows = json_rows(&context.sql(&sql).await?.collect().await?)?.1;
            Ok::<u64, FleetError>(rows.first().and_then(|r| r.values().next()).and_then(Value::as_u64).unwrap_or(0))
        }
    };
    let largest_series = single("SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM snapshots GROUP BY COALESCE(host, '')) t").await?;
    let grouped = match question {
        Question::Growth(By::Path) => tables.file_count("dominator_paths") as u64,
        Question::Growth(by) => single(&format!("SELECT COUNT(*) FROM groups WHERE grouping = '{}'", by.name())).await?,
        _ => 1,
    };
    Ok(match question {
        Question::Growth(By::Path) if grouped == 0 => "no snapshot has dominator paths".to_string(),
        Question::Growth(by) if grouped == 0 => match by {
            By::Site => "no snapshot has allocation sites (they come from memprof data)".to_string(),
            By::Type => "no snapshot has OCaml types (snapshots annotated with the program's .cmt files have them)".to_string(),
            _ => format!("no snapshot has groups by {}", by.name()),
        },
        Question::Growth(_) | Question::Diverge if largest_series < 2 => {
            "no host has two snapshots: growth is measured between a host's first and last snapshot".to_string()
        }
        Question::Growth(_) => "nothing grew between any host's first and last snapshot".to_string(),
        Question::Diverge => "no host".to_string(),
        Question::Suspects if tables.file_count("suspects") == 0 => "no snapshot has leak suspects".to_string(),
        Question::Suspects => format!("no leak suspect is in the latest snapshot of more than half of the {hosts} hosts"),
    })
}

/// An answer's rows, one JSON object per row, by column.
pub type Rows = Vec<Map<String, Value>>;

/// The rows of the batches as JSON objects: integers as integers, floating point as numbers (a
/// non-finite one as null), text as strings.
pub fn json_rows(batches: &[RecordBatch]) -> Result<(Vec<String>, Rows), FleetError> {
    let Some(first) = batches.first() else { return Ok((Vec::new(), Vec::new())) };
    let columns: Vec<String> = first.schema().fields().iter().map(|f| f.name().clone()).collect();
    let mut rows = Vec::new();
    for batch in batches {
        let values: Vec<Vec<Value>> = batch.columns().iter().map(|c| json_values(c.as_ref())).collect::<Result<_, _>>()?;
        for i in 0..batch.num_rows() {
            rows.push(columns.iter().zip(&values).map(|(name, column)| (name.clone(), column[i].clone())).collect());
        }
    }
    Ok((columns, rows))
}

fn json_values(array: &dyn Array) -> Result<Vec<Value>, FleetError> {
    let values = match array.data_type() {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => {
            cast(array, &DataType::Int64)?.as_primitive::<Int64Type>().iter().map(|v| v.map_or(Value::Null, Value::from)).collect()
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => cast(array, &DataType::Float64)?
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number))
            .collect(),
        DataType::Boolean => array.as_boolean().iter().map(|v| v.map_or(Value::Null, Value::Bool)).collect(),
        DataType::Null => vec![Value::Null; array.len()],
        _ => cast(array, &DataType::Utf8)?
            .as_string::<i32>()
            .iter()
            .map(|v| v.map_or(Value::Null, |s| Value::String(s.to_string())))
            .collect(),
    };
    Ok(values)
}
