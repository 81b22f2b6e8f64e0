//! Where a snapshot's `.cmt` files are: beside the source files its line tables name, in a dune
//! `_build/default` above them, in directories the user gives (`--cmt DIR`), and the standard
//! library's and installed libraries' through the toolchain.

use heapsnap_format::{RootKind, RootRecord, Snapshot};
use heapsnap_values::HeaderFormat;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Directories are searched this deep (a dune tree's `.objs/byte` is 3 to 5 levels down).
const MAX_DEPTH: usize = 8;
/// Library directories are searched this deep: `lib/PKG/SUBPKG/x.cmt`, or
/// `lib/ocaml/site-lib/PKG/x.cmt`.
const LIBRARY_DEPTH: usize = 3;
/// A search stops after this many directory entries (a `--cmt /` must not take forever).
const MAX_ENTRIES: usize = 200_000;

/// The compilation units whose module blocks the snapshot holds (`camlFoo` -> `Foo`), with the
/// block's size in words when it can be read; and those whose bindings it names (bytecode).
pub fn snapshot_units(snap: &Snapshot) -> BTreeMap<String, Option<u64>> {
    let mut units = BTreeMap::new();
    for r in snap.roots() {
        // A bytecode unit still initialising (a program's main unit) has no module block yet:
        // its bindings, in its initialisation's frame, are named `Unit.variable`.
        if r.is_binding() && r.root_kind() == RootKind::Stack {
            if let Some((unit, _)) = snap.string(r.name).and_then(|n| n.split_once('.')) {
                units.entry(unit.to_string()).or_insert(None);
            }
            continue;
        }
        let Some((name, start)) = module_block_of(snap, r) else { continue };
        let header = start.and_then(|start| start.checked_sub(8)).and_then(|at| snap.region_of(at)?.word_at(at));
        let size = header.map(|header| HeaderFormat { reserved_bits: snap.metadata().reserved_header_bits }.wosize(header));
        units.insert(name.to_string(), size);
    }
    units
}

/// A module global's compilation unit (its symbol `camlFoo` names `Foo`) and where its module
/// block's fields start (`None` when the root's slot and field index do not add up); `None`
/// for other roots.
pub fn module_block_of<'s>(snap: &'s Snapshot, r: &RootRecord) -> Option<(&'s str, Option<u64>)> {
    if !matches!(r.root_kind(), RootKind::Global | RootKind::DynGlobal) {
        return None;
    }
    // A unit's symbol is `caml` and its name (which starts with a capital); bytecode on OCaml
    // 4.14 has `caml_global_data` among its globals too.
    let name = snap.string(r.name)?.strip_prefix("caml").filter(|n| n.starts_with(|c: char| c.is_ascii_uppercase()))?;
    Some((name, r.origin.checked_mul(8).and_then(|offset| r.slot.checked_sub(offset))))
}

/// The `.cmt` files beside `files` whose units are not among `found`, by unit name (at most
/// a few thousand). A name found in several directories (dune names every executable's alias
/// module `Dune__exe`) is taken from the one that holds the most of `files`, and left out on
/// a tie.
pub fn neighbours<'a>(files: impl Iterator<Item = &'a PathBuf>, found: &BTreeMap<String, Vec<PathBuf>>) -> BTreeMap<String, PathBuf> {
    let mut per_dir: BTreeMap<&Path, usize> = BTreeMap::new();
    for f in files {
        if let Some(d) = f.parent() {
            *per_dir.entry(d).or_default() += 1;
        }
    }
    let mut candidates: BTreeMap<String, Vec<(usize, PathBuf)>> = BTreeMap::new();
    for (d, weight) in &per_dir {
        let Ok(entries) = std::fs::read_dir(d) else { continue };
        for e in entries.flatten().take(MAX_ENTRIES) {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "cmt") {
                continue;
            }
            let Some(unit) = path.file_stem().and_then(|s| s.to_str()).map(capitalize) else { continue };
            if !found.contains_key(&unit) && candidates.len() < 10_000 {
                candidates.entry(unit).or_default().push((*weight, path));
            }
        }
    }
    candidates
        .into_iter()
        .filter_map(|(unit, mut c)| {
            c.sort_by_key(|(weight, _)| std::cmp::Reverse(*weight));
            let tie = c.get(1).is_some_and(|second| second.0 == c[0].0);
            (!tie).then(|| (unit, c.swap_remove(0).1))
        })
        .collect()
}

/// The directories of the source files named by the snapshot's line tables (the executable's).
pub fn source_dirs(snap: &Snapshot) -> Vec<PathBuf> {
    let dirs: BTreeSet<PathBuf> = source_files(snap).iter().filter_map(|f| f.parent().map(Path::to_path_buf)).collect();
    dirs.into_iter().collect()
}

