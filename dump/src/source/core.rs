//! An ELF core file (from `gcore`, or the kernel after a crash) as a [`MemorySource`].
//!
//! The core is mapped with memmap2 and parsed with `object`: `PT_LOAD` segments give the
//! memory, `NT_PRSTATUS` notes each thread's registers, `NT_FILE` what file was mapped where,
//! `NT_AUXV` the executable's entry point (to know which mapped file is the executable).
//!
//! Segments the core does not hold in full (left out by `coredump_filter`, cut by a size
//! limit, or a core file shorter than its segment table says) are listed in
//! [`CoreFile::missing`]. Read-only file mappings left out of the core are read from the mapped
//! file instead, as debuggers do: their bytes cannot have changed since they were mapped.

use super::maps::Mapping;
use super::memory::{MemorySource, Registers, ThreadState};
use crate::error::{DumpError, Result};
use memmap2::Mmap;
use object::elf::{FileHeader64, ET_CORE, NT_AUXV, NT_FILE, NT_PRSTATUS, PF_R, PF_W, PF_X, PT_LOAD, PT_NOTE};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, FileKind};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Offset of `pr_pid` and of `pr_reg` (a `user_regs_struct`) in x86-64's `elf_prstatus`.
const PRSTATUS_PID: usize = 32;
const PRSTATUS_REGS: usize = 112;
/// `user_regs_struct` is 27 words.
const USER_REGS_WORDS: usize = 27;
/// `AT_ENTRY` in the auxiliary vector: the executable's entry point.
const AT_ENTRY: u64 = 9;

/// A clear error about a file that is not what it should be: "PATH: MESSAGE".
pub fn bad_core(path: &Path, message: String) -> DumpError {
    DumpError::BadCore { path: path.to_path_buf(), message }
}

/// One `PT_LOAD` segment of the core.
#[derive(Clone, Debug)]
struct Segment {
    start: u64,
    end: u64,
    /// Where its bytes start in the core file.
    file_offset: u64,
    /// How many of its bytes the segment table says the core holds (`p_filesz`).
    declared: u64,
    /// How many it really holds (`p_filesz`, cut at the end of the file).
    present: u64,
    readable: bool,
    writable: bool,
    executable: bool,
    /// The file mapped there, and the offset in it, from `NT_FILE`.
    file: Option<(PathBuf, u64)>,
}

/// Part of the target's memory that the core does not hold.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MissingRegion {
    pub start: u64,
    pub end: u64,
    /// The file mapped there, if any.
    pub file: Option<PathBuf>,
    /// Why: left out of the core (coredump_filter, size limit) or the core file is truncated.
    pub reason: String,
    /// Whether its bytes are read from the mapped file instead (a read-only file mapping).
    pub read_from_file: bool,
}

impl MissingRegion {
    pub fn bytes(&self) -> u64 {
        self.end - self.start
    }
}

impl std::fmt::Display for MissingRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}..{:#x} ({} bytes", self.start, self.end, self.bytes())?;
        if let Some(p) = &self.file {
            write!(f, ", {}", p.display())?;
        }
        write!(f, "): {}", self.reason)?;
        if self.read_from_file {
            write!(f, "; read from the mapped file instead")?;
        }
        Ok(())
    }
}

/// A parsed core file.
pub struct CoreFile {
    path: PathBuf,
    map: Mmap,
    /// Sorted by start address.
    segments: Vec<Segment>,
    threads: Vec<ThreadState>,
    pid: u32,
    executable: PathBuf,
    /// The executable the core names (from NT_FILE and the entry point), if it does.
    recorded_executable: Option<PathBuf>,
    missing: Vec<MissingRegion>,
    /// How long the headers say the file is, when it is shorter: the core is truncated.
    declared_len: Option<u64>,
    /// Files opened to read mapped bytes left out of the core.
    backing: Mutex<HashMap<PathBuf, Option<Mmap>>>,
}

