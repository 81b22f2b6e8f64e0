//! A writer of memtrace traces (format v003, one domain), for tests and benchmarks: synthetic
//! traces that memtrace's own reader accepts. It follows the format, not memtrace's writer: its
//! cache slot choice and packet boundaries differ, which a reader must not depend on.

use crate::backtrace::CACHE_SLOTS;
use crate::events::AllocSource;
use crate::limits::MAX_PACKET_SIZE;
use crate::location::{Location, LocationCode};
use crate::packet::TraceInfo;
use crate::packet::*;
use rustc_hash::{FxHashMap, FxHashSet};

const VERSION: u16 = 3;
const HEADER_SIZE: usize = 68;
/// An event header's 25-bit time wraps after 33 s; memtrace closes packets after 30 s.
const MAX_PACKET_SPAN: u64 = 30_000_000;
/// New frames one allocation may encode (each takes at most 10 bytes of a 32 KiB packet).
pub const MAX_NEW_FRAMES: usize = 3000;

/// Move-to-front encoder state, mirroring the reader's tables.
struct MtfNames {
    names: Vec<String>,
}

impl MtfNames {
    /// The code of `name` (31 if new), moving it to the front.
    fn encode(&mut self, name: &str) -> (u8, bool) {
        match self.names.iter().position(|n| n == name) {
            Some(index) => {
                let entry = self.names.remove(index);
                self.names.insert(0, entry);
                (index as u8, false)
            }
            None => {
                self.names.insert(0, name.to_string());
                self.names.truncate(31);
                (31, true)
            }
        }
    }
}

pub struct TraceWriter {
    out: Vec<u8>,
    pid: u64,
    events: Vec<u8>,
    pending_locations: Vec<u8>,
    packet_time_begin: u64,
    packet_time_end: u64,
    packet_first_alloc: u64,
    packet_verifier: (u16, u16, u64),
    next_alloc_id: u64,
    /// Per file, in move-to-front order: its function names' table.
    files: MtfNames,
    defnames: Vec<MtfNames>,
    known_locations: FxHashMap<LocationCode, Vec<Location<'static>>>,
    described: FxHashSet<LocationCode>,
    cache_codes: Vec<LocationCode>,
    cache_predictions: Vec<u16>,
    last_backtrace: Vec<LocationCode>,
    next_verified_slot: u16,
}

impl TraceWriter {
    /// Starts a trace with its trace-info packet. `info.version` is ignored: v003 is written.
    pub fn new(info: &TraceInfo) -> Self {
        let mut writer = TraceWriter {
            out: Vec::new(),
            pid: info.pid,
            events: Vec::new(),
            pending_locations: Vec::new(),
            packet_time_begin: info.start_time,
            packet_time_end: info.start_time,
            packet_first_alloc: 0,
            packet_verifier: (0xffff, 0, 0),
            next_alloc_id: 0,
            files: MtfNames { names: Vec::new() },
            defnames: Vec::new(),
            known_locations: FxHashMap::default(),
            described: FxHashSet::default(),
            cache_codes: vec![0; CACHE_SLOTS],
            cache_predictions: vec![0; CACHE_SLOTS],
            last_backtrace: Vec::new(),
            next_verified_slot: 4242,
        };
        let mut event = Vec::new();
        event_header(&mut event, EVENT_TRACE_INFO, info.start_time);
        event.extend(info.sample_rate.to_bits().to_le_bytes());
        event.push(info.word_size);
        for text in [&info.executable_name, &info.host_name, &info.ocaml_runtime_params] {
            cstr(&mut event, text);
        }
        event.extend(info.pid.to_le_bytes());
        cstr(&mut event, info.context.as_deref().unwrap_or(""));
        writer.write_packet(&event, info.start_time, info.start_time, 0, 0, (0xffff, 0, 0));
        writer
    }

    /// Says what a code stands for (outermost location first); described in the trace before
    /// its first use.
    pub fn define_location(&mut self, code: LocationCode, locations: Vec<Location<'static>>) {
        assert!(locations.len() < 256, "at most 255 locations per code");
        self.known_locations.insert(code, locations);
    }