/// The `.ml` files named by the snapshot's line tables (the executable's), as full paths
/// without `.` components.
pub fn source_files(snap: &Snapshot) -> Vec<PathBuf> {
    let mut files = BTreeSet::new();
    let section = |id: gimli::SectionId| -> Result<gimli::EndianSlice<'_, gimli::LittleEndian>, gimli::Error> {
        Ok(gimli::EndianSlice::new(snap.dwarf_section(id.name()).unwrap_or(&[]), gimli::LittleEndian))
    };
    let Ok(dwarf) = gimli::Dwarf::load(section) else { return Vec::new() };
    let mut units = dwarf.units();
    let mut count = 0;
    while let Ok(Some(header)) = units.next() {
        count += 1;
        if count > 100_000 {
            break;
        }
        let Ok(unit) = dwarf.unit(header) else { continue };
        let comp_dir = unit.comp_dir.map(|d| PathBuf::from(d.to_string_lossy().into_owned()));
        let Some(program) = &unit.line_program else { continue };
        let h = program.header();
        for file in h.file_names() {
            let Ok(name) = dwarf.attr_string(&unit, file.path_name()) else { continue };
            let name = PathBuf::from(name.to_string_lossy().into_owned());
            if name.extension().and_then(|e| e.to_str()) != Some("ml") {
                continue;
            }
            let dir =
                file.directory(h).and_then(|d| dwarf.attr_string(&unit, d).ok()).map(|d| PathBuf::from(d.to_string_lossy().into_owned()));
            let mut full = PathBuf::new();
            if let Some(c) = &comp_dir {
                full.push(c);
            }
            if let Some(d) = dir {
                full.push(d);
            }
            full.push(name);
            files.insert(normalise(&full));
        }
    }
    files.into_iter().collect()
}

/// `path` without its `.` components (`/b/./x.ml` -> `/b/x.ml`), as debug info and `.cmt`
/// files may write the same file.
pub fn normalise(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect()
}

/// A unit's `.cmt` files are kept up to this many (a build tree with one executable per test
/// has dozens of `Dune__exe__Main`).
pub const MAX_CANDIDATES: usize = 32;

/// The `.cmt` files of each wanted unit, in the order they were found: in `given` (searched
/// deep), then beside the sources and in a dune `_build/default` above them (deep), then the
/// standard library's directory, then installed libraries (`libraries`, a package and its
/// subdirectories each). Every file of a unit's name is a candidate: a build tree may hold
/// several programs whose units share names (dune names every executable's `Dune__exe__*`),
/// and which of them this program was built from is chosen once they are read.
pub fn find_cmt_files(
    given: &[PathBuf],
    source_dirs: &[PathBuf],
    stdlib: Option<&Path>,
    libraries: &[PathBuf],
    wanted: &BTreeSet<String>,
) -> BTreeMap<String, Vec<PathBuf>> {
    let mut found = BTreeMap::new();
    let mut budget = MAX_ENTRIES;
    for d in given {
        if d.is_file() {
            add_file(d, wanted, &mut found);
        } else {
            scan(d, MAX_DEPTH, wanted, &mut found, &mut budget);
        }
    }
    for d in source_dirs {
        scan(d, 0, wanted, &mut found, &mut budget);
    }
    let mut builds = BTreeSet::new();
    for d in source_dirs {
        for a in d.ancestors() {
            if a.ends_with("_build/default") {
                builds.insert(a.to_path_buf());
            }
            let b = a.join("_build/default");
            if b.is_dir() {
                builds.insert(b);
            }
        }
    }
    for b in builds {
        scan(&b, MAX_DEPTH, wanted, &mut found, &mut budget);
    }
    if let Some(s) = stdlib {
        scan(s, 0, wanted, &mut found, &mut budget);
    }
    for l in libraries {
        if found.len() == wanted.len() {
            break;
        }
        scan(l, LIBRARY_DEPTH, wanted, &mut found, &mut budget);
    }
    found
}

/// A `.cmt` file's stem as its unit's name (`stdune__Lazy` -> `Stdune__Lazy`).
fn capitalize(stem: &str) -> String {
    let mut unit = stem.to_string();
    if let Some(first) = unit.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    unit
}

fn add_file(path: &Path, wanted: &BTreeSet<String>, found: &mut BTreeMap<String, Vec<PathBuf>>) {
    if path.extension().and_then(|e| e.to_str()) != Some("cmt") {
        return;
    }
    let Some(unit) = path.file_stem().and_then(|s| s.to_str()).map(capitalize) else { return };
    if !wanted.contains(&unit) {
        return;
    }
    // The same file reached twice (`--cmt _build/default` and the build tree found above the
    // sources) is one candidate.
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let candidates = found.entry(unit).or_default();
    if candidates.len() < MAX_CANDIDATES && !candidates.contains(&path) {
        candidates.push(path);
    }
}

fn scan(dir: &Path, depth: usize, wanted: &BTreeSet<String>, found: &mut BTreeMap<String, Vec<PathBuf>>, budget: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut subdirs = Vec::new();
    for e in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let path = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => subdirs.push(path),
            Ok(t) if t.is_file() => add_file(&path, wanted, found),
            _ => {}
        }
    }
    if depth > 0 {
        subdirs.sort();
        for d in subdirs {
            scan(&d, depth - 1, wanted, found, budget);
        }
    }
}

/// Whether a file lies in an OCaml distribution's source or build tree (its `stdlib/` beside
/// or above it).
pub fn in_ocaml_distribution(path: &Path) -> bool {
    path.ancestors().skip(1).take(4).any(|a| a.join("camlinternalFormat.ml").is_file() || a.join("stdlib/camlinternalFormat.ml").is_file())
}
