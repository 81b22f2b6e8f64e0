//! The names oracle: each unit of a program compiled again, as its `.cmt` says it was, with
//! `-drawlambda`, whose stores into the module block (`setfield_ptr(root-init) N (global
//! Unit!) ident/stamp`) say which identifier the compiler put in each field; the `.cmt` reader's
//! field names are compared with them. The raw lambda code is read rather than `-dlambda`'s:
//! simplification replaces an alias (`let b = a`) by what it stands for, and would name `b`'s
//! field `a`.
//!
//! Fields the compiler fills with something other than an identifier (a primitive's closure, a
//! copy of an included module's field, the method cache) are not compared by name.

use crate::reader::{run_reader_with, Toolchain};
use crate::NamesError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the oracle found of one unit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UnitCheck {
    pub unit: String,
    pub file: String,
    /// Fields whose identifier both the compiler and heapsnap name, and agree on.
    pub agreed: usize,
    /// `field N: the compiler stores X, heapsnap names Y`.
    pub wrong: Vec<String>,
    /// Why the unit was not compared (its interface is not found, so heapsnap leaves its
    /// fields unnamed; its source is not on this machine; the compiler failed).
    pub not_compared: Option<String>,
    /// Whether heapsnap leaves the unit's fields unnamed (visibly unknown, not wrong).
    pub unnamed: bool,
}

/// Where a unit's build directory is on this machine, when it moved: `(from, to)` prefixes.
pub type Remap = (PathBuf, PathBuf);

pub struct Oracle {
    toolchain: Toolchain,
    reader: PathBuf,
    remaps: Vec<Remap>,
    includes: Vec<PathBuf>,
}

impl Oracle {
    /// An oracle compiling with `toolchain`; `remaps` move build directories, `includes` are
    /// added to every compilation's load path (a toolchain's `compiler-libs` for the compiler's
    /// own units, whose build tree is gone).
    pub fn new(toolchain: Toolchain, remaps: Vec<Remap>, includes: Vec<PathBuf>, progress: &dyn Fn(&str)) -> Result<Oracle, NamesError> {
        let reader = toolchain.reader(progress)?;
        Ok(Oracle { toolchain, reader, remaps, includes })
    }

    /// Checks every unit of `files` (`.cmt` files), on `jobs` threads.
    pub fn check(&self, files: &[PathBuf], jobs: usize) -> Result<Vec<UnitCheck>, NamesError> {
        let json = run_reader_with(&self.reader, &["--args"], files)?;
        let doc: Value = serde_json::from_str(&json).map_err(|e| NamesError::Output(e.to_string()))?;
        let mut checks: Vec<UnitCheck> = doc
            .get("errors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|e| UnitCheck {
                unit: String::new(),
                file: e.get("file").and_then(Value::as_str).unwrap_or("").to_string(),
                agreed: 0,
                wrong: Vec::new(),
                not_compared: Some(format!("unreadable: {}", e.get("message").and_then(Value::as_str).unwrap_or(""))),
                unnamed: false,
            })
            .collect();
        let units: Vec<&Value> = doc.get("units").and_then(Value::as_array).into_iter().flatten().collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..jobs.max(1) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(unit) = units.get(i) else { break };
                    let check = self.check_unit(unit);
                    results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((i, check));
                });
            }
        });
        let mut results = results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        results.sort_by_key(|(i, _)| *i);
        checks.extend(results.into_iter().map(|(_, c)| c));
        Ok(checks)
    }

    fn check_unit(&self, unit: &Value) -> UnitCheck {
        let text = |k: &str| unit.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let mut check =
            UnitCheck { unit: text("unit"), file: text("file"), agreed: 0, wrong: Vec::new(), not_compared: None, unnamed: false };
        if let Some(why) = unit.get("fields_unknown").and_then(Value::as_str) {
            check.unnamed = true;
            check.not_compared = Some(format!("left unnamed by heapsnap: {why}"));
            return check;
        }
        let fields: Vec<&Value> = unit.get("fields").and_then(Value::as_array).into_iter().flatten().collect();
        let names: Vec<String> = fields.iter().map(|f| f.get("name").and_then(Value::as_str).unwrap_or("").to_string()).collect();
        // Fields the compiler never stores into (the reader's kind `unused`) end no store.
        let stored_fields = fields.iter().rposition(|f| f.get("kind").and_then(Value::as_str) != Some("unused")).map_or(0, |i| i + 1);
        let stored = match self.compile(unit) {
            Ok(stored) => stored,
            Err(why) => {
                check.not_compared = Some(why);
                return check;
            }
        };
        // Every field of the block but those the reader says are never stored is stored once
        // the unit is initialised: the last one stored is the last of those.
        if let Some((&last, _)) = stored.last_key_value() {
            if last + 1 != stored_fields {
                check.wrong.push(format!("the compiler stores up to field {last}, heapsnap has {stored_fields} fields it stores"));
            }
        }
        for (field, ident) in stored.into_iter().filter_map(|(field, ident)| Some((field, ident?))) {
            match names.get(field) {
                Some(name) if *name == ident => check.agreed += 1,
                Some(name) => check.wrong.push(format!("field {field}: the compiler stores {ident}, heapsnap names it {name}")),
                None => check.wrong.push(format!("field {field}: the compiler stores {ident}, heapsnap has {} fields", names.len())),
            }
        }
        check
    }

    fn remap(&self, dir: &Path) -> PathBuf {
        for (from, to) in &self.remaps {
            if let Ok(rest) = dir.strip_prefix(from) {
                return to.join(rest);
            }
        }
        dir.to_path_buf()
    }

    /// Compiles the unit again as its `.cmt` says, into a temporary directory, and returns the
    /// identifier the raw lambda code stores in each field of the unit's module block.
    fn compile(&self, unit: &Value) -> Result<BTreeMap<usize, Option<String>>, String> {
        let args: Vec<String> =
            unit.get("args").and_then(Value::as_array).into_iter().flatten().filter_map(|a| a.as_str().map(str::to_string)).collect();
        let name = unit.get("unit").and_then(Value::as_str).unwrap_or("");
        let builddir = self.remap(Path::new(unit.get("builddir").and_then(Value::as_str).unwrap_or("")));
        if !builddir.is_dir() {
            return Err(format!("its build directory {} is not on this machine", builddir.display()));
        }
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        // The output keeps its file name (the unit's name comes from it), in the temporary
        // directory: the build's files stay as they are.
        let mut output = format!("{}{}.cmx", name.get(..1).unwrap_or("").to_ascii_lowercase(), name.get(1..).unwrap_or(""));
        let mut command = self.toolchain.compiler();
        let mut rest = args.iter().skip(1);
        let mut compiles = false;
        while let Some(a) = rest.next() {
            match a.as_str() {
                "-o" => {
                    if let Some(file) = rest.next().and_then(|o| Path::new(o).file_name()) {
                        output = Path::new(file).with_extension("cmx").to_string_lossy().into_owned();
                    }
                }
                "-c" => compiles = true,
                // Dumps and annotations of the original build are not wanted again.
                "-bin-annot" | "-S" | "-dump-into-file" | "-annot" => {}
                _ => {
                    command.arg(a);
                }
            }
        }
        if !compiles {
            return Err(format!("its command line compiles nothing: {args:?}"));
        }
        // Bytecode's module block is the coerced structure, made in one piece: no store names a
        // field (the native compilation of the same unit has its own .cmt).
        if args.first().and_then(|a| Path::new(a).file_name()).and_then(|f| f.to_str()).is_some_and(|f| f.starts_with("ocamlc")) {
            return Err("compiled by ocamlc (bytecode's module block has no field stores to compare)".into());
        }
        for i in &self.includes {
            command.arg("-I").arg(i);
        }
        command.arg("-c").arg("-drawlambda").arg("-o").arg(tmp.path().join(output)).current_dir(&builddir);
        let out = command.output().map_err(|e| format!("running the compiler: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(4).collect();
            return Err(format!("the compiler failed again: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | ")));
        }
        Ok(root_stores(&String::from_utf8_lossy(&out.stderr)))
    }
}