    /// Appends an allocation (backtrace outermost first) and returns its id. Times must not
    /// decrease.
    pub fn alloc(&mut self, time: u64, length_words: u64, nsamples: u64, source: AllocSource, backtrace: &[LocationCode]) -> u64 {
        let common = self.last_backtrace.iter().zip(backtrace).take_while(|(a, b)| a == b).count();
        let suffix = &backtrace[common..];
        assert!(suffix.len() <= MAX_NEW_FRAMES, "at most {MAX_NEW_FRAMES} new frames per allocation");
        self.begin_event(time, 32 + 11 * suffix.len());
        for &code in suffix {
            self.describe(code);
        }
        let mut codewords = Vec::new();
        let count = self.encode_backtrace(suffix, &mut codewords);
        let short = (1..=16).contains(&length_words) && source == AllocSource::Minor && nsamples == 1 && count < 256;
        let out = &mut self.events;
        if short {
            event_header(out, EVENT_SHORT_ALLOC_FIRST + length_words as u8 - 1, time);
            vint(out, common as i64);
            out.push(count as u8);
        } else {
            event_header(out, EVENT_ALLOC, time);
            vint(out, length_words as i64);
            vint(out, nsamples as i64);
            out.push(match source {
                AllocSource::Minor => 0,
                AllocSource::Major => 1,
                AllocSource::External => 2,
            });
            vint(out, common as i64);
            out.extend((count as u16).to_le_bytes());
        }
        out.extend(codewords);
        self.last_backtrace = backtrace.to_vec();
        self.next_alloc_id += 1;
        self.next_alloc_id - 1
    }

    pub fn promote(&mut self, time: u64, id: u64) {
        self.object_event(EVENT_PROMOTE, time, id)
    }

    pub fn collect(&mut self, time: u64, id: u64) {
        self.object_event(EVENT_COLLECT, time, id)
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.flush();
        self.out
    }

    fn object_event(&mut self, code: u8, time: u64, id: u64) {
        self.begin_event(time, 16);
        event_header(&mut self.events, code, time);
        vint(&mut self.events, self.next_alloc_id as i64 - 1 - id as i64);
    }

    /// Flushes the packet if the event may not fit in it, or if its time is too far on.
    fn begin_event(&mut self, time: u64, max_size: usize) {
        assert!(time >= self.packet_time_end, "times must not decrease");
        let full = HEADER_SIZE + self.events.len() + max_size > MAX_PACKET_SIZE
            || HEADER_SIZE + self.pending_locations.len() + 4096 > MAX_PACKET_SIZE
            || time - self.packet_time_begin > MAX_PACKET_SPAN;
        if full {
            self.flush();
        }
        if self.events.is_empty() {
            self.packet_time_begin = time;
            self.packet_first_alloc = self.next_alloc_id;
            let slot = self.next_verified_slot;
            self.next_verified_slot = (slot + 5413) % CACHE_SLOTS as u16;
            self.packet_verifier = (slot, self.cache_predictions[slot as usize], self.cache_codes[slot as usize]);
        }
        self.packet_time_end = time;
    }

    /// Writes the pending location events, then the events, each in its packet.
    fn flush(&mut self) {
        let (begin, first_alloc) = (self.packet_time_begin, self.packet_first_alloc);
        if !self.pending_locations.is_empty() {
            let locations = std::mem::take(&mut self.pending_locations);
            self.write_packet(&locations, begin, begin, first_alloc, first_alloc, (0xffff, 0, 0));
        }
        if !self.events.is_empty() {
            let events = std::mem::take(&mut self.events);
            self.write_packet(&events, begin, self.packet_time_end, first_alloc, self.next_alloc_id, self.packet_verifier);
        }
    }

