//! `heapsnap annotate SNAP`, and the same step at the end of `dump` and `run`: find the
//! program's `.cmt` files, read them with the reader built for the snapshot's OCaml version,
//! keep the units whose module block matches the snapshot's, and store them in the snapshot.

use crate::find;
use crate::model::FileError;
use crate::reader::{run_reader, Toolchain};
use crate::NamesError;
use heapsnap_format::Snapshot;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Clone)]
pub struct AnnotateOptions {
    /// More places to look for `.cmt` files (`--cmt DIR...`), before the usual ones.
    pub cmt_dirs: Vec<PathBuf>,
    /// The toolchain's directory (`--ocaml DIR`); else `ocamlfind`/`ocamlopt` on `PATH`.
    pub ocaml: Option<PathBuf>,
    /// Without `.cmt` files of the program itself, do nothing (no toolchain needed): what
    /// `dump` and `run` do when no `--cmt` was given.
    pub only_if_found: bool,
}

#[derive(Debug, Default)]
pub struct Annotated {
    /// Units named, of the snapshot's units.
    pub units: usize,
    pub snapshot_units: usize,
    /// Units of the program itself (not the standard library's) named.
    pub program_units: usize,
    /// Module-block fields named.
    pub fields: usize,
    /// `.cmt` files left out: unreadable (another version, corrupt) or of another build.
    pub refused: Vec<FileError>,
    /// Nothing was done: no `.cmt` file of the program was found (`only_if_found`).
    pub skipped: bool,
}

