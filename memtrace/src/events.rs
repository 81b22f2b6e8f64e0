//! Streaming over a trace's events, packet by packet, keeping only the decoding state.

use crate::backtrace::BacktraceDecoder;
use crate::cursor::Cursor;
use crate::error::{Error, Problem};
use crate::limits::MAX_DOMAINS;
use crate::location::{Location, LocationCode, LocationDecoder, LocationTable};
use crate::packet::TraceInfo;
use crate::packet::*;

/// Where an allocation came from, as `Gc.Memprof` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocSource {
    /// The minor heap.
    Minor,
    /// Directly in the major heap (large blocks, or C code calling `caml_alloc_shr`).
    Major,
    /// Memory outside the OCaml heap, reported with `Memtrace.External.alloc`.
    External,
}

/// One event of the trace. Times are microseconds since the Unix epoch.
#[derive(Debug, Clone, Copy)]
pub enum Event<'r> {
    Alloc(Alloc<'r>),
    /// A sampled block survived a minor collection.
    Promote {
        id: u64,
        time: u64,
        domain: u16,
    },
    /// A sampled block was collected (or an external allocation freed).
    Collect {
        id: u64,
        time: u64,
        domain: u16,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct Alloc<'r> {
    /// The allocation id: what memtrace's tracker returns to `Gc.Memprof` as the block's
    /// tracking data. Ids count up from 0 in the order the allocations were sampled.
    pub id: u64,
    pub time: u64,
    pub domain: u16,
    /// Size in words, header excluded.
    pub length_words: u64,
    /// How many samples fell in this block (samples are drawn over length + 1 words).
    pub nsamples: u64,
    pub source: AllocSource,
    /// How many leading (outermost) frames the writer said this backtrace shares with the
    /// previous allocation's of the same domain, as written in the trace.
    pub common_prefix: u64,
    pub backtrace: Backtrace<'r>,
}

/// An allocation's call stack.
#[derive(Debug, Clone, Copy)]
pub struct Backtrace<'r> {
    codes: &'r [LocationCode],
    locations: &'r LocationTable<'r>,
}

/// One frame of a decoded backtrace: a source location, or a code the trace never described.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frame<'r> {
    pub code: LocationCode,
    pub location: Option<&'r Location<'r>>,
}

impl<'r> Backtrace<'r> {
    pub(crate) fn new(codes: &'r [LocationCode], locations: &'r LocationTable<'r>) -> Self {
        Backtrace { codes, locations }
    }

    /// The location codes, outermost (e.g. the program's entry point) first, as in the trace.
    pub fn codes(&self) -> &'r [LocationCode] {
        self.codes
    }

    /// Where the codes' locations are looked up.
    pub fn location_table(&self) -> &'r LocationTable<'r> {
        self.locations
    }

    /// Source frames, innermost (the allocation point) first; a code with inlined functions
    /// gives several frames, innermost function first.
    pub fn frames(&self) -> impl Iterator<Item = Frame<'r>> + 'r {
        let locations = self.locations;
        self.codes.iter().rev().flat_map(move |&code| frames_of_code(locations, code))
    }
}

/// The frames of one code, innermost first.
pub(crate) fn frames_of_code<'r>(table: &'r LocationTable<'r>, code: LocationCode) -> impl Iterator<Item = Frame<'r>> + 'r {
    let known = table.get(code).unwrap_or(&[]);
    let unknown = known.is_empty().then_some(Frame { code, location: None });
    known.iter().rev().map(move |location| Frame { code, location: Some(location) }).chain(unknown)
}

struct DomainState<'t> {
    id: u16,
    locations: LocationDecoder<'t>,
    backtraces: BacktraceDecoder,
    last_time: u64,
}

/// The packet being read.
struct Packet<'t> {
    header: PacketHeader,
    cursor: Cursor<'t>,
    /// The id the next allocation of this packet gets.
    next_alloc_id: u64,
    domain: usize,
}

