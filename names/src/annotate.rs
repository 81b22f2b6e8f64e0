//! `heapsnap annotate SNAP`, and the same step at the end of `dump` and `run`: find the
//! program's `.cmt` files, read them with the reader built for the snapshot's OCaml version,
//! keep the units whose module block matches the snapshot's, and store them in the snapshot.

use crate::find;
use crate::model::FileError;
use crate::reader::{run_reader, Toolchain};
use crate::NamesError;
use heapsnap_format::Snapshot;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};
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
    /// Units for which several `.cmt` files were candidates: the one kept, and why.
    pub choices: Vec<Chosen>,
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
    let own = program.values().flatten().filter(|p| !options.cmt_dirs.is_empty() || !find::in_ocaml_distribution(p)).count();
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
    let type_only = find::neighbours(files.values().flatten().filter(|f| !in_toolchain(f)), &files);
    files.extend(type_only.iter().map(|(unit, file)| (unit.clone(), vec![file.clone()])));
    let type_only: BTreeSet<String> = type_only.into_values().map(|f| f.display().to_string()).collect();
    let exe = tc.reader(progress)?;
    let list: Vec<PathBuf> = files.values().flatten().cloned().collect();
    progress(&format!("reading {} .cmt files", list.len()));
    let json = run_reader(&exe, &list)?;
    let mut doc: Value = serde_json::from_str(&json).map_err(|e| NamesError::Output(e.to_string()))?;
    let mut refused: Vec<FileError> = Vec::new();
    if let Some(errors) = doc.get("errors").and_then(Value::as_array) {
        refused.extend(errors.iter().filter_map(|e| {
            Some(FileError { file: e.get("file")?.as_str()?.to_string(), message: e.get("message")?.as_str()?.to_string() })
        }));
    }
    // The reader's units by name, each name's candidates in the order their files were found.
    let mut read: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for unit in doc.get_mut("units").and_then(Value::as_array_mut).map(std::mem::take).unwrap_or_default() {
        let name = unit.get("unit").and_then(Value::as_str).unwrap_or("").to_string();
        read.entry(name).or_default().push(unit);
    }
    let symbols: HashSet<&str> = snap.symbols().iter().filter_map(|s| snap.string(s.name)).filter(|n| n.starts_with("caml")).collect();
    let rules = Rules {
        symbols,
        compiled_from: find::source_files(&snap),
        bytecode: snap.metadata().bytecode,
        library: &|file: &Path| {
            !options.cmt_dirs.iter().any(|d| file.starts_with(d))
                && libraries.iter().any(|l| file.starts_with(l))
                && file.parent() != Some(tc.stdlib.as_path())
        },
    };
    let (mut kept, mut fields, mut program_units, mut type_only_kept, mut choices) = (Vec::new(), 0, 0, 0, Vec::new());
    for (name, candidates) in read {
        let Some(&size) = units.get(&name) else {
            // A neighbour read for its types alone: its module block, if it has one, is not
            // the snapshot's.
            if let Some(mut unit) = candidates.into_iter().find(|u| type_only.contains(file_of(u))) {
                type_only_kept += 1;
                if let Some(fields) = unit.get_mut("fields") {
                    *fields = Value::Array(Vec::new());
                }
                kept.push(unit);
            }
            continue;
        };
        match choose(&name, size, candidates, &rules) {
            Choice::Named { unit, why } => {
                fields += rules.field_count(&unit) as usize;
                if !Path::new(file_of(&unit)).starts_with(&tc.stdlib) {
                    program_units += 1;
                }
                if let Some(why) = why {
                    choices.push(Chosen { unit: name, file: file_of(&unit).to_string(), why });
                }
                kept.push(unit);
            }
            Choice::TypesOnly { mut unit, why } => {
                refused.push(FileError {
                    file: file_of(&unit).to_string(),
                    message: format!("{name}: {why}: its module fields are left unnamed"),
                });
                if let Some(fields) = unit.get_mut("fields") {
                    *fields = Value::Array(Vec::new());
                }
                type_only_kept += 1;
                kept.push(unit);
            }
            Choice::Refused(errors) => refused.extend(errors),
        }
    }
    // Names the snapshot's module blocks contradict are dropped, unit by unit.
    for (name, wrong) in contradicted(&snap, &kept) {
        let Some(unit) = kept.iter_mut().find(|u| u.get("unit").and_then(Value::as_str) == Some(name.as_str())) else { continue };
        fields -= rules.field_count(unit) as usize;
        if !Path::new(file_of(unit)).starts_with(&tc.stdlib) {
            program_units -= 1;
        }
        let others = match wrong.len() {
            1 => String::new(),
            n => format!(", and {} more", n - 1),
        };
        refused.push(FileError {
            file: file_of(unit).to_string(),
            message: format!("{name}: the snapshot contradicts these names ({}{others}): its module fields are left unnamed", wrong[0]),
        });
        if let Some(fields) = unit.get_mut("fields") {
            *fields = Value::Array(Vec::new());
        }
        type_only_kept += 1;
    }
    let result = Annotated {
        units: kept.len() - type_only_kept,
        snapshot_units: units.len(),
        program_units,
        fields,
        refused,
        choices,
        skipped: false,
    };
    // The functions' identifiers served to choose among candidates; the snapshot keeps none.
    for unit in &mut kept {
        if let Some(o) = unit.as_object_mut() {
            o.remove("function_idents");
        }
    }
    let stored = serde_json::json!({
        "ocaml_version": tc.version,
        "units": kept,
        "refused": result.refused.iter().map(|e| serde_json::json!({"file": e.file, "message": e.message})).collect::<Vec<_>>(),
        "chosen": result.choices.iter().map(|c| serde_json::json!({"unit": c.unit, "file": c.file, "why": c.why})).collect::<Vec<_>>(),
    });
    drop(snap);
    heapsnap_format::replace_ocaml_names(path, &stored.to_string())?;
    Ok(result)
}