pub fn annotate(path: &Path, options: &AnnotateOptions, progress: &dyn Fn(&str)) -> Result<Annotated, NamesError> {
    let snap = Snapshot::open(path)?;
    let units = find::snapshot_units(&snap);
    let wanted: BTreeSet<String> = units.keys().cloned().collect();
    let sources = find::source_dirs(&snap);
    let program = find::find_cmt_files(&options.cmt_dirs, &sources, None, &[], &wanted);
    // The OCaml distribution's own build tree (where the standard library was compiled) may
    // still be on this machine, next to the sources its line tables name: its files are not
    // the program's, and alone they do not call for a toolchain.
    let own = program.values().filter(|p| !options.cmt_dirs.is_empty() || !find::in_ocaml_distribution(p)).count();
    if std::env::var_os("HEAPSNAP_TRACE").is_some() {
        eprintln!("names: source directories {sources:?}; .cmt files found there and in --cmt: {:?}", program.values().collect::<Vec<_>>());
    }
    if own == 0 && options.only_if_found {
        return Ok(Annotated { skipped: true, snapshot_units: units.len(), ..Default::default() });
    }
    let tc = Toolchain::find(options.ocaml.as_deref())?;
    tc.check_version(&snap.metadata().ocaml_version)?;
    let libraries = tc.library_dirs();
    let mut files = find::find_cmt_files(&options.cmt_dirs, &sources, Some(&tc.stdlib), &libraries, &wanted);
    // Units without a module block of their own (a library's alias module, dune's `Lib__`
    // that maps `Lib__.M` to `Lib__M`; a module of types only) still name the types of their
    // library: the program's units' neighbours are read for their types and aliases.
    let in_toolchain = |f: &Path| f.starts_with(&tc.stdlib) || libraries.iter().any(|l| f.starts_with(l));
    let type_only = find::neighbours(files.values().filter(|f| !in_toolchain(f)), &files);
    files.extend(type_only.iter().map(|(unit, file)| (unit.clone(), file.clone())));
    let type_only: BTreeSet<String> = type_only.into_values().map(|f| f.display().to_string()).collect();
    // A unit found among installed libraries may be another program's module of the same
    // name: it is kept only if it was compiled from a source file the executable's debug
    // info names (when that names a file of its name at all).
    let compiled_from = find::source_files(&snap);
    let from_library = |file: &Path| {
        !options.cmt_dirs.iter().any(|d| file.starts_with(d))
            && libraries.iter().any(|l| file.starts_with(l))
            && file.parent() != Some(tc.stdlib.as_path())
    };
    let exe = tc.reader(progress)?;
    progress(&format!("reading {} .cmt files", files.len()));
    let list: Vec<PathBuf> = files.values().cloned().collect();
    let json = run_reader(&exe, &list)?;
    let mut doc: Value = serde_json::from_str(&json).map_err(|e| NamesError::Output(e.to_string()))?;
    let mut refused: Vec<FileError> = Vec::new();
    if let Some(errors) = doc.get("errors").and_then(Value::as_array) {
        refused.extend(errors.iter().filter_map(|e| {
            Some(FileError { file: e.get("file")?.as_str()?.to_string(), message: e.get("message")?.as_str()?.to_string() })
        }));
    }
    let stdlib = tc.stdlib.clone();
    let (mut kept, mut fields, mut program_units, mut type_only_kept) = (Vec::new(), 0, 0, 0);
    let bytecode = snap.metadata().bytecode;
    for mut unit in doc.get_mut("units").and_then(Value::as_array_mut).map(std::mem::take).unwrap_or_default() {
        let name = unit.get("unit").and_then(Value::as_str).unwrap_or("").to_string();
        let file = unit.get("file").and_then(Value::as_str).unwrap_or("").to_string();
        // Bytecode's module block holds the interface's runtime components alone (the coerced
        // structure), the first fields; native code's stores the unit's other idents after
        // them. The others are kept: they name the bindings of a unit's initialisation.
        let n = match unit.get("exported").and_then(Value::as_u64) {
            Some(exported) if bytecode => exported,
            _ => unit.get("fields").and_then(Value::as_array).map_or(0, Vec::len) as u64,
        };
        match units.get(&name) {
            None if type_only.contains(&file) => {
                type_only_kept += 1;
                if let Some(fields) = unit.get_mut("fields") {
                    *fields = Value::Array(Vec::new());
                }
                kept.push(unit);
                continue;
            }
            None => continue,
            Some(Some(size)) if *size != n => {
                refused.push(FileError {
                    file,
                    message: format!(
                        "{name} has {n} module fields here but {size} in the snapshot: a .cmt of another build of the program, left out"
                    ),
                });
                continue;
            }
            _ => {}
        }
        if from_library(Path::new(&file)) {
            if let Some(message) = foreign_source(&unit, &compiled_from) {
                refused.push(FileError { file, message: format!("{name}: {message}: a .cmt of another program or build, left out") });
                continue;
            }
        }
        fields += n as usize;
        if !Path::new(&file).starts_with(&stdlib) {
            program_units += 1;
        }
        kept.push(unit);
    }
    let result =
        Annotated { units: kept.len() - type_only_kept, snapshot_units: units.len(), program_units, fields, refused, skipped: false };
    let stored = serde_json::json!({
        "ocaml_version": tc.version,
        "units": kept,
        "refused": result.refused.iter().map(|e| serde_json::json!({"file": e.file, "message": e.message})).collect::<Vec<_>>(),
    });
    drop(snap);
    heapsnap_format::replace_ocaml_names(path, &stored.to_string())?;
    Ok(result)
}

/// Why a unit's `.cmt` was not compiled from one of `sources` (the executable's source files),
/// when they name a file of its source's name; `None` when it was, or when they name none.
fn foreign_source(unit: &Value, sources: &[PathBuf]) -> Option<String> {
    let source = Path::new(unit.get("source")?.as_str()?);
    let builddir = Path::new(unit.get("builddir").and_then(Value::as_str).unwrap_or(""));
    let compiled = find::normalise(&builddir.join(source));
    let same_name: Vec<&PathBuf> = sources.iter().filter(|f| f.file_name() == source.file_name()).collect();
    if same_name.is_empty() || same_name.contains(&&compiled) {
        return None;
    }
    Some(format!("compiled from {}, but the executable's {} is {}", compiled.display(), source.display(), same_name[0].display()))
}