/// What `step` read, before the borrows of the decoder's state are taken for `Event`.
enum Step {
    Alloc { id: u64, time: u64, length_words: u64, nsamples: u64, source: AllocSource, common_prefix: u64 },
    Promote { id: u64, time: u64 },
    Collect { id: u64, time: u64 },
}

/// Reads a trace's events in order: `while let Some(event) = events.next_event()? { .. }`.
///
/// Packets written by another process (after a `fork`) carry another pid and are skipped, as
/// memtrace's reader does: see [`EventReader::skipped_packets`]. After an error, the reader
/// returns no more events.
pub struct EventReader<'t> {
    file: &'t [u8],
    info: &'t TraceInfo,
    next_packet: usize,
    packet: Option<Packet<'t>>,
    domains: Vec<DomainState<'t>>,
    locations: LocationTable<'t>,
    skipped_packets: usize,
    failed: bool,
}

impl<'t> EventReader<'t> {
    pub(crate) fn new(file: &'t [u8], info: &'t TraceInfo, first_packet: usize) -> Self {
        EventReader {
            file,
            info,
            next_packet: first_packet,
            packet: None,
            domains: Vec::new(),
            locations: LocationTable::default(),
            skipped_packets: 0,
            failed: false,
        }
    }

    /// The next allocation, promotion or collection; `Ok(None)` at the end of the trace.
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>, Error> {
        if self.failed {
            return Ok(None);
        }
        let step = match self.step() {
            Ok(Some(step)) => step,
            Ok(None) => return Ok(None),
            Err(error) => {
                self.failed = true;
                return Err(error);
            }
        };
        let packet = self.packet.as_ref().expect("an event comes from a packet");
        let domain = &self.domains[packet.domain];
        let domain_id = domain.id;
        Ok(Some(match step {
            Step::Alloc { id, time, length_words, nsamples, source, common_prefix } => Event::Alloc(Alloc {
                id,
                time,
                domain: domain_id,
                length_words,
                nsamples,
                source,
                common_prefix,
                backtrace: Backtrace::new(&domain.backtraces.backtrace, &self.locations),
            }),
            Step::Promote { id, time } => Event::Promote { id, time, domain: domain_id },
            Step::Collect { id, time } => Event::Collect { id, time, domain: domain_id },
        }))
    }

    pub fn info(&self) -> &'t TraceInfo {
        self.info
    }

    /// The locations described so far (all of them once `next_event` has returned `None`).
    pub fn locations(&self) -> &LocationTable<'t> {
        &self.locations
    }

    pub fn into_locations(self) -> LocationTable<'t> {
        self.locations
    }

    /// Packets skipped because another process wrote them (their pid is not the trace's).
    pub fn skipped_packets(&self) -> usize {
        self.skipped_packets
    }

    fn step(&mut self) -> Result<Option<Step>, Error> {
        loop {
            let Some(packet) = &mut self.packet else {
                if self.next_packet == self.file.len() {
                    return Ok(None);
                }
                self.start_packet()?;
                continue;
            };
            if packet.cursor.remaining() == 0 {
                if packet.next_alloc_id != packet.header.alloc_id_end {
                    let problem = Problem::AllocIdMismatch {
                        allocs: packet.next_alloc_id - packet.header.alloc_id_begin,
                        expected: packet.header.alloc_id_end - packet.header.alloc_id_begin,
                    };
                    return Err(Error::CorruptPacket { packet: packet.header.offset, problem });
                }
                self.packet = None;
                continue;
            }
            let event_offset = packet.header.offset + packet.header.header_size + packet.cursor.position();
            let packet_offset = packet.header.offset;
            let domain = &mut self.domains[packet.domain];
            match read_event(packet, domain, &mut self.locations) {
                Ok(Some(step)) => return Ok(Some(step)),
                Ok(None) => continue,
                Err(problem) => return Err(Error::CorruptEvent { packet: packet_offset, offset: event_offset, problem }),
            }
        }
    }

    fn start_packet(&mut self) -> Result<(), Error> {
        let header = read_packet_header(self.file, self.next_packet)?;
        let corrupt = |problem| Error::CorruptPacket { packet: header.offset, problem };
        if header.version != self.info.version {
            return Err(corrupt(Problem::VersionChanged { first: self.info.version, this: header.version }));
        }
        self.next_packet += header.size;
        if header.pid != self.info.pid {
            self.skipped_packets += 1;
            return Ok(());
        }
        let domain = match self.domains.iter().position(|d| d.id == header.domain) {
            Some(index) => index,
            None if self.domains.len() < MAX_DOMAINS => {
                self.domains.push(DomainState {
                    id: header.domain,
                    locations: LocationDecoder::new(),
                    backtraces: BacktraceDecoder::new(),
                    last_time: self.info.start_time,
                });
                self.domains.len() - 1
            }
            None => return Err(corrupt(Problem::TooManyDomains)),
        };
        self.domains[domain].backtraces.verify(header.cache_verifier).map_err(corrupt)?;
        let cursor = Cursor::new(header.content(self.file));
        self.packet = Some(Packet { next_alloc_id: header.alloc_id_begin, header, cursor, domain });
        Ok(())
    }
}