    fn write_packet(&mut self, content: &[u8], begin: u64, end: u64, first_alloc: u64, end_alloc: u64, verifier: (u16, u16, u64)) {
        let out = &mut self.out;
        out.extend(CTF_MAGIC.to_le_bytes());
        out.extend((((HEADER_SIZE + content.len()) * 8) as u32).to_le_bytes());
        out.extend(begin.to_le_bytes());
        out.extend(end.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend(VERSION.to_le_bytes());
        out.extend(self.pid.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend(verifier.0.to_le_bytes());
        out.extend(verifier.1.to_le_bytes());
        out.extend(verifier.2.to_le_bytes());
        out.extend(first_alloc.to_le_bytes());
        out.extend(end_alloc.to_le_bytes());
        out.extend(content);
    }

    /// Queues the location event of `code` if it was defined and not yet written. Location
    /// events carry the events packet's start time, as memtrace's do.
    fn describe(&mut self, code: LocationCode) {
        if self.described.contains(&code) {
            return;
        }
        let Some(locations) = self.known_locations.get(&code) else { return };
        self.described.insert(code);
        let out = &mut self.pending_locations;
        event_header(out, EVENT_LOCATION, self.packet_time_begin);
        out.extend(code.to_le_bytes());
        out.push(locations.len() as u8);
        for location in locations {
            let (file_code, new_file) = self.files.encode(&location.filename);
            if new_file {
                self.defnames.insert(0, MtfNames { names: Vec::new() });
                self.defnames.truncate(31);
            } else {
                let table = self.defnames.remove(file_code as usize);
                self.defnames.insert(0, table);
            }
            let (defname_code, new_defname) = self.defnames[0].encode(&location.defname);
            let packed = location.line.min(0xfffff) as u64
                | (location.start_char.min(0xff) as u64) << 20
                | (location.end_char.min(0x3ff) as u64) << 28
                | (file_code as u64) << 38
                | (defname_code as u64) << 43;
            out.extend(&packed.to_le_bytes()[..6]);
            if new_file {
                cstr(out, &location.filename);
            }
            if new_defname {
                cstr(out, &location.defname);
            }
        }
    }

    /// Encodes codes through the cache (one slot per code, by hash) with predictions, updating
    /// the cache exactly as the reader will. Returns the number of codewords.
    fn encode_backtrace(&mut self, codes: &[LocationCode], out: &mut Vec<u8>) -> usize {
        let mut predecessor = 0usize;
        let mut i = 0;
        let mut count = 0;
        while i < codes.len() {
            let code = codes[i];
            let slot = (code.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 50) as usize;
            self.cache_predictions[predecessor] = slot as u16;
            if self.cache_codes[slot] == code {
                let mut current = slot;
                let mut correct = 0;
                while correct < 255 && i + 1 + correct < codes.len() {
                    let next = self.cache_predictions[current] as usize;
                    if self.cache_codes[next] != codes[i + 1 + correct] {
                        break;
                    }
                    current = next;
                    correct += 1;
                }
                let tag = correct.min(2) as u16;
                out.extend(((slot as u16) << 2 | tag).to_le_bytes());
                if tag == 2 {
                    out.push(correct as u8);
                }
                i += 1 + correct;
                predecessor = current;
            } else {
                self.cache_codes[slot] = code;
                out.extend(((slot as u16) << 2 | 3).to_le_bytes());
                out.extend(code.to_le_bytes());
                i += 1;
                predecessor = slot;
            }
            count += 1;
        }
        count
    }
}

fn event_header(out: &mut Vec<u8>, code: u8, time: u64) {
    out.extend(((code as u32) << 25 | (time & 0x1ff_ffff) as u32).to_le_bytes());
}

fn cstr(out: &mut Vec<u8>, text: &str) {
    out.extend(text.bytes().take_while(|&b| b != 0));
    out.push(0);
}

fn vint(out: &mut Vec<u8>, value: i64) {
    match value {
        0..=252 => out.push(value as u8),
        253..=0xffff => {
            out.push(253);
            out.extend((value as u16).to_le_bytes());
        }
        _ if value == value as i32 as i64 => {
            out.push(254);
            out.extend((value as i32).to_le_bytes());
        }
        _ => {
            out.push(255);
            out.extend(value.to_le_bytes());
        }
    }
}
