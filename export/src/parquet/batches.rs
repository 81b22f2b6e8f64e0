//! The tables' Arrow schemas and record batches: the column types `export/EXPORT.md` documents
//! (the contract query engines such as DuckDB and Spark read). Every table starts with
//! `snapshot_id`.

use super::rows::{GroupRow, PathRow, SiteRow, SnapshotRow, SuspectRow};
use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, TimeUnit};
use std::sync::Arc;

fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn int64(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Int64, nullable)
}

fn int32(name: &str) -> Field {
    Field::new(name, DataType::Int32, false)
}

fn batch(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<RecordBatch, ArrowError> {
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// The `snapshot_id` column of `rows` rows.
fn ids(id: &str, rows: usize) -> ArrayRef {
    Arc::new(StringArray::from(vec![id; rows]))
}

fn strings<'a>(rows: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(rows.map(Some).collect::<StringArray>())
}

fn opt_strings<'a>(rows: impl Iterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(rows.collect::<StringArray>())
}

fn ints(rows: impl Iterator<Item = i64>) -> ArrayRef {
    Arc::new(rows.map(Some).collect::<Int64Array>())
}

fn opt_ints(rows: impl Iterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(rows.collect::<Int64Array>())
}

fn ranks(rows: impl Iterator<Item = i32>) -> ArrayRef {
    Arc::new(rows.map(Some).collect::<Int32Array>())
}

