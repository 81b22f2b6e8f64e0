//! CTF packet headers and the trace-info event of the first packet.

use crate::backtrace::CacheVerifier;
use crate::cursor::Cursor;
use crate::error::{Error, Problem};
use crate::limits::{MAX_PACKET_SIZE, MAX_VERSION};

pub(crate) const CTF_MAGIC: u32 = 0xc1fc_1fc1;

/// Event codes (the top 7 bits of an event header).
pub(crate) const EVENT_TRACE_INFO: u8 = 0;
pub(crate) const EVENT_LOCATION: u8 = 1;
pub(crate) const EVENT_ALLOC: u8 = 2;
pub(crate) const EVENT_PROMOTE: u8 = 3;
pub(crate) const EVENT_COLLECT: u8 = 4;
/// 101 to 116: a one-sample minor allocation of 1 to 16 words, with a short backtrace.
pub(crate) const EVENT_SHORT_ALLOC_FIRST: u8 = 101;
pub(crate) const EVENT_SHORT_ALLOC_LAST: u8 = 116;

/// An event header's timestamp holds only the low 25 bits of the time in microseconds.
const EVENT_TIME_BITS: u32 = 25;
const EVENT_TIME_MASK: u64 = (1 << EVENT_TIME_BITS) - 1;

#[derive(Debug, Clone)]
pub(crate) struct PacketHeader {
    /// Byte offset of the packet in the file.
    pub offset: usize,
    /// Whole packet, header included.
    pub size: usize,
    pub header_size: usize,
    pub time_begin: u64,
    pub time_end: u64,
    pub version: u16,
    pub pid: u64,
    pub domain: u16,
    pub cache_verifier: CacheVerifier,
    pub alloc_id_begin: u64,
    pub alloc_id_end: u64,
}

impl PacketHeader {
    pub fn content<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        &file[self.offset + self.header_size..self.offset + self.size]
    }

    /// The absolute time of an event from the low bits in its header: the packet spans less
    /// than 2^25 microseconds, so the bits wrap at most once after `time_begin`.
    pub fn event_time(&self, header: u32) -> Result<u64, Problem> {
        let begin_low = self.time_begin & EVENT_TIME_MASK;
        let mut low = header as u64 & EVENT_TIME_MASK;
        if low < begin_low {
            low += 1 << EVENT_TIME_BITS;
        }
        let out_of_packet = |time| Problem::TimeOutsidePacket { time, begin: self.time_begin, end: self.time_end };
        let time = (self.time_begin & !EVENT_TIME_MASK).checked_add(low).ok_or(out_of_packet(u64::MAX))?;
        if time < self.time_begin || time > self.time_end {
            return Err(out_of_packet(time));
        }
        Ok(time)
    }
}

pub(crate) fn event_code(header: u32) -> u8 {
    (header >> EVENT_TIME_BITS) as u8
}

/// Header sizes: v003 added the domain.
const HEADER_SIZE_V2: usize = 66;
const HEADER_SIZE_V3: usize = 68;
/// Where the version field is, so that the header's size is known before it is read.
const VERSION_OFFSET: usize = 28;