impl CoreFile {
    /// Opens the core `path`. The executable is `exe` when given, otherwise the file the core
    /// says was mapped at the entry point.
    pub fn open(path: &Path, exe: Option<&Path>) -> Result<CoreFile> {
        let bad = |message: String| bad_core(path, message);
        let file = std::fs::File::open(path).map_err(|source| DumpError::Io { path: path.to_path_buf(), source })?;
        // SAFETY: the core is opened read-only; a core file is not changed while we read it
        // (if it were, we would read wrong bytes, which every read here bounds-checks).
        let map = unsafe { Mmap::map(&file) }.map_err(|source| DumpError::Io { path: path.to_path_buf(), source })?;
        match FileKind::parse(&*map) {
            Ok(FileKind::Elf64) => {}
            Ok(kind) => return Err(bad(format!("not a 64-bit ELF core file ({kind:?})"))),
            Err(e) => return Err(bad(format!("not an ELF core file: {e}"))),
        }
        let Headers { mut segments, notes, declared_len } = parse_headers(&map, &bad)?;
        let file_len = map.len() as u64;
        if notes.threads.is_empty() {
            return Err(bad("no NT_PRSTATUS note: the core holds no thread (truncated core?)".into()));
        }
        let files = notes.files.ok_or_else(|| bad("no NT_FILE note: the core does not say which files were mapped".into()))?;
        for s in segments.iter_mut() {
            s.file = files.iter().find(|f| f.start <= s.start && s.start < f.end).map(|f| (f.path.clone(), f.offset + (s.start - f.start)));
        }
        add_left_out_mappings(&mut segments, &files);

        let missing = missing_regions(&segments);
        let recorded_exe = notes.entry.and_then(|entry| files.iter().find(|f| f.start <= entry && entry < f.end)).map(|f| f.path.clone());
        let executable = match (exe, recorded_exe.clone()) {
            (Some(given), recorded) => {
                let given = std::fs::canonicalize(given).map_err(|source| DumpError::Io { path: given.to_path_buf(), source })?;
                // The runtime code finds the executable's load address from the mappings of
                // its path: name the given file in the core's mappings of the recorded one.
                if let Some(recorded) = recorded {
                    for s in segments.iter_mut() {
                        if let Some((p, _)) = s.file.as_mut().filter(|(p, _)| *p == recorded) {
                            *p = given.clone();
                        }
                    }
                }
                given
            }
            (None, Some(recorded)) => recorded,
            (None, None) => {
                return Err(bad("cannot tell the executable from the core (no NT_AUXV entry point in a mapped file); pass --exe".into()))
            }
        };
        let pid = notes.threads[0].0;
        let threads = notes.threads.into_iter().map(|(tid, regs)| ThreadState { tid, own_tid: tid, regs }).collect();
        Ok(CoreFile {
            path: path.to_path_buf(),
            map,
            segments,
            threads,
            pid,
            executable,
            recorded_executable: recorded_exe,
            missing,
            declared_len: (declared_len > file_len).then_some(declared_len),
            backing: Mutex::new(HashMap::new()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pid of the process the core was taken from (its first thread's).
    pub fn core_pid(&self) -> u32 {
        self.pid
    }

    /// The executable the core says was running (its path then), if it says.
    pub fn recorded_executable(&self) -> Option<&Path> {
        self.recorded_executable.as_deref()
    }

    /// When the core file is shorter than its headers say: (declared, actual) length.
    pub fn truncation(&self) -> Option<(u64, u64)> {
        self.declared_len.map(|d| (d, self.map.len() as u64))
    }

    /// What memory the core does not hold, by region.
    pub fn missing(&self) -> &[MissingRegion] {
        &self.missing
    }

    /// Reads bytes that the core file itself holds (never from a mapped file).
    pub fn read_from_core(&self, address: u64, buf: &mut [u8]) -> Result<()> {
        self.read_with(address, buf, false)
    }

    fn segment_at(&self, address: u64) -> Option<&Segment> {
        let after = self.segments.partition_point(|s| s.start <= address);
        self.segments[..after].last().filter(|s| address < s.end)
    }

    fn read_with(&self, address: u64, buf: &mut [u8], from_files: bool) -> Result<()> {
        let len = buf.len();
        let fail = |reason: String| DumpError::Read { address, len, reason };
        let mut done = 0usize;
        while done < len {
            let at = address + done as u64;
            let s = self.segment_at(at).ok_or_else(|| fail(format!("{at:#x} was not mapped in the process the core was taken from")))?;
            let n = ((s.end - at) as usize).min(len - done);
            let into = at - s.start;
            let dest = &mut buf[done..done + n];
            if into + n as u64 <= s.present {
                let from = (s.file_offset + into) as usize;
                dest.copy_from_slice(&self.map[from..from + n]);
            } else if from_files && !s.writable && s.file.is_some() {
                let (file, offset) = s.file.as_ref().expect("checked");
                self.read_mapped_file(file, offset + into, dest).map_err(fail)?;
            } else if !s.readable {
                return Err(fail(format!("{at:#x} was not readable in the process the core was taken from")));
            } else {
                let region = self.missing.iter().find(|m| m.start <= at.max(s.start + s.present) && at < m.end);
                return Err(fail(match region {
                    Some(m) => format!("not in the core file: {m}"),
                    None => format!("{at:#x} is not in the core file"),
                }));
            }
            done += n;
        }
        Ok(())
    }

    fn read_mapped_file(&self, path: &Path, offset: u64, dest: &mut [u8]) -> std::result::Result<(), String> {
        let mut files = self.backing.lock().unwrap_or_else(|e| e.into_inner());
        let map = files.entry(path.to_path_buf()).or_insert_with(|| {
            let f = std::fs::File::open(path).ok()?;
            // SAFETY: read-only mapping of a file the target had mapped read-only.
            unsafe { Mmap::map(&f) }.ok()
        });
        let map = map.as_ref().ok_or_else(|| format!("left out of the core, and {} cannot be read", path.display()))?;
        let from = offset as usize;
        let bytes = map
            .get(from..from + dest.len())
            .ok_or_else(|| format!("left out of the core, and {} is shorter than its mapping", path.display()))?;
        dest.copy_from_slice(bytes);
        Ok(())
    }
}

impl MemorySource for CoreFile {
    fn pid(&self) -> Option<u32> {
        None
    }

    fn executable_path(&self) -> PathBuf {
        self.executable.clone()
    }

    fn read(&self, address: u64, buf: &mut [u8]) -> Result<()> {
        self.read_with(address, buf, true)
    }

    fn threads(&self) -> &[ThreadState] {
        &self.threads
    }

    fn mappings(&self) -> Result<Vec<Mapping>> {
        Ok(self
            .segments
            .iter()
            .map(|s| Mapping {
                start: s.start,
                end: s.end,
                readable: s.readable,
                executable: s.executable,
                offset: s.file.as_ref().map_or(0, |f| f.1),
                path: s.file.as_ref().map(|f| f.0.clone()),
                inode: None,
            })
            .collect())
    }
}

/// What a core's headers say: its memory segments (sorted), its notes, and how long the file
/// should be.
struct Headers {
    segments: Vec<Segment>,
    notes: Notes,
    declared_len: u64,
}

fn parse_headers(map: &[u8], bad: &dyn Fn(String) -> DumpError) -> Result<Headers> {
    let header = FileHeader64::<Endianness>::parse(map).map_err(|e| bad(e.to_string()))?;
    let endian = header.endian().map_err(|e| bad(e.to_string()))?;
    if header.e_type(endian) != ET_CORE {
        return Err(bad("an ELF file but not a core file".into()));
    }
    if header.e_machine(endian) != object::elf::EM_X86_64 {
        return Err(bad("not an x86-64 core file".into()));
    }
    let headers = header.program_headers(endian, map).map_err(|e| bad(format!("segment table: {e}")))?;
    let file_len = map.len() as u64;

    let mut notes = Notes::default();
    let mut segments = Vec::new();
    for ph in headers {
        let p_type = ph.p_type(endian);
        if p_type == PT_NOTE {
            let end = ph.p_offset(endian).saturating_add(ph.p_filesz(endian));
            if end > file_len {
                return Err(bad(format!("the core file is truncated: its notes end at byte {end} but the file has {file_len} bytes")));
            }
            let Some(iter) = ph.notes(endian, map).map_err(|e| bad(format!("note segment (truncated core?): {e}")))? else {
                continue;
            };
            let mut iter = iter;
            while let Some(note) = iter.next().map_err(|e| bad(format!("bad note: {e}")))? {
                notes.add(note.n_type(endian).0, note.name(), note.desc());
            }
        } else if p_type == PT_LOAD {
            let (start, memsz, offset, filesz) = (ph.p_vaddr(endian), ph.p_memsz(endian), ph.p_offset(endian), ph.p_filesz(endian));
            let flags = ph.p_flags(endian).0;
            let present = filesz.min(memsz).min(file_len.saturating_sub(offset));
            segments.push(Segment {
                start,
                end: start.checked_add(memsz).ok_or_else(|| bad(format!("segment at {start:#x} wraps around")))?,
                file_offset: offset,
                declared: filesz.min(memsz),
                present,
                readable: flags & PF_R.0 != 0,
                writable: flags & PF_W.0 != 0,
                executable: flags & PF_X.0 != 0,
                file: None,
            });
        }
    }
    segments.sort_by_key(|s| s.start);
    // What the headers say the file holds: segments and the section header table.
    let section_table_end =
        header.e_shoff(endian).saturating_add(u64::from(header.e_shnum(endian)) * u64::from(header.e_shentsize(endian)));
    let declared_len =
        headers.iter().map(|ph| ph.p_offset(endian).saturating_add(ph.p_filesz(endian))).chain([section_table_end]).max().unwrap_or(0);
    Ok(Headers { segments, notes, declared_len })
}

/// Adds, as segments without bytes, the file mappings the core names (NT_FILE) but holds no
/// segment of.
fn add_left_out_mappings(segments: &mut Vec<Segment>, files: &[MappedFile]) {
    // gdb (and the kernel, by coredump_filter) leave read-only file mappings out of the
    // core altogether, code included: they are known only from NT_FILE.
    let mut left_out = Vec::new();
    for f in files {
        if !segments.iter().any(|s| s.start < f.end && f.start < s.end) {
            left_out.push(Segment {
                start: f.start,
                end: f.end,
                file_offset: 0,
                declared: 0,
                present: 0,
                readable: true,
                writable: false,
                executable: maps_code(&f.path, f.offset),
                file: Some((f.path.clone(), f.offset)),
            });
        }
    }
    segments.extend(left_out);
    segments.sort_by_key(|s| s.start);
}

/// The parts of `segments` the core does not hold: one region per segment that lacks bytes.
fn missing_regions(segments: &[Segment]) -> Vec<MissingRegion> {
    segments
        .iter()
        // Memory the process could not read (PROT_NONE reservations) has no contents to lose.
        .filter(|s| s.readable && s.present < s.end - s.start)
        .map(|s| MissingRegion {
            read_from_file: !s.writable && s.file.is_some(),
            start: s.start + s.present,
            end: s.end,
            file: s.file.as_ref().map(|f| f.0.clone()),
            reason: if s.present < s.declared {
                "the core file is truncated (it ends before this segment's bytes)".into()
            } else {
                "left out of the core (coredump_filter, a size limit, or a read-only file mapping)".into()
            },
        })
        .collect()
}

/// Whether the ELF file `path`, mapped from `offset`, maps code there (a `PF_X` segment).
fn maps_code(path: &Path, offset: u64) -> bool {
    use object::{Object, ObjectSegment, SegmentFlags};
    let Ok(file) = std::fs::File::open(path) else { return false };
    // SAFETY: read-only mapping of a file the target had mapped.
    let Ok(map) = (unsafe { Mmap::map(&file) }) else { return false };
    let Ok(elf) = object::File::parse(&*map) else { return false };
    elf.segments().any(|seg| {
        let (start, size) = seg.file_range();
        let executable = matches!(seg.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & PF_X.0 != 0);
        executable && (start & !0xfff) <= offset && offset < start + size
    })
}

/// What the notes of a core say.
#[derive(Default)]
struct Notes {
    /// (tid, registers) per thread, in note order (the first is the main thread).
    threads: Vec<(u32, Registers)>,
    files: Option<Vec<MappedFile>>,
    /// The executable's entry point, from the auxiliary vector.
    entry: Option<u64>,
}

struct MappedFile {
    start: u64,
    end: u64,
    offset: u64,
    path: PathBuf,
}

impl Notes {
    fn add(&mut self, n_type: u32, name: &[u8], desc: &[u8]) {
        if name != b"CORE" {
            return;
        }
        match n_type {
            t if t == NT_PRSTATUS.0 => {
                if let Some(thread) = parse_prstatus(desc) {
                    self.threads.push(thread);
                }
            }
            t if t == NT_FILE.0 => self.files = parse_nt_file(desc),
            t if t == NT_AUXV.0 => {
                self.entry = words(desc).collect::<Vec<_>>().chunks(2).find(|kv| kv.len() == 2 && kv[0] == AT_ENTRY).map(|kv| kv[1]);
            }
            _ => {}
        }
    }
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
}

/// `elf_prstatus`: the thread id and its `user_regs_struct`.
fn parse_prstatus(desc: &[u8]) -> Option<(u32, Registers)> {
    let tid = u32::from_le_bytes(desc.get(PRSTATUS_PID..PRSTATUS_PID + 4)?.try_into().ok()?);
    let r: Vec<u64> = words(desc.get(PRSTATUS_REGS..PRSTATUS_REGS + USER_REGS_WORDS * 8)?).collect();
    // user_regs_struct order: r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi
    // orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs.
    let regs = Registers {
        r15: r[0],
        r14: r[1],
        r13: r[2],
        r12: r[3],
        rbp: r[4],
        rbx: r[5],
        r11: r[6],
        r10: r[7],
        r9: r[8],
        r8: r[9],
        rax: r[10],
        rcx: r[11],
        rdx: r[12],
        rsi: r[13],
        rdi: r[14],
        rip: r[16],
        rsp: r[19],
        fs_base: r[21],
        orig_rax: r[15],
    };
    Some((tid, regs))
}

/// `NT_FILE`: count, page size, `count` (start, end, page offset) triples, then `count`
/// NUL-terminated paths.
fn parse_nt_file(desc: &[u8]) -> Option<Vec<MappedFile>> {
    let mut w = words(desc);
    let count = usize::try_from(w.next()?).ok()?;
    let page_size = w.next()?;
    let table_end = count.checked_mul(24)?.checked_add(16)?;
    let mut names = desc.get(table_end..)?.split(|&b| b == 0);
    let mut files = Vec::with_capacity(count.min(desc.len() / 24));
    for _ in 0..count {
        let (start, end, page) = (w.next()?, w.next()?, w.next()?);
        let name = names.next()?;
        files.push(MappedFile {
            start,
            end,
            offset: page.checked_mul(page_size)?,
            path: PathBuf::from(std::ffi::OsStr::new(std::str::from_utf8(name).ok()?)),
        });
    }
    Some(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nt_file() {
        let mut desc = Vec::new();
        for w in [2u64, 4096, 0x1000, 0x3000, 0, 0x5000, 0x6000, 2] {
            desc.extend_from_slice(&w.to_le_bytes());
        }
        desc.extend_from_slice(b"/bin/a\0/lib/b.so\0");
        let files = parse_nt_file(&desc).expect("parses");
        assert_eq!(files.len(), 2);
        assert_eq!(files[1].offset, 0x2000);
        assert_eq!(files[1].path, PathBuf::from("/lib/b.so"));
        // A table longer than the note is refused, not read past the end.
        assert!(parse_nt_file(&desc[..40]).is_none());
    }

    #[test]
    fn parses_prstatus() {
        let mut desc = vec![0u8; PRSTATUS_REGS + USER_REGS_WORDS * 8 + 8];
        desc[PRSTATUS_PID..PRSTATUS_PID + 4].copy_from_slice(&1234u32.to_le_bytes());
        for i in 0..USER_REGS_WORDS {
            let at = PRSTATUS_REGS + i * 8;
            desc[at..at + 8].copy_from_slice(&(100 + i as u64).to_le_bytes());
        }
        let (tid, regs) = parse_prstatus(&desc).expect("parses");
        assert_eq!(tid, 1234);
        assert_eq!((regs.r15, regs.rip, regs.rsp, regs.fs_base), (100, 116, 119, 121));
        assert!(parse_prstatus(&desc[..100]).is_none());
    }

    #[test]
    fn reports_truncated_and_filtered_segments() {
        let seg = |start: u64, len: u64, declared: u64, present: u64| Segment {
            start,
            end: start + len,
            file_offset: 0,
            declared,
            present,
            readable: true,
            writable: true,
            executable: false,
            file: None,
        };
        let missing =
            missing_regions(&[seg(0x1000, 0x2000, 0x2000, 0x2000), seg(0x4000, 0x2000, 0x2000, 0x800), seg(0x8000, 0x1000, 0, 0)]);
        assert_eq!(missing.len(), 2);
        assert_eq!((missing[0].start, missing[0].bytes()), (0x4800, 0x1800));
        assert!(missing[0].reason.contains("truncated"));
        assert!(missing[1].reason.contains("left out"));
    }
}