/// The units of `kept` whose names their module block contradicts, with the contradictions
/// (`heap_check`). Their types are read as the snapshot's will be, from every unit kept.
fn contradicted(snap: &Snapshot, kept: &[Value]) -> Vec<(String, Vec<crate::heap_check::Contradiction>)> {
    let json = serde_json::json!({ "units": kept }).to_string();
    let Ok(program) = crate::Program::parse(&json) else { return Vec::new() };
    let env = crate::TypeEnv::new(&program);
    let blocks = crate::heap_check::module_blocks(snap);
    program
        .units
        .iter()
        .filter_map(|unit| {
            let values = blocks.get(&unit.unit)?;
            let wrong = crate::heap_check::contradictions(snap, &env, &unit.fields, values);
            (!wrong.is_empty()).then(|| (unit.unit.clone(), wrong))
        })
        .collect()
}

fn file_of(unit: &Value) -> &str {
    unit.get("file").and_then(Value::as_str).unwrap_or("")
}

/// What decides whether a `.cmt` file is the one this program was built from.
struct Rules<'a> {
    /// The executable's symbols (`camlUnit.name_stamp`, the code of functions).
    symbols: HashSet<&'a str>,
    /// The `.ml` files the executable's line tables name.
    compiled_from: Vec<PathBuf>,
    bytecode: bool,
    /// Whether a file lies among installed libraries (not the standard library's own
    /// directory, nor a directory the user gave).
    library: &'a dyn Fn(&Path) -> bool,
}