pub fn snapshots(id: &str, r: &SnapshotRow) -> Result<RecordBatch, ArrowError> {
    let fields = vec![
        utf8("snapshot_id", false),
        utf8("program", false),
        utf8("executable", true),
        utf8("build_id", true),
        utf8("ocaml_version", false),
        utf8("host", true),
        int64("pid", true),
        Field::new("captured_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
        utf8("trigger", false),
        utf8("capture_method", true),
        int64("objects", false),
        int64("heap_bytes", false),
        int64("reachable_objects", false),
        int64("reachable_bytes", false),
        int64("unreachable_objects", false),
        int64("unreachable_bytes", false),
        Field::new("has_names", DataType::Boolean, false),
        int64("typed_bytes", true),
        int64("snapshot_file_bytes", false),
        utf8("heapsnap_version", false),
    ];
    let one = |x: i64| ints(std::iter::once(x));
    let columns: Vec<ArrayRef> = vec![
        ids(id, 1),
        strings(std::iter::once(r.program.as_str())),
        opt_strings(std::iter::once(r.executable.as_deref())),
        opt_strings(std::iter::once(r.build_id.as_deref())),
        strings(std::iter::once(r.ocaml_version.as_str())),
        opt_strings(std::iter::once(r.host.as_deref())),
        opt_ints(std::iter::once(r.pid)),
        Arc::new(TimestampMicrosecondArray::from(vec![r.captured_at_us]).with_timezone("UTC")),
        strings(std::iter::once(r.trigger.as_str())),
        opt_strings(std::iter::once(r.capture_method.as_deref())),
        one(r.objects),
        one(r.heap_bytes),
        one(r.reachable_objects),
        one(r.reachable_bytes),
        one(r.unreachable_objects),
        one(r.unreachable_bytes),
        Arc::new(BooleanArray::from(vec![r.has_names])),
        opt_ints(std::iter::once(r.typed_bytes)),
        one(r.snapshot_file_bytes),
        strings(std::iter::once(r.heapsnap_version.as_str())),
    ];
    batch(fields, columns)
}

pub fn groups(id: &str, rows: &[GroupRow]) -> Result<RecordBatch, ArrowError> {
    let fields = vec![
        utf8("snapshot_id", false),
        utf8("grouping", false),
        int64("key", false),
        utf8("name", false),
        int64("count", false),
        int64("shallow_bytes", false),
        int64("retained_bytes", false),
        int32("rank"),
    ];
    let columns = vec![
        ids(id, rows.len()),
        strings(rows.iter().map(|r| r.grouping)),
        ints(rows.iter().map(|r| r.key)),
        strings(rows.iter().map(|r| r.name.as_str())),
        ints(rows.iter().map(|r| r.count)),
        ints(rows.iter().map(|r| r.shallow_bytes)),
        ints(rows.iter().map(|r| r.retained_bytes)),
        ranks(rows.iter().map(|r| r.rank)),
    ];
    batch(fields, columns)
}

pub fn suspects(id: &str, rows: &[SuspectRow]) -> Result<RecordBatch, ArrowError> {
    let mut steps = ListBuilder::new(StringBuilder::new()).with_field(Field::new("item", DataType::Utf8, false));
    for r in rows {
        for s in &r.path_steps {
            steps.values().append_value(s);
        }
        steps.append(true);
    }
    let steps = steps.finish();
    let fields = vec![
        utf8("snapshot_id", false),
        int32("rank"),
        int64("key", true),
        utf8("type", true),
        utf8("kind", false),
        utf8("description", false),
        int64("elements", true),
        utf8("elements_of", true),
        int64("shallow_bytes", false),
        int64("retained_bytes", false),
        Field::new("percent", DataType::Float64, false),
        utf8("held_by", false),
        utf8("signature", false),
        utf8("path_text", false),
        Field::new("path_steps", steps.data_type().clone(), false),
    ];
    let columns: Vec<ArrayRef> = vec![
        ids(id, rows.len()),
        ranks(rows.iter().map(|r| r.rank)),
        opt_ints(rows.iter().map(|r| r.key)),
        opt_strings(rows.iter().map(|r| r.r#type.as_deref())),
        strings(rows.iter().map(|r| r.kind.as_str())),
        strings(rows.iter().map(|r| r.description.as_str())),
        opt_ints(rows.iter().map(|r| r.elements)),
        opt_strings(rows.iter().map(|r| r.elements_of.as_deref())),
        ints(rows.iter().map(|r| r.shallow_bytes)),
        ints(rows.iter().map(|r| r.retained_bytes)),
        Arc::new(rows.iter().map(|r| Some(r.percent)).collect::<Float64Array>()),
        strings(rows.iter().map(|r| r.held_by.as_str())),
        strings(rows.iter().map(|r| r.signature.as_str())),
        strings(rows.iter().map(|r| r.path_text.as_str())),
        Arc::new(steps),
    ];
    batch(fields, columns)
}

pub fn dominator_paths(id: &str, rows: &[PathRow]) -> Result<RecordBatch, ArrowError> {
    let fields = vec![
        utf8("snapshot_id", false),
        int64("key", false),
        int64("parent_key", true),
        int32("depth"),
        utf8("root", false),
        utf8("shape", false),
        utf8("signature", false),
        int64("count", false),
        int64("retained_bytes", false),
        int32("rank"),
    ];
    let columns = vec![
        ids(id, rows.len()),
        ints(rows.iter().map(|r| r.key)),
        opt_ints(rows.iter().map(|r| r.parent_key)),
        ranks(rows.iter().map(|r| r.depth)),
        strings(rows.iter().map(|r| r.root.as_str())),
        strings(rows.iter().map(|r| r.shape.as_str())),
        strings(rows.iter().map(|r| r.signature.as_str())),
        ints(rows.iter().map(|r| r.count)),
        ints(rows.iter().map(|r| r.retained_bytes)),
        ranks(rows.iter().map(|r| r.rank)),
    ];
    batch(fields, columns)
}

pub fn sites(id: &str, rows: &[SiteRow]) -> Result<RecordBatch, ArrowError> {
    let fields = vec![
        utf8("snapshot_id", false),
        int64("key", false),
        utf8("location", false),
        utf8("function", true),
        int64("count", false),
        int64("shallow_bytes", false),
        int64("retained_bytes", false),
        int64("samples", false),
        int64("estimated_bytes", true),
        int32("rank"),
    ];
    let columns = vec![
        ids(id, rows.len()),
        ints(rows.iter().map(|r| r.key)),
        strings(rows.iter().map(|r| r.location.as_str())),
        opt_strings(rows.iter().map(|r| r.function.as_deref())),
        ints(rows.iter().map(|r| r.count)),
        ints(rows.iter().map(|r| r.shallow_bytes)),
        ints(rows.iter().map(|r| r.retained_bytes)),
        ints(rows.iter().map(|r| r.samples)),
        opt_ints(rows.iter().map(|r| r.estimated_bytes)),
        ranks(rows.iter().map(|r| r.rank)),
    ];
    batch(fields, columns)
}
