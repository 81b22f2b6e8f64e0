//! The exported tables of one or more directories (`DIR/TABLE/SNAPSHOT_ID.parquet`, as
//! `heapsnap export --format parquet` writes them): found, checked against the columns the
//! questions read, and registered in a DataFusion session under the tables' names.

use crate::error::FleetError;
use datafusion::arrow::array::{Array, AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata;
use datafusion::prelude::SessionContext;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a column must hold for the questions to read it.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Integer,
    Timestamp,
}

impl Kind {
    fn accepts(self, data_type: &DataType) -> bool {
        match self {
            Kind::Text => matches!(data_type, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
            Kind::Integer => matches!(data_type, DataType::Int64 | DataType::Int32),
            Kind::Timestamp => matches!(data_type, DataType::Timestamp(_, Some(_))),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Kind::Text => "UTF8",
            Kind::Integer => "INT64 (or INT32)",
            Kind::Timestamp => "TIMESTAMP with a time zone (UTC)",
        }
    }
}

/// The columns each table must have for the questions (a file may have more: a newer exporter's).
fn required_columns(table: &str) -> &'static [(&'static str, Kind)] {
    match table {
        "snapshots" => {
            &[("snapshot_id", Kind::Text), ("host", Kind::Text), ("captured_at", Kind::Timestamp), ("reachable_bytes", Kind::Integer)]
        }
        "groups" => &[
            ("snapshot_id", Kind::Text),
            ("grouping", Kind::Text),
            ("key", Kind::Integer),
            ("name", Kind::Text),
            ("retained_bytes", Kind::Integer),
        ],
        "dominator_paths" => {
            &[("snapshot_id", Kind::Text), ("key", Kind::Integer), ("signature", Kind::Text), ("retained_bytes", Kind::Integer)]
        }
        "suspects" => &[
            ("snapshot_id", Kind::Text),
            ("rank", Kind::Integer),
            ("key", Kind::Integer),
            ("type", Kind::Text),
            ("kind", Kind::Text),
            ("signature", Kind::Text),
            ("retained_bytes", Kind::Integer),
        ],
        _ => &[],
    }
}

/// The Parquet files of one table in one directory (`DIR/TABLE/*.parquet`, sorted); files of
/// other names (a writer's temporary files) are not the table's.
fn table_files(dir: &Path, table: &str) -> Result<Vec<PathBuf>, FleetError> {
    let table_dir = dir.join(table);
    let entries = match std::fs::read_dir(&table_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FleetError::Io(table_dir, e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| FleetError::Io(table_dir.clone(), e))?.path();
        if path.extension().is_some_and(|ext| ext == "parquet") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// A file's Arrow schema, read from its Parquet footer.
fn file_schema(path: &Path) -> Result<SchemaRef, FleetError> {
    let file = std::fs::File::open(path).map_err(|e| FleetError::Io(path.to_path_buf(), e))?;
    let metadata =
        ArrowReaderMetadata::load(&file, Default::default()).map_err(|e| FleetError::NotParquet(path.to_path_buf(), e.to_string()))?;
    Ok(metadata.schema().clone())
}

/// Checks that a file has the columns the questions read, of the right kinds.
fn check_schema(path: &Path, table: &str, schema: &Schema) -> Result<(), FleetError> {
    for (column, kind) in required_columns(table) {
        match schema.field_with_name(column) {
            Err(_) => {
                return Err(FleetError::Schema {
                    file: path.to_path_buf(),
                    table: table.to_string(),
                    problem: format!("it has no column `{column}`"),
                })
            }
            Ok(field) if !kind.accepts(field.data_type()) => {
                return Err(FleetError::Schema {
                    file: path.to_path_buf(),
                    table: table.to_string(),
                    problem: format!("its column `{column}` is {}, where the export's contract has {}", field.data_type(), kind.describe()),
                })
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// The exported tables found in the directories.
pub struct Tables {
    pub dirs: Vec<PathBuf>,
    /// Per table read, its files in every directory.
    files: Vec<(&'static str, Vec<PathBuf>)>,
}

impl Tables {
    /// Finds and checks the files of `tables` in `dirs`. Every directory must hold exported
    /// snapshots (`DIR/snapshots/*.parquet`); every file of a table read must be Parquet with
    /// the columns the questions read.
    pub fn open(dirs: &[PathBuf], tables: &[&'static str]) -> Result<Tables, FleetError> {
        if dirs.is_empty() {
            return Err(FleetError::NoDirectory);
        }
        let mut found: Vec<(&'static str, Vec<PathBuf>)> = tables.iter().map(|t| (*t, Vec::new())).collect();
        for dir in dirs {
            if !dir.is_dir() {
                return Err(FleetError::NotADirectory(dir.clone()));
            }
            if table_files(dir, "snapshots")?.is_empty() {
                return Err(FleetError::NoSnapshots(dir.clone()));
            }
            for (table, files) in found.iter_mut() {
                files.extend(table_files(dir, table)?);
            }
        }
        for (table, files) in &found {
            for path in files {
                check_schema(path, table, file_schema(path)?.as_ref())?;
            }
        }
        Ok(Tables { dirs: dirs.to_vec(), files: found })
    }

    /// How many files a table has in all the directories.
    pub fn file_count(&self, table: &str) -> usize {
        self.files.iter().find(|(t, _)| *t == table).map_or(0, |(_, files)| files.len())
    }

    /// Registers every table read, over all the directories, and the function `unix_micros`.
    pub async fn register(&self, context: &SessionContext) -> Result<(), FleetError> {
        context.register_udf(unix_micros());
        for (table, files) in &self.files {
            let schema = match files.first() {
                Some(first) => file_schema(first)?,
                // A table no directory has (no suspects anywhere): empty, with the columns read.
                None => empty_schema(table),
            };
            let urls = self
                .dirs
                .iter()
                .map(|dir| {
                    let path = std::path::absolute(dir.join(table)).map_err(|e| FleetError::Io(dir.clone(), e))?;
                    ListingTableUrl::parse(format!("{}/", path.display())).map_err(FleetError::Engine)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
            let config = ListingTableConfig::new_with_multi_paths(urls).with_listing_options(options).with_schema(schema);
            let provider = ListingTable::try_new(config).map_err(FleetError::Engine)?;
            context.register_table(*table, Arc::new(provider)).map_err(FleetError::Engine)?;
        }
        Ok(())
    }
}

/// The columns the questions read, for a table that has no file.
fn empty_schema(table: &str) -> SchemaRef {
    let fields: Vec<Field> = required_columns(table)
        .iter()
        .map(|(name, kind)| {
            let data_type = match kind {
                Kind::Text => DataType::Utf8,
                Kind::Integer => DataType::Int64,
                Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            };
            Field::new(*name, data_type, true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// Spark's `unix_micros(timestamp)`: microseconds since the epoch, as BIGINT.
fn unix_micros() -> datafusion::logical_expr::ScalarUDF {
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    create_udf(
        "unix_micros",
        vec![timestamp.clone()],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let micros = cast(&arrays[0], &timestamp)?;
            let micros = micros.as_primitive::<TimestampMicrosecondType>();
            let values: Int64Array = micros.iter().collect();
            let single = args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
            let array: Arc<dyn Array> = Arc::new(values);
            if single {
                Ok(ColumnarValue::Scalar(datafusion::scalar::ScalarValue::try_from_array(&array, 0)?))
            } else {
                Ok(ColumnarValue::Array(array))
            }
        }),
    )
}