impl Rules<'_> {
    /// The fields of a unit's module block: bytecode's holds the interface's runtime components
    /// alone (the coerced structure), the first fields; native code's stores the unit's other
    /// idents after them. The others are kept: they name the bindings of a unit's
    /// initialisation.
    fn field_count(&self, unit: &Value) -> u64 {
        match unit.get("exported").and_then(Value::as_u64) {
            Some(exported) if self.bytecode => exported,
            _ => unit.get("fields").and_then(Value::as_array).map_or(0, Vec::len) as u64,
        }
    }

    /// Why `unit` cannot be the snapshot's unit of module-block size `size`, if it cannot.
    fn misfit(&self, name: &str, size: Option<u64>, unit: &Value) -> Option<String> {
        if let Some(why) = unit.get("fields_unknown").and_then(Value::as_str) {
            return Some(why.to_string());
        }
        let n = self.field_count(unit);
        if let Some(size) = size.filter(|&size| size != n) {
            return Some(format!("{name} has {n} module fields here but {size} in the snapshot"));
        }
        None
    }

    /// How many of `unit`'s functions the executable has code of, by symbol: native code names
    /// a function after its identifier's unique name, whose stamp differs between two builds
    /// of a unit as soon as anything compiled before it does.
    fn functions_found(&self, name: &str, unit: &Value) -> usize {
        let idents = unit.get("function_idents").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
        idents
            .filter(|id| {
                self.symbols.contains(format!("caml{name}.{id}").as_str()) || self.symbols.contains(format!("caml{name}__{id}").as_str())
            })
            .count()
    }

    /// Whether the executable names the source file `unit` was compiled from: `Some(false)`
    /// when it names another file of that name, `None` when it names none of that name.
    fn same_source(&self, unit: &Value) -> Option<bool> {
        let source = Path::new(unit.get("source")?.as_str()?);
        let builddir = Path::new(unit.get("builddir").and_then(Value::as_str).unwrap_or(""));
        let compiled = find::normalise(&builddir.join(source));
        let mut same_name = self.compiled_from.iter().filter(|f| f.file_name() == source.file_name()).peekable();
        same_name.peek()?;
        Some(same_name.any(|f| *f == compiled))
    }
}

/// A `.cmt` file kept for a unit when several were candidates, and why that one.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub unit: String,
    pub file: String,
    pub why: String,
}

enum Choice {
    /// The unit's names, and why this candidate when there were several.
    Named {
        unit: Value,
        why: Option<String>,
    },
    /// A unit whose module fields cannot be named (its interface is not found), kept for its
    /// types and functions, whose names do not depend on the fields' order.
    TypesOnly {
        unit: Value,
        why: String,
    },
    Refused(Vec<FileError>),
}

