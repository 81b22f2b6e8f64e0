use std::path::PathBuf;

/// Why a trace could not be read. Offsets are in bytes from the start of the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    #[error("not a memtrace trace: {reason}")]
    NotMemtrace { reason: &'static str },

    #[error("memtrace format v{version:03} in the packet at byte {packet}: this reader knows v001 to v{:03}", crate::limits::MAX_VERSION)]
    UnsupportedVersion { packet: usize, version: u16 },

    #[error("truncated trace: the packet at byte {packet} needs {needed} bytes, the file has {available} left")]
    Truncated { packet: usize, needed: usize, available: usize },

    #[error("corrupt packet at byte {packet}: {problem}")]
    CorruptPacket { packet: usize, problem: Problem },

    #[error("the index holds more than 2^32 distinct call-stack prefixes")]
    IndexTooLarge,

    #[error("corrupt event at byte {offset} (packet at byte {packet}): {problem}")]
    CorruptEvent { packet: usize, offset: usize, problem: Problem },
}

/// What is wrong inside a packet or an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The number found stays out of the message: it is the file's first bytes when the file
    /// is not a trace at all, which a server (`heapsnap mcp`) must not hand back.
    #[error("bad magic number (not a memtrace trace)")]
    BadMagic(u32),
    #[error("packet size {bits} bits is not a whole number of bytes at least as long as its header ({header} bytes)")]
    BadPacketSize { bits: u32, header: usize },
    #[error("packet of {bytes} bytes, longer than memtrace's limit of {} bytes", crate::limits::MAX_PACKET_SIZE)]
    PacketTooLarge { bytes: usize },
    #[error("packet ends before time it begins ({begin} > {end})")]
    ReversedTimestamps { begin: u64, end: u64 },
    #[error("packet's allocation ids run backwards ({begin} > {end})")]
    ReversedAllocIds { begin: u64, end: u64 },
    #[error("version changes from v{first:03} to v{this:03} within the trace")]
    VersionChanged { first: u16, this: u16 },
    #[error("the first packet does not hold exactly one trace-info event")]
    BadTraceInfoPacket,
    #[error("a second trace-info event")]
    SecondTraceInfo,
    #[error("more than {} domains", crate::limits::MAX_DOMAINS)]
    TooManyDomains,
    #[error("backtrace cache out of sync with the writer's (slot {slot})")]
    CacheVerification { slot: u16 },
    #[error("{allocs} allocations, but the header's allocation ids say {expected}")]
    AllocIdMismatch { allocs: u64, expected: u64 },
    #[error("the event runs past the end of its packet")]
    PastEnd,
    #[error("unknown event code {0}")]
    UnknownEvent(u8),
    #[error("timestamp {time} outside its packet's [{begin}, {end}]")]
    TimeOutsidePacket { time: u64, begin: u64, end: u64 },
    #[error("timestamp {time} earlier than the previous event's {previous}")]
    TimeGoesBack { time: u64, previous: u64 },
    #[error("unknown allocation source {0}")]
    BadSource(u8),
    #[error("negative {0}")]
    Negative(&'static str),
    #[error("object id out of range (allocation counter {counter}, delta {delta})")]
    BadObjectId { counter: u64, delta: i64 },
    #[error("backtrace of more than {} frames", crate::limits::MAX_BACKTRACE)]
    BacktraceTooLong,
    #[error("move-to-front code {0} names an empty slot")]
    EmptyMtfSlot(u8),
    #[error("location code {0:#x} described twice, differently")]
    InconsistentLocation(u64),
}