/// Reads one event; location events are recorded and give `None`.
fn read_event<'t>(packet: &mut Packet<'t>, domain: &mut DomainState<'t>, table: &mut LocationTable<'t>) -> Result<Option<Step>, Problem> {
    let cursor = &mut packet.cursor;
    let event_header = cursor.u32()?;
    let time = packet.header.event_time(event_header)?;
    if time < domain.last_time {
        return Err(Problem::TimeGoesBack { time, previous: domain.last_time });
    }
    domain.last_time = time;
    let code = event_code(event_header);
    match code {
        EVENT_TRACE_INFO => Err(Problem::SecondTraceInfo),
        EVENT_LOCATION => {
            let (code, locations) = domain.locations.read(cursor)?;
            table.insert(code, locations)?;
            Ok(None)
        }
        EVENT_ALLOC | EVENT_SHORT_ALLOC_FIRST..=EVENT_SHORT_ALLOC_LAST => {
            let (length_words, nsamples, source) = if code == EVENT_ALLOC {
                let length = cursor.count("allocation length")?;
                let nsamples = cursor.count("sample count")?;
                let source = match cursor.u8()? {
                    0 => AllocSource::Minor,
                    1 => AllocSource::Major,
                    2 => AllocSource::External,
                    other => return Err(Problem::BadSource(other)),
                };
                (length, nsamples, source)
            } else {
                ((code - EVENT_SHORT_ALLOC_FIRST + 1) as u64, 1, AllocSource::Minor)
            };
            let common_prefix = cursor.count("backtrace common prefix")?;
            let codewords = if code == EVENT_ALLOC { cursor.u16()? as u32 } else { cursor.u8()? as u32 };
            domain.backtraces.read(cursor, common_prefix, codewords)?;
            let id = packet.next_alloc_id;
            // Cannot overflow: the id stays below the header's alloc_id_end, checked at the end.
            packet.next_alloc_id = id.checked_add(1).ok_or(Problem::BadObjectId { counter: id, delta: -1 })?;
            Ok(Some(Step::Alloc { id, time, length_words, nsamples, source, common_prefix }))
        }
        EVENT_PROMOTE | EVENT_COLLECT => {
            // The id is given relative to the last allocation: counter - 1 - delta. Promotions
            // are of earlier allocations; a collection may be of another domain's block.
            let delta = cursor.vint()?;
            if code == EVENT_PROMOTE && delta < 0 {
                return Err(Problem::Negative("promotion id delta"));
            }
            let counter = packet.next_alloc_id;
            let id = u64::try_from(counter as i128 - 1 - delta as i128).map_err(|_| Problem::BadObjectId { counter, delta })?;
            Ok(Some(if code == EVENT_PROMOTE { Step::Promote { id, time } } else { Step::Collect { id, time } }))
        }
        other => Err(Problem::UnknownEvent(other)),
    }
}
