//! What the reader accepts: the format versions it knows, and the bounds that keep a corrupt or
//! hostile file from making it use unbounded memory.

/// The newest format version this reader knows (memtrace's `memtrace_version`).
pub const MAX_VERSION: u16 = 3;
/// memtrace writes packets of at most 32 KiB; larger ones are corrupt.
pub const MAX_PACKET_SIZE: usize = 1 << 15;
/// Distinct domains accepted in one trace (memtrace itself traces the main domain only); each
/// costs a 160 KiB backtrace cache.
pub const MAX_DOMAINS: usize = 128;
/// Backtraces longer than this many frames are refused: it bounds the memory a hostile file
/// can make the decoder use (a few bytes of trace can extend a backtrace by 256 frames).
pub const MAX_BACKTRACE: usize = 1 << 22;