/// Which of a unit's `.cmt` files (several when a build tree holds several programs whose units
/// share names) the program was built from: those whose module block has the snapshot's size,
/// then, of those, the ones compiled from a source file the executable names. One left is
/// chosen; several alike (the same fields, kinds and types) are one answer; several that differ
/// leave the unit unnamed rather than guessed. An installed library's file compiled from
/// another source than the executable's is never taken (another program's module of that name).
fn choose(name: &str, size: Option<u64>, mut candidates: Vec<Value>, rules: &Rules) -> Choice {
    let count = candidates.len();
    if count == 1 {
        if let Some(why) = candidates[0].get("fields_unknown").and_then(Value::as_str).map(str::to_string) {
            return Choice::TypesOnly { unit: candidates.remove(0), why };
        }
    }
    let mut unfit: Vec<FileError> = Vec::new();
    let mut fit: Vec<(Value, Option<bool>)> = Vec::new();
    for unit in candidates {
        let file = file_of(&unit).to_string();
        let same_source = rules.same_source(&unit);
        if let Some(why) = rules.misfit(name, size, &unit) {
            unfit.push(FileError { file, message: why });
        } else if same_source == Some(false) && (rules.library)(Path::new(&file)) {
            unfit.push(FileError { file, message: format!("{name}: compiled from another source than the executable's") });
        } else {
            fit.push((unit, same_source));
        }
    }
    // The executable's code of a build's functions tells builds apart best (their stamps).
    if fit.len() > 1 {
        let found: Vec<usize> = fit.iter().map(|(u, _)| rules.functions_found(name, u)).collect();
        let best = found.iter().copied().max().unwrap_or(0);
        if best > 0 && found.iter().any(|&f| f < best) {
            let mut kept = Vec::new();
            for ((unit, same), f) in std::mem::take(&mut fit).into_iter().zip(found) {
                if f == best {
                    kept.push((unit, same));
                } else {
                    let message = format!("{name}: the executable has the code of {f} of its functions, another build's {best}");
                    unfit.push(FileError { file: file_of(&unit).to_string(), message });
                }
            }
            fit = kept;
        }
    }
    let confirmed = fit.iter().filter(|(_, same)| *same == Some(true)).count();
    if confirmed > 0 {
        for (unit, same) in std::mem::take(&mut fit) {
            if same == Some(true) {
                fit.push((unit, same));
            } else {
                let message = format!("{name}: not compiled from the source file the executable names");
                unfit.push(FileError { file: file_of(&unit).to_string(), message });
            }
        }
    }
    let alike = |a: &Value, b: &Value| {
        a.get("fields") == b.get("fields") && a.get("types") == b.get("types") && a.get("functions") == b.get("functions")
    };
    match fit.len() {
        0 if count == 1 => Choice::Refused(
            unfit.into_iter().map(|e| FileError { message: format!("{}: a .cmt of another build of the program, left out", e.message), ..e }).collect(),
        ),
        0 => {
            Choice::Refused(vec![FileError {
                file: unfit.iter().map(|e| e.file.as_str()).collect::<Vec<_>>().join(", "),
                message: format!(
                    "{name}: none of its {count} .cmt files fits the snapshot: {}",
                    unfit.iter().map(|e| format!("{} ({})", e.file, e.message)).collect::<Vec<_>>().join("; ")
                ),
            }])
        }
        1 => {
            let (unit, same) = fit.pop().expect("one");
            let why = (count > 1).then(|| {
                let reason = if unfit.iter().any(|e| e.message.contains("the code of")) {
                    "the one whose functions' code the executable has"
                } else if same == Some(true) {
                    "the one compiled from the source file the executable names"
                } else {
                    "the only one whose module block has the snapshot's size"
                };
                format!("of {count} candidates, {reason} (the others: {})", unfit.iter().map(|e| format!("{}: {}", e.file, e.message)).collect::<Vec<_>>().join("; "))
            });
            Choice::Named { unit, why }
        }
        n if fit.iter().all(|(u, _)| alike(u, &fit[0].0)) => {
            let why = format!("{n} candidates fit and name the same fields and types: the first found");
            Choice::Named { unit: fit.swap_remove(0).0, why: Some(why) }
        }
        n => Choice::Refused(vec![FileError {
            file: fit.iter().map(|(u, _)| file_of(u)).collect::<Vec<_>>().join(", "),
            message: format!(
                "{name}: {n} .cmt files fit the snapshot but name its fields differently, and nothing tells which this program was built from: left unnamed (give the right build's directory with --cmt)"
            ),
        }]),
    }
}

#[cfg(test)]
mod tests {
    use super::{choose, Choice, Rules};
    use serde_json::{json, Value};
    use std::path::{Path, PathBuf};

    fn unit(file: &str, source: &str, fields: &[&str]) -> Value {
        json!({
            "unit": "Lr1", "file": file, "source": source, "builddir": "/b",
            "fields": fields.iter().map(|f| json!({"name": f, "path": f, "kind": "value", "type": null})).collect::<Vec<_>>(),
            "exported": fields.len(), "types": [],
        })
    }

