//! A reader for the trace files of Jane Street's memtrace (`Memtrace.trace_if_requested`):
//! the header (pid, executable, sampling rate...), the source locations, and the sampled
//! allocations with their call stacks, promotions and collections.
//!
//! ```no_run
//! let trace = heapsnap_memtrace::Trace::open("prog.ctf")?;
//! println!("pid {} rate {}", trace.info().pid, trace.info().sample_rate);
//! let live = trace.index()?;
//! for alloc in live.allocations() {
//!     let top = live.frames(alloc).next();
//!     println!("{} words at {:?}", alloc.length_words, top.and_then(|f| f.location).map(|l| l.to_string()));
//! }
//! # Ok::<(), heapsnap_memtrace::Error>(())
//! ```
//!
//! The format is described in `README.md`, as read from memtrace's `src/trace.ml`.

mod backtrace;
mod cursor;
mod error;
mod events;
mod index;
mod limits;
mod location;
mod packet;
pub mod write;

pub use error::{Error, Problem};
pub use events::{Alloc, AllocSource, Backtrace, Event, EventReader, Frame};
pub use index::{AllocInfo, LiveIndex, TraceStats};
pub use limits::{MAX_BACKTRACE, MAX_DOMAINS, MAX_PACKET_SIZE, MAX_VERSION};
pub use location::{Location, LocationCode, LocationTable};
pub use packet::TraceInfo;

use std::path::Path;

enum Data<'t> {
    Borrowed(&'t [u8]),
    Mapped(memmap2::Mmap),
}

/// An opened trace: its header is read and checked; events are read on demand.
pub struct Trace<'t> {
    data: Data<'t>,
    info: TraceInfo,
    first_packet_end: usize,
}

impl Trace<'static> {
    /// Maps the file and reads its header. The file must not shrink while it is mapped.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() == 0 {
            return Err(Error::NotMemtrace { reason: "the file is empty" });
        }
        // SAFETY: the map is read-only; memtrace only appends whole packets to a trace.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let (info, first_packet_end) = packet::read_trace_info(&map)?;
        Ok(Trace { data: Data::Mapped(map), info, first_packet_end })
    }
}

impl<'t> Trace<'t> {
    pub fn from_bytes(bytes: &'t [u8]) -> Result<Self, Error> {
        let (info, first_packet_end) = packet::read_trace_info(bytes)?;
        Ok(Trace { data: Data::Borrowed(bytes), info, first_packet_end })
    }

    pub fn info(&self) -> &TraceInfo {
        &self.info
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Borrowed(bytes) => bytes,
            Data::Mapped(map) => map,
        }
    }

    /// Streams the events from the start.
    pub fn events(&self) -> EventReader<'_> {
        EventReader::new(self.bytes(), &self.info, self.first_packet_end)
    }

    /// Reads every event once and keeps the allocations not collected by the end of the trace.
    pub fn index(&self) -> Result<LiveIndex<'_>, Error> {
        LiveIndex::build(self.events())
    }

    /// Reads every event once and keeps the allocations `wanted` selects by id, collected or
    /// not (for a heap snapshot's tracked blocks: the trace may go on past the snapshot, and
    /// record collections that came after it). Promotions and collections of allocations not
    /// kept count as unmatched in the stats. A file that ends inside a packet (a trace still
    /// being written) is read up to that packet, and the stats say so (`truncated_tail`).
    pub fn select(&self, wanted: impl Fn(u64) -> bool) -> Result<LiveIndex<'_>, Error> {
        LiveIndex::build_with(self.events(), wanted, false)
    }
}
