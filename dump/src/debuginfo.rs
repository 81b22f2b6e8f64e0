//! Finding an executable's separate debug-info file, as gdb does: the build-id path under
//! `/usr/lib/debug/.build-id/`, then the `.gnu_debuglink` name next to the executable, in its
//! `.debug/` directory and under `/usr/lib/debug`; or the file the user names.
//!
//! A file found by build id is the same build by construction; one found by debuglink must
//! carry the executable's build id (or, without one, the CRC the link records). A named file
//! that is another build is an error, never used.
//!
//! A process in a container has its debug files in its own root: they are looked for there
//! first (through [`FileView`]), then in this machine's debug directory.

use crate::elf::{build_id_of, DebugFile, Executable};
use crate::error::{DumpError, Result};
use crate::source::FileView;
use object::{Object, ObjectSection};
use std::path::{Path, PathBuf};

/// The root of the system's debug files (gdb's `debug-file-directory`).
pub const DEBUG_ROOT: &str = "/usr/lib/debug";

/// Where an executable's debug file is looked for.
#[derive(Clone, Debug)]
pub struct DebugSearch {
    /// The target's own files: its debug directory ([`DEBUG_ROOT`] inside it) is searched
    /// first, and the executable's directory is the target's when `exe_is_targets`.
    pub target: FileView,
    /// The executable's path is the target's name for it (not a copy given here).
    pub exe_is_targets: bool,
    /// This machine's debug directory, searched after the target's.
    pub debug_root: PathBuf,
}

impl DebugSearch {
    /// Only this machine's files: a core's, or a file this machine holds.
    pub fn here(debug_root: &Path) -> DebugSearch {
        DebugSearch { target: FileView::Here, exe_is_targets: false, debug_root: debug_root.to_path_buf() }
    }
}

/// Finds and attaches `exe`'s debug file: `given` if set (an error if it is not of this build),
/// else the first of the usual places (see [`DebugSearch`]) that holds a matching one. Nothing
/// is attached when the executable has its own DWARF, unless a file is given.
pub fn attach(exe: &mut Executable, given: Option<&Path>, search: &DebugSearch) -> Result<()> {
    if let Some(path) = given {
        let data = std::fs::read(path).map_err(|source| DumpError::Io { path: path.to_path_buf(), source })?;
        let debug = open_matching(exe, path, data, "--debug-file")?.map_err(|why| DumpError::DebugFileMismatch {
            executable: exe.path.clone(),
            debug: path.to_path_buf(),
            why,
        })?;
        return exe.attach_debug_file(debug);
    }
    if exe.has_dwarf() {
        return Ok(());
    }
    for (view, path, found_by) in candidates(exe, search) {
        let Ok(data) = view.read(&path) else { continue };
        let shown = match view.root() {
            Some(root) => root.join(path.strip_prefix("/").unwrap_or(&path)),
            None => path,
        };
        if let Ok(Ok(debug)) = open_matching(exe, &shown, data, found_by) {
            return exe.attach_debug_file(debug);
        }
    }
    Ok(())
}

/// Where a debug file of `exe` may be, each with the view it is read through and how the place
/// was found: the target's own places first, then this machine's debug directory.
fn candidates(exe: &Executable, search: &DebugSearch) -> Vec<(FileView, PathBuf, &'static str)> {
    let inside = (search.target != FileView::Here).then_some(search.target);
    let mut roots: Vec<(FileView, PathBuf)> = inside.map(|view| (view, PathBuf::from(DEBUG_ROOT))).into_iter().collect();
    roots.push((FileView::Here, search.debug_root.clone()));
    let mut out = Vec::new();
    if let Some(id) = exe.build_id.as_deref().filter(|id| id.len() > 2) {
        for (view, root) in &roots {
            out.push((*view, root.join(".build-id").join(&id[..2]).join(format!("{}.debug", &id[2..])), "build id"));
        }
    }
    if let Some((name, _)) = debuglink(exe.data()) {
        // The target's name for its executable is canonical already (the kernel's); a copy
        // given here is canonicalised here.
        let (exe_view, real) = match inside.filter(|_| search.exe_is_targets) {
            Some(view) => (view, exe.path.clone()),
            None => (FileView::Here, std::fs::canonicalize(&exe.path).unwrap_or_else(|_| exe.path.clone())),
        };
        let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
        out.push((exe_view, dir.join(&name), "debuglink"));
        out.push((exe_view, dir.join(".debug").join(&name), "debuglink"));
        let relative = dir.strip_prefix("/").unwrap_or(&dir);
        for (view, root) in &roots {
            out.push((*view, root.join(relative).join(&name), "debuglink"));
        }
    }
    out
}

/// `.gnu_debuglink`: a file name, padding, and the CRC32 of that file.
fn debuglink(data: &[u8]) -> Option<(String, u32)> {
    let file = object::File::parse(data).ok()?;
    let bytes = file.section_by_name(".gnu_debuglink")?.data().ok()?;
    let end = bytes.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&bytes[..end]).ok()?.to_string();
    let crc_at = (end + 4) & !3;
    let crc = u32::from_le_bytes(bytes.get(crc_at..crc_at + 4)?.try_into().ok()?);
    (!name.is_empty() && !name.contains('/')).then_some((name, crc))
}

/// Opens `path` as a debug file of `exe`: `Ok(Err(why))` when it is readable but not of this
/// build (or holds no debug info).
fn open_matching(exe: &Executable, path: &Path, data: Vec<u8>, found_by: &'static str) -> Result<std::result::Result<DebugFile, String>> {
    let file = object::File::parse(&*data).map_err(|e| DumpError::Elf { path: path.to_path_buf(), message: e.to_string() })?;
    if file.section_by_name(".debug_info").is_none() && file.symbol_table().is_none() {
        return Ok(Err("it holds neither DWARF debug info nor a symbol table".into()));
    }
    let theirs = build_id_of(&file);
    drop(file);
    let same = match (exe.build_id.as_deref(), theirs.as_deref()) {
        (Some(ours), Some(theirs)) if ours == theirs => true,
        (Some(ours), Some(theirs)) => return Ok(Err(format!("its build id is {theirs}, the executable's is {ours}"))),
        // Without build ids, the CRC the executable's debuglink records.
        _ => match debuglink(exe.data()) {
            Some((_, crc)) => crc32fast::hash(&data) == crc,
            None => false,
        },
    };
    if !same {
        return Ok(Err("nothing shows it is of the same build (no build id, and no matching debuglink CRC)".into()));
    }
    Ok(Ok(DebugFile::new(path.to_path_buf(), found_by, data)))
}