    fn rules(compiled_from: &[&str]) -> Rules<'static> {
        Rules {
            symbols: ["camlLr1.reduce_12", "camlLr1.shift_20"].into_iter().collect(),
            compiled_from: compiled_from.iter().map(PathBuf::from).collect(),
            bytecode: false,
            library: &|_: &Path| false,
        }
    }

    fn named(choice: Choice) -> (String, Option<String>) {
        match choice {
            Choice::Named { unit, why } => (unit["file"].as_str().unwrap().to_string(), why),
            Choice::TypesOnly { why, .. } => panic!("types only: {why}"),
            Choice::Refused(e) => panic!("refused: {e:?}"),
        }
    }

    #[test]
    fn of_two_builds_the_one_of_the_snapshots_size_is_named() {
        let (a, b) =
            (unit("/b/stage1/lr1.cmt", "stage1/lr1.ml", &["a", "b"]), unit("/b/stage2/lr1.cmt", "stage2/lr1.ml", &["a", "b", "c"]));
        let (file, why) = named(choose("Lr1", Some(3), vec![a, b], &rules(&[])));
        assert_eq!(file, "/b/stage2/lr1.cmt");
        assert!(why.unwrap().contains("/b/stage1/lr1.cmt: Lr1 has 2 module fields here but 3 in the snapshot"));
    }

    #[test]
    fn of_two_builds_of_one_size_the_one_the_executable_was_compiled_from_is_named() {
        let (a, b) = (unit("/b/stage1/lr1.cmt", "stage1/lr1.ml", &["a", "b"]), unit("/b/stage2/lr1.cmt", "stage2/lr1.ml", &["b", "a"]));
        let (file, why) = named(choose("Lr1", Some(2), vec![a.clone(), b.clone()], &rules(&["/b/stage2/lr1.ml"])));
        assert_eq!(file, "/b/stage2/lr1.cmt");
        assert!(why.unwrap().contains("compiled from the source file the executable names"));
        // Nothing tells them apart: neither is named.
        match choose("Lr1", Some(2), vec![a.clone(), b], &rules(&[])) {
            Choice::Refused(e) => {
                assert!(e[0].file.contains("/b/stage1/lr1.cmt") && e[0].file.contains("/b/stage2/lr1.cmt"), "{e:?}");
                assert!(e[0].message.contains("name its fields differently"), "{e:?}");
            }
            _ => panic!("two different builds must not be guessed between"),
        }
        // Two alike (the same sources built twice) are one answer.
        let twin = unit("/b/stage2/lr1.cmt", "stage2/lr1.ml", &["a", "b"]);
        let (file, why) = named(choose("Lr1", Some(2), vec![a, twin], &rules(&[])));
        assert_eq!(file, "/b/stage1/lr1.cmt");
        assert!(why.unwrap().contains("the same fields and types"));
    }

    #[test]
    fn of_two_builds_alike_but_for_stamps_the_one_whose_code_the_executable_has_is_named() {
        let mut a = unit("/b/stage1/lr1.cmt", "stage1/lr1.ml", &["a", "b"]);
        let mut b = unit("/b/stage2/lr1.cmt", "stage2/lr1.ml", &["a", "b"]);
        a["function_idents"] = json!(["reduce_11", "shift_19"]);
        b["function_idents"] = json!(["reduce_12", "shift_20"]);
        let (file, why) = named(choose("Lr1", Some(2), vec![a, b], &rules(&[])));
        assert_eq!(file, "/b/stage2/lr1.cmt");
        assert!(why.unwrap().contains("whose functions' code the executable has"));
    }

    #[test]
    fn a_unit_whose_interface_is_not_found_keeps_its_types_but_names_no_field() {
        let mut u = unit("/b/native/lr1.cmt", "lr1.ml", &[]);
        u["fields_unknown"] = json!("its interface is not beside it");
        match choose("Lr1", Some(3), vec![u], &rules(&[])) {
            Choice::TypesOnly { why, .. } => assert!(why.contains("interface")),
            _ => panic!("an unknown field order must not name fields"),
        }
        let one = unit("/b/native/lr1.cmt", "lr1.ml", &["a"]);
        match choose("Lr1", Some(3), vec![one], &rules(&[])) {
            Choice::Refused(e) => assert!(e[0].message.contains("a .cmt of another build"), "{e:?}"),
            _ => panic!("a unit of another size must be refused"),
        }
    }
}
