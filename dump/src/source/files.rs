//! The target's files as the target sees them.
//!
//! A process in its own mount namespace or root (a container, `chroot`, systemd's
//! `RootDirectory=`) names its executable, libraries and plugins by paths that lead, here, to
//! nothing or to another file. They are read through the target's own view instead: the file a
//! mapping maps (`/proc/PID/map_files/START-END`, the very file, even deleted or replaced), or
//! the path resolved inside the target's root (`/proc/PID/root`, with absolute symbolic links
//! kept inside it); never the file at the same path here. A core's paths are this machine's.

use super::maps::Mapping;
use super::memory::MemorySource;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the paths a target names are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileView {
    /// Here: the target is a core file, whose paths name files of this machine.
    Here,
    /// Inside the root of the live process `pid`.
    Process(u32),
}

/// A file of the target, opened, with the name to show for it (the target's own path).
pub struct TargetFile {
    pub file: File,
    pub shown: PathBuf,
}

impl TargetFile {
    pub fn read_all(mut self) -> std::io::Result<Vec<u8>> {
        let mut data = Vec::new();
        self.file.read_to_end(&mut data)?;
        Ok(data)
    }
}

impl FileView {
    /// A live process's view, or this machine's for a core.
    pub fn of(source: &dyn MemorySource) -> FileView {
        source.pid().map_or(FileView::Here, FileView::Process)
    }

    /// The target's root directory from here (`/proc/PID/root`), for a process.
    pub fn root(&self) -> Option<PathBuf> {
        match self {
            FileView::Here => None,
            FileView::Process(pid) => Some(PathBuf::from(format!("/proc/{pid}/root"))),
        }
    }

    /// Opens `path` as the target names it. For a process the path is resolved inside its
    /// root, which `..` and absolute symbolic links do not leave (`openat2`'s
    /// `RESOLVE_IN_ROOT`); a relative path is its working directory's.
    pub fn open(&self, path: &Path) -> std::io::Result<File> {
        let FileView::Process(pid) = *self else { return File::open(path) };
        let Ok(inside) = path.strip_prefix("/") else {
            // The working directory as the process names it, else the link to it.
            let cwd = format!("/proc/{pid}/cwd");
            return match std::fs::read_link(&cwd).map(|dir| self.open(&dir.join(path))) {
                Ok(Ok(file)) => Ok(file),
                _ => File::open(Path::new(&cwd).join(path)),
            };
        };
        let root = File::open(format!("/proc/{pid}/root"))?;
        let how = OpenHow::new().flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC).mode(Mode::empty()).resolve(ResolveFlag::RESOLVE_IN_ROOT);
        match openat2(&root, inside, how) {
            Ok(fd) => Ok(File::from(fd)),
            // Kernels before 5.6 have no openat2: the path under the root link, where an
            // absolute symbolic link would lead out of it (a file's build id is checked).
            Err(nix::errno::Errno::ENOSYS) => File::open(PathBuf::from(format!("/proc/{pid}/root")).join(inside)),
            Err(errno) => Err(std::io::Error::from(errno)),
        }
    }

    /// Reads the whole of `path` as the target names it (see [`FileView::open`]).
    pub fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        TargetFile { file: self.open(path)?, shown: path.to_path_buf() }.read_all()
    }

    /// Opens the file that mapping `m` maps. For a process: the mapped file itself through
    /// `/proc/PID/map_files` (which needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), else the
    /// mapping's path inside the target's root. That one may have been replaced since it was
    /// mapped (and on overlayfs a mapping shows the inode of a layer's file, not the merged
    /// one the path opens, so inodes cannot tell): callers check its build id against the
    /// target's memory.
    pub fn open_mapped(&self, m: &Mapping) -> std::io::Result<TargetFile> {
        let path = m.path.as_deref().ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "not a file mapping"))?;
        let shown = path.to_path_buf();
        let FileView::Process(pid) = *self else { return Ok(TargetFile { file: File::open(path)?, shown }) };
        if let Ok(file) = File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)) {
            return Ok(TargetFile { file, shown });
        }
        // A deleted file is named "PATH (deleted)": the path inside the root is another file.
        let live = not_deleted(path).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the file was deleted since it was mapped, and /proc/PID/map_files is not readable",
            )
        })?;
        Ok(TargetFile { file: self.open(live)?, shown })
    }
}

