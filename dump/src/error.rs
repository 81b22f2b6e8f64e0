//! Everything that can stop a dump, each saying what is missing or what went wrong.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("no process with pid {pid}")]
    NoSuchProcess { pid: u32 },

    /// `ptrace` or `process_vm_readv` refused: `why` says what to grant (see
    /// `source::permission`).
    #[error("cannot {op} process {pid}: {errno}: {why}")]
    AttachDenied { pid: u32, op: &'static str, errno: nix::errno::Errno, why: String },

    #[error("process {pid} is already traced by PID {tracer} (another heapsnap dump, a debugger or strace): wait for it to finish, or detach it")]
    AlreadyTraced { pid: u32, tracer: u32 },

    #[error("process {pid} exited during the dump; no snapshot was written")]
    TargetExited { pid: u32 },

    #[error("ptrace {op} on thread {tid} failed: {errno}")]
    Ptrace { op: &'static str, tid: u32, errno: nix::errno::Errno },

    #[error("cannot read {len} bytes of target memory at {address:#x}: {reason}")]
    Read { address: u64, len: usize, reason: String },

    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    /// A core file that cannot be used, or an executable that is not the core's.
    #[error("{path}: {message}")]
    BadCore { path: PathBuf, message: String },

    #[error("{path}: not a readable ELF executable: {message}")]
    Elf { path: PathBuf, message: String },

    #[error("{path} is a separate debug-info file (its code sections are empty), not an executable: pass the executable, and this file with --debug-file")]
    DebugFileOnly { path: PathBuf },

    #[error("{debug} is not a debug file of {executable}: {why}")]
    DebugFileMismatch { executable: PathBuf, debug: PathBuf, why: String },

    #[error("{given} is not a copy of the executable the target runs ({actual}): {why}")]
    ExecutableMismatch { given: PathBuf, actual: PathBuf, why: String },

    #[error("{path} has no symbols: both .symtab and .dynsym are stripped (as `strip` leaves a statically linked executable), and heapsnap finds the OCaml runtime by its symbols. Give its debug file (--debug-file FILE, from `objcopy --only-keep-debug` before stripping; or installed by build id under --debug-dir) or an unstripped copy (--exe FILE); `strip --strip-debug` keeps the symbols")]
    NoSymbols { path: PathBuf },

    #[error("{path} is not an OCaml program: it has neither caml_start_program (native code) nor caml_bytecode_interpreter or caml_interprete (the bytecode interpreter), in .symtab or .dynsym")]
    NotOcaml { path: PathBuf },

    #[error("{path}: executable has no DWARF debug info (.debug_info); heapsnap needs the OCaml runtime's structure layouts (was the runtime built without -g, or the binary stripped?)")]
    NoDebugInfo { path: PathBuf },

    #[error("{path}: OCaml {version} executables are read through their DWARF debug info, which this one lacks (heapsnap has layout tables for OCaml 5 only): give an unstripped copy with --exe, or its debug file with --debug-file")]
    NeedsDwarf { path: PathBuf, version: String },

    #[error("bad DWARF debug info: {0}")]
    Dwarf(String),

    #[error("symbol {name} not found in the executable (is this an OCaml native program?)")]
    MissingSymbol { name: String },

    #[error("no DWARF type {name} in the executable's debug info")]
    MissingType { name: String },

    #[error("DWARF type {ty} has no member {member}")]
    MissingMember { ty: String, member: String },

    #[error("no DWARF variable {name} in the executable's debug info")]
    MissingVariable { name: String },

    #[error("cannot find the OCaml runtime's variable {name}: {how}; give its debug file with --debug-file, or an unstripped copy of the same build with --exe")]
    MissingStatic { name: String, how: String },

    /// What the executable shows contradicts what heapsnap knows of its OCaml version.
    #[error("the executable does not look like the OCaml version it says it is: {0}")]
    VersionMismatch(String),

    #[error("cannot find the OCaml version of the target ({0})")]
    UnknownVersion(String),

    #[error("OCaml version {version} is not supported (heapsnap supports OCaml {supported}); --force reads it as the newest of those and checks the snapshot, but the result may be wrong")]
    UnsupportedVersion { version: String, supported: String },

    #[error("{path} has no debug info, and heapsnap's layout tables are for OCaml {tables}, not {version}: give its debug file with --debug-file, or an unstripped copy of the same build with --exe")]
    NoLayoutTables { path: PathBuf, version: String, tables: &'static str },

    #[error("the runtime of OCaml {version} is not the OCaml {release} heapsnap knows: {fact}: the target's is {probed}, OCaml {release}'s is {says} (a patched or mis-built runtime?)")]
    ProbeDisagrees { version: String, fact: &'static str, probed: String, release: &'static str, says: String },

    #[error("OCaml {version} is not a release heapsnap knows, and probing its runtime could not establish {fact}: {why} (--force guesses it as the newest known release's, and checks the snapshot)")]
    ProbeFailed { version: String, fact: &'static str, why: String },

    #[error("OCaml {version} is not a release heapsnap knows, and {path} has no DWARF debug info to read its runtime by probing: give its debug file ({debug_file}), or --force to read it as OCaml {newest}")]
    UnknownWithoutDwarf { path: PathBuf, version: String, debug_file: String, newest: &'static str },

    #[error("{path}: --read-by-probing reads the runtime's DWARF, which it lacks: give its debug file ({debug_file})")]
    ProbingNeedsDwarf { path: PathBuf, debug_file: String },

    #[error("{path} runs bytecode; heapsnap reads an interpreter's structures through its DWARF debug info, which it lacks (it has layout tables for native executables only): give its debug file ({debug_file}), or use an ocamlrun built with -g")]
    BytecodeNeedsDwarf { path: PathBuf, debug_file: String },

    #[error("the bytecode program loaded {library}, whose roots heapsnap cannot read yet ({why}); a native build of the program dumps")]
    BytecodeLibraryUnsupported { library: String, why: String },

    #[error("cannot detect the number of reserved header bits ({0}); pass --reserved-bits N")]
    ReservedBitsUnknown(String),

    #[error("the target's OCaml runtime state is inconsistent: {0}")]
    Inconsistent(String),

    #[error("process {pid} could not fork for a copy-on-write capture: clone failed with {errno} ({})", fork_failure_hint(*errno))]
    ForkFailed { pid: u32, errno: nix::errno::Errno },

    /// `--capture fork` was asked for, and forking the target would not be safe or would not fit.
    #[error("not forking process {pid} (--capture fork): {why}; --capture copy (or auto) copies it while it is stopped instead")]
    ForkRefused { pid: u32, why: String },

    #[error("the dump was interrupted by a signal; the target was released unchanged")]
    Interrupted,

    /// The world was stopped at a moment the copy found inconsistent (e.g. a block header
    /// being written): the dump resumes the target and tries again.
    #[error("the target was stopped at an inconsistent moment: {0}")]
    UnsafeStop(#[from] UnsafeStop),

    #[error(transparent)]
    Format(#[from] heapsnap_format::FormatError),
}

pub type Result<T, E = DumpError> = std::result::Result<T, E>;

/// What usually makes the kernel refuse a `clone`.
fn fork_failure_hint(errno: nix::errno::Errno) -> &'static str {
    use nix::errno::Errno;
    match errno {
        Errno::ENOMEM => "not enough memory to commit a copy of its private writable memory: overcommit or a memory limit",
        Errno::EAGAIN => "too many processes: RLIMIT_NPROC, or the cgroup's pids.max",
        Errno::EPERM | Errno::ENOSYS => "a seccomp filter or a security module forbids it",
        _ => "the kernel refused it",
    }
}

/// Why a stopped world is not a consistent moment to copy it. A live dump resumes the target and
/// stops it again; a core, which cannot be taken again, says it in its warnings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeStop {
    #[error("a stop-the-world section (minor GC, major GC phase change or compaction) is in progress")]
    StopTheWorld,
    #[error("the runtime lock {0} is held")]
    LockHeld(&'static str),
    #[error("domain #{0}'s lock is being taken or released")]
    DomainLockChanging(usize),
    #[error("domain #{domain} (thread {thread}) {place}")]
    DomainBusy { domain: usize, thread: u32, place: BusyPlace },
    #[error("domain {domain}: a zero header at {address:#x} in the minor heap")]
    ZeroMinorHeader { domain: u16, address: u64 },
    #[error("domain {0}: the minor heap does not parse up to its end")]
    MinorHeapUnparsed(u16),
    #[error("domain {domain}: the youngest block of its minor heap has a field at {address:#x} that holds {value:#x}, where no block is: C code allocated it and has not initialised its fields yet")]
    UninitialisedField { domain: u16, address: u64, value: u64 },
    #[error("domain {domain}: no frame for the running OCaml code at {pc:#x}")]
    NoFrame { domain: u16, pc: u64 },
    #[error("a {0} is in progress")]
    Collecting(&'static str),
    #[error("threads {0} and {1} both run OCaml code, but one runtime lock allows only one")]
    SeveralRunning(u32, u32),
    /// A fork's child was read where it does not hold the target's memory frozen.
    #[error("the capture read {0}, which a fork does not freeze")]
    NotFrozen(String),
}

/// Where the thread holding a domain was caught, when that is not at rest.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BusyPlace {
    #[error("is initialising a block it just allocated, at {pc:#x} in {function}")]
    InitialisingBlock { pc: u64, function: String },
    #[error("is in the runtime's OCaml/C glue ({0})")]
    Glue(String),
    #[error("runs C code that cannot be unwound ({0})")]
    NotUnwound(String),
    #[error("is in {function} ({file})")]
    RuntimeCode { function: String, file: String },
    #[error("is in C code entered through {0}")]
    EnteredThrough(String),
    #[error("is interpreting bytecode (the interpreter keeps its stack pointer in a register)")]
    Interpreting,
    #[error("is in {0}, which the interpreter calls without saving its stack pointer")]
    CalledByInterpreter(String),
}

/// Several reasons, as one line.
pub fn describe(reasons: &[UnsafeStop]) -> String {
    reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}