/// Reads the header of the packet at `offset`, and checks that the whole packet is there.
pub(crate) fn read_packet_header(file: &[u8], offset: usize) -> Result<PacketHeader, Error> {
    let bytes = &file[offset..];
    let corrupt = |problem| Error::CorruptPacket { packet: offset, problem };
    let truncated = |needed| Error::Truncated { packet: offset, needed, available: bytes.len() };
    if bytes.len() < VERSION_OFFSET + 2 {
        return Err(truncated(HEADER_SIZE_V3));
    }
    let magic = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    if magic != CTF_MAGIC {
        return Err(corrupt(Problem::BadMagic(magic)));
    }
    let version = u16::from_le_bytes(bytes[VERSION_OFFSET..VERSION_OFFSET + 2].try_into().expect("2 bytes"));
    if !(1..=MAX_VERSION).contains(&version) {
        return Err(Error::UnsupportedVersion { packet: offset, version });
    }
    let header_size = if version >= 3 { HEADER_SIZE_V3 } else { HEADER_SIZE_V2 };
    if bytes.len() < header_size {
        return Err(truncated(header_size));
    }
    // Every field is within the `header_size` bytes checked above.
    let mut c = Cursor::new(&bytes[4..header_size]);
    let fields = (|| -> Result<_, Problem> {
        let (size_bits, time_begin, time_end, _flush_duration, _version) = (c.u32()?, c.u64()?, c.u64()?, c.u32()?, c.u16()?);
        let pid = c.u64()?;
        let domain = if version >= 3 { c.u16()? } else { 0 };
        let cache_verifier = CacheVerifier { slot: c.u16()?, prediction: c.u16()?, code: c.u64()? };
        Ok((size_bits, time_begin, time_end, pid, domain, cache_verifier, c.u64()?, c.u64()?))
    })();
    let (size_bits, time_begin, time_end, pid, domain, cache_verifier, alloc_id_begin, alloc_id_end) = fields.expect("within the header");
    if size_bits % 8 != 0 || ((size_bits / 8) as usize) < header_size {
        return Err(corrupt(Problem::BadPacketSize { bits: size_bits, header: header_size }));
    }
    let size = (size_bits / 8) as usize;
    if size > MAX_PACKET_SIZE {
        return Err(corrupt(Problem::PacketTooLarge { bytes: size }));
    }
    if time_begin > time_end {
        return Err(corrupt(Problem::ReversedTimestamps { begin: time_begin, end: time_end }));
    }
    if alloc_id_begin > alloc_id_end {
        return Err(corrupt(Problem::ReversedAllocIds { begin: alloc_id_begin, end: alloc_id_end }));
    }
    if size > bytes.len() {
        return Err(truncated(size));
    }
    Ok(PacketHeader { offset, size, header_size, time_begin, time_end, version, pid, domain, cache_verifier, alloc_id_begin, alloc_id_end })
}

/// The trace's header: the trace-info event, alone in the first packet.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceInfo {
    /// Format version of the trace (1 to 3).
    pub version: u16,
    /// The proportion of allocated words that memtrace sampled.
    pub sample_rate: f64,
    /// Bits in a word of the traced program (64 on x86-64).
    pub word_size: u8,
    /// `Sys.executable_name` of the traced program.
    pub executable_name: String,
    pub host_name: String,
    /// `Sys.runtime_parameters ()` (OCAMLRUNPARAM as the runtime sees it).
    pub ocaml_runtime_params: String,
    pub pid: u64,
    /// The domain that started tracing.
    pub initial_domain: u16,
    /// Microseconds since the Unix epoch.
    pub start_time: u64,
    /// The string the program passed to `Memtrace.trace_if_requested ~context` (v002 on).
    pub context: Option<String>,
}

pub(crate) fn read_trace_info(file: &[u8]) -> Result<(TraceInfo, usize), Error> {
    if file.is_empty() {
        return Err(Error::NotMemtrace { reason: "the file is empty" });
    }
    if file.len() < 4 || u32::from_le_bytes(file[..4].try_into().expect("4 bytes")) != CTF_MAGIC {
        return Err(Error::NotMemtrace { reason: "it does not start with the CTF magic number" });
    }
    let header = read_packet_header(file, 0)?;
    let content = header.content(file);
    let corrupt = |problem| Error::CorruptPacket { packet: 0, problem };
    let mut cursor = Cursor::new(content);
    let read = |cursor: &mut Cursor<'_>| -> Result<Option<TraceInfo>, Problem> {
        let event_header = cursor.u32()?;
        if event_code(event_header) != EVENT_TRACE_INFO || header.event_time(event_header)? != header.time_begin {
            return Ok(None);
        }
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let sample_rate = cursor.f64()?;
        let word_size = cursor.u8()?;
        let executable_name = text(cursor.cstr()?);
        let host_name = text(cursor.cstr()?);
        let ocaml_runtime_params = text(cursor.cstr()?);
        let pid = cursor.u64()?;
        let context = if header.version >= 2 { Some(text(cursor.cstr()?)).filter(|c| !c.is_empty()) } else { None };
        Ok(Some(TraceInfo {
            version: header.version,
            sample_rate,
            word_size,
            executable_name,
            host_name,
            ocaml_runtime_params,
            pid,
            initial_domain: header.domain,
            start_time: header.time_begin,
            context,
        }))
    };
    match read(&mut cursor) {
        Ok(Some(info)) if cursor.remaining() == 0 => Ok((info, header.size)),
        Ok(_) | Err(Problem::PastEnd) => Err(corrupt(Problem::BadTraceInfoPacket)),
        Err(problem) => Err(corrupt(problem)),
    }
}