/// `path`, unless it names a mapped file removed since it was mapped (the kernel appends
/// " (deleted)" to its path).
fn not_deleted(path: &Path) -> Option<&Path> {
    (!path.as_os_str().as_encoded_bytes().ends_with(b" (deleted)")).then_some(path)
}

/// The identity of the file at `path`: its device and inode (through a `/proc/PID/exe` link,
/// the running executable itself), and the names the target's mappings may give it.
pub struct FileIdentity {
    inode: Option<(u64, u64)>,
    names: Vec<PathBuf>,
}

impl FileIdentity {
    /// For `/proc/PID/exe`: the file it leads to, named as the target's mappings name it (the
    /// link's text), never resolved here. For another path: the file, by its path and its
    /// canonical path here.
    pub fn of(path: &Path) -> FileIdentity {
        let inode = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
        let mut names = vec![path.to_path_buf()];
        if path.starts_with("/proc") {
            names.extend(std::fs::read_link(path));
        } else {
            names.extend(std::fs::canonicalize(path));
        }
        FileIdentity { inode, names }
    }

    /// The file the target's mappings name `path` (as the target names it: nothing is looked
    /// up here).
    pub fn named(path: &Path) -> FileIdentity {
        FileIdentity { inode: None, names: vec![path.to_path_buf()] }
    }

    /// Whether mapping `m` maps this file: the same device and inode, or, where the mappings
    /// do not say them or show another layer's (overlayfs), the same name.
    pub fn maps(&self, m: &Mapping) -> bool {
        if m.inode.is_some() && m.inode == self.inode {
            return true;
        }
        m.path.as_ref().is_some_and(|p| self.names.contains(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps_of_self() -> Vec<Mapping> {
        crate::source::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap())
    }

    #[test]
    fn a_process_paths_are_resolved_in_its_root() {
        let view = FileView::Process(std::process::id());
        assert_eq!(view.read(Path::new("/etc/hostname")).ok(), std::fs::read("/etc/hostname").ok());
        assert!(view.open(Path::new("/no/such/file")).is_err());
        // A relative path is the process's working directory's.
        let cwd = std::env::current_dir().unwrap();
        let name = std::fs::read_dir(&cwd).unwrap().flatten().find(|e| e.path().is_file()).expect("a file here").file_name();
        assert_eq!(view.read(Path::new(&name)).unwrap(), std::fs::read(cwd.join(&name)).unwrap());
    }

    #[test]
    fn the_executable_is_found_among_its_mappings_by_inode_and_by_name() {
        let id = FileIdentity::of(Path::new("/proc/self/exe"));
        let maps = maps_of_self();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mine: Vec<&Mapping> = maps.iter().filter(|m| id.maps(m)).collect();
        assert!(!mine.is_empty() && mine.iter().all(|m| m.path.as_deref() == Some(&*exe)), "{mine:?}");
        // Without device and inode (a core's mappings), by the link's text.
        let by_name = maps.iter().filter(|m| id.maps(&Mapping { inode: None, ..(*m).clone() })).count();
        assert_eq!(by_name, mine.len());
        // Another file of the same name is not it.
        let other = Mapping { inode: Some((1, 1)), path: Some(PathBuf::from("/elsewhere")), ..mine[0].clone() };
        assert!(!id.maps(&other));
    }

    #[test]
    fn a_mapped_file_opens_as_the_mapped_one() {
        let maps = maps_of_self();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let m = maps.iter().find(|m| m.offset == 0 && m.path.as_deref() == Some(&*exe)).unwrap();
        let opened = FileView::Process(std::process::id()).open_mapped(m).unwrap();
        let meta = opened.file.metadata().unwrap();
        assert_eq!(Some((meta.dev(), meta.ino())), m.inode);
        assert_eq!(opened.shown, exe);
    }
}