/// What the `.cmt` reader names the method cache's field.
const METHOD_CACHE: &str = "(method cache)";

/// Every field a lambda dump's `setfield_ptr(root-init) N (global Unit!) VALUE` stores into, with
/// the identifier it stores there when VALUE is one (`ident/stamp`; `(method cache)` for the
/// method cache; the last store of a field, as the block ends up holding it).
pub fn root_stores(lambda: &str) -> BTreeMap<usize, Option<String>> {
    const STORE: &str = "setfield_ptr(root-init) ";
    let mut stores = BTreeMap::new();
    let mut rest = lambda;
    while let Some(at) = rest.find(STORE) {
        rest = &rest[at + STORE.len()..];
        let mut words = rest.split_whitespace();
        let (Some(field), Some(_global), Some(_unit), Some(value)) = (words.next(), words.next(), words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = field.parse::<usize>() else { continue };
        // Translobj.transl_store_label_init's method cache: an array made at the block's end.
        let stored = if value.starts_with("(caml_array_make") || value.starts_with("(caml_make_vect") {
            Some(METHOD_CACHE.to_string())
        } else {
            match value.trim_end_matches(')').split_once('/') {
                Some((ident, stamp)) if !ident.starts_with('(') && !stamp.is_empty() && stamp.chars().all(|c| c.is_ascii_digit()) => {
                    Some(ident.to_string())
                }
                // An expression (a coerced functor, a primitive, an included field's copy).
                _ => None,
            }
        };
        stores.insert(n, stored);
    }
    stores
}

#[cfg(test)]
mod tests {
    #[test]
    fn root_stores_name_identifiers_and_count_every_field() {
        let lambda = "(seq (setfield_ptr(root-init) 0 (global M!) x/12)\n (setfield_ptr(root-init) 1 (global M!)\n   (field_imm 3 (global B!)))\n (setfield_ptr(root-init) 2 (global M!) f/45)\n (setfield_ptr(root-init) 3 (global M!) (caml_array_make 2 0)))";
        let stores = super::root_stores(lambda);
        assert_eq!(stores.len(), 4);
        assert_eq!(stores[&0].as_deref(), Some("x"));
        assert_eq!(stores[&1], None);
        assert_eq!(stores[&2].as_deref(), Some("f"));
        assert_eq!(stores[&3].as_deref(), Some(super::METHOD_CACHE));
    }
}
