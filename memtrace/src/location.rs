//! Location events: a 64-bit code (an OCaml backtrace slot) and the source locations it stands
//! for, several when functions were inlined. File and function names are move-to-front coded.

use crate::cursor::Cursor;
use crate::error::Problem;
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::fmt;

/// The opaque 64-bit code memtrace writes for one backtrace slot (a return address in practice).
pub type LocationCode = u64;

/// One source location. A code maps to a list of these, outermost first (the last one is the
/// innermost inlined function).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location<'t> {
    pub filename: Cow<'t, str>,
    /// memtrace keeps 20 bits, 8 bits and 10 bits: larger values arrive clamped.
    pub line: u32,
    pub start_char: u32,
    pub end_char: u32,
    /// The function, as OCaml names it in backtraces (e.g. `Stdlib__List.map`).
    pub defname: Cow<'t, str>,
}

impl fmt::Display for Location<'_> {
    /// memtrace's own rendering: `defname@file:line:start-end`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}:{}:{}-{}", self.defname, self.filename, self.line, self.start_char, self.end_char)
    }
}

const MTF_SLOTS: usize = 31;
const MTF_NEW: u8 = 31;

/// A move-to-front table of the 31 most recent names.
struct Mtf<V> {
    slots: [Option<V>; MTF_SLOTS],
}

impl<V> Mtf<V> {
    fn new() -> Self {
        Mtf { slots: std::array::from_fn(|_| None) }
    }

    /// Moves slot `index` to the front (the slots before it shift back by one).
    fn use_slot(&mut self, index: u8) -> Result<&mut V, Problem> {
        let index = index as usize;
        if self.slots[index].is_none() {
            return Err(Problem::EmptyMtfSlot(index as u8));
        }
        self.slots[..=index].rotate_right(1);
        Ok(self.slots[0].as_mut().expect("checked above"))
    }

    /// Pushes a new entry at the front; the last one falls off and is returned.
    fn push(&mut self, value: V) -> Option<V> {
        let evicted = self.slots[MTF_SLOTS - 1].take();
        self.slots.rotate_right(1);
        self.slots[0] = Some(value);
        evicted
    }
}

struct FileEntry<'t> {
    filename: &'t [u8],
    defnames: Mtf<&'t [u8]>,
}

/// The per-domain decoding state of location events: file names, and for each file its
/// function names, both move-to-front coded.
pub(crate) struct LocationDecoder<'t> {
    files: Mtf<FileEntry<'t>>,
}

impl<'t> LocationDecoder<'t> {
    pub fn new() -> Self {
        LocationDecoder { files: Mtf::new() }
    }

    /// Reads one location event's fields.
    pub fn read(&mut self, cursor: &mut Cursor<'t>) -> Result<(LocationCode, Vec<Location<'t>>), Problem> {
        let code = cursor.u64()?;
        let count = cursor.u8()?;
        let mut locations = Vec::with_capacity(count as usize);
        for _ in 0..count {
            // 48 bits: line (20), start_char (8), end_char (10), file code (5), defname code (5).
            let low = cursor.u32()? as u64;
            let high = cursor.u16()? as u64;
            let packed = low | high << 32;
            let line = (packed & 0xfffff) as u32;
            let start_char = ((packed >> 20) & 0xff) as u32;
            let end_char = ((packed >> 28) & 0x3ff) as u32;
            let file_code = ((packed >> 38) & 0x1f) as u8;
            let defname_code = ((packed >> 43) & 0x1f) as u8;

            let file = if file_code == MTF_NEW {
                let filename = cursor.cstr()?;
                // A new file takes over the function table of the file it evicts, if any:
                // memtrace's v001 writer relied on this, and later writers never notice it.
                let evicted = self.files.slots[MTF_SLOTS - 1].take();
                let defnames = evicted.map(|e| e.defnames).unwrap_or_else(Mtf::new);
                self.files.push(FileEntry { filename, defnames });
                self.files.slots[0].as_mut().expect("just pushed")
            } else {
                self.files.use_slot(file_code)?
            };
            let defname = if defname_code == MTF_NEW {
                let name = cursor.cstr()?;
                file.defnames.push(name);
                name
            } else {
                *file.defnames.use_slot(defname_code)?
            };
            locations.push(Location {
                filename: String::from_utf8_lossy(file.filename),
                line,
                start_char,
                end_char,
                defname: String::from_utf8_lossy(defname),
            });
        }
        Ok((code, locations))
    }
}

/// Every location code seen so far, with its source locations (outermost first).
#[derive(Default, Debug)]
pub struct LocationTable<'t> {
    codes: FxHashMap<LocationCode, Vec<Location<'t>>>,
}

impl<'t> LocationTable<'t> {
    /// The source locations of `code`, outermost first; `None` if the trace never described it.
    pub fn get(&self, code: LocationCode) -> Option<&[Location<'t>]> {
        self.codes.get(&code).map(Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.codes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.codes.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (LocationCode, &[Location<'t>])> {
        self.codes.iter().map(|(&code, locations)| (code, locations.as_slice()))
    }

    /// Records a location event. memtrace repeats a code's description whenever the code
    /// misses its backtrace cache; every repetition must agree.
    pub(crate) fn insert(&mut self, code: LocationCode, locations: Vec<Location<'t>>) -> Result<(), Problem> {
        match self.codes.get(&code) {
            Some(known) if *known != locations => Err(Problem::InconsistentLocation(code)),
            Some(_) => Ok(()),
            None => {
                self.codes.insert(code, locations);
                Ok(())
            }
        }
    }
}
