//! The bytecode a program runs, as the compiler wrote it (bytecomp/bytelink.ml): a file whose
//! trailer lists its sections (runtime/caml/exec.h), or, in an executable linked with
//! `-output-complete-exe`/`-output-obj`, the C array `caml_sections` holding the marshalled
//! table of the sections the runtime needs. Read for the table of globals (`SYMB`: which
//! compilation unit each slot of `caml_global_data` holds) and the code's size (`CODE`).

use super::marshal::{unmarshal, Marshalled, Value};
use std::path::Path;

/// `exec.h`: the trailer's magic number starts so (its last 3 characters are the version).
const TRAILER_MAGIC_PREFIX: &[u8] = b"Caml1999X";
/// `num_sections` (4 bytes, big-endian) then the 12-byte magic.
const TRAILER_SIZE: usize = 16;
/// A section descriptor: 4 bytes of name, a 4-byte big-endian length.
const DESCRIPTOR_SIZE: usize = 8;

/// What a slot of `caml_global_data` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Global {
    /// A compilation unit's module block, named as the unit (`Stdlib__List`).
    Unit(String),
    /// A predefined exception (`Not_found`).
    Predef(String),
}

/// One debug event (bytecomp/instruct.mli `debug_event`, the same from 4.14 to 5.3): where in
/// the code, in which definition, at which source line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugEvent {
    /// Offset in the `CODE` section, in bytes.
    pub pos: u64,
    /// The enclosing definition (`Cache_leak.run.(fun)`; the unit's name for its
    /// initialisation).
    pub defname: String,
    pub file: String,
    pub line: u32,
    /// The event at a function's entry (`Event_function`), just after its prologue.
    pub function_entry: bool,
    /// The compilation unit (`ev_module`): the definition is its initialisation when it is
    /// `defname` itself.
    pub module: String,
    /// The frame's size in words at the event (`ev_stacksize`).
    pub stack_size: u32,
    /// The variables in the frame (`ev_compenv.ce_stack`): each name and its position, the
    /// variable being local `stack_size - position` of the frame (debugger/eval.ml).
    pub locals: Vec<(String, u32)>,
}

/// The sections of a bytecode file.
pub struct BytecodeSections {
    bytes: Vec<u8>,
    sections: Vec<([u8; 4], usize, usize)>,
}

impl BytecodeSections {
    /// Reads the file at `path`, when it ends with a bytecode trailer (`None` when it does
    /// not: a native executable, or an executable linked with the bytecode inside).
    pub fn read(path: &Path) -> std::io::Result<Option<BytecodeSections>> {
        let bytes = std::fs::read(path)?;
        Ok(BytecodeSections::parse(bytes))
    }

    pub fn parse(bytes: Vec<u8>) -> Option<BytecodeSections> {
        let trailer = bytes.len().checked_sub(TRAILER_SIZE)?;
        if !bytes[trailer + 4..].starts_with(TRAILER_MAGIC_PREFIX) {
            return None;
        }
        let count = u32::from_be_bytes(bytes[trailer..trailer + 4].try_into().ok()?) as usize;
        let table = trailer.checked_sub(count.checked_mul(DESCRIPTOR_SIZE)?)?;
        let mut lengths = Vec::with_capacity(count);
        for i in 0..count {
            let d = &bytes[table + i * DESCRIPTOR_SIZE..table + (i + 1) * DESCRIPTOR_SIZE];
            lengths.push((d[..4].try_into().ok()?, u32::from_be_bytes(d[4..].try_into().ok()?) as usize));
        }
        // The sections lie one after the other, the last right before the table.
        let mut end = table;
        let mut sections = Vec::with_capacity(count);
        for &(name, len) in lengths.iter().rev() {
            let start = end.checked_sub(len)?;
            sections.push((name, start, len));
            end = start;
        }
        sections.reverse();
        Some(BytecodeSections { bytes, sections })
    }

    /// The section named `name` ("CODE", "SYMB", "DBUG", ...).
    pub fn section(&self, name: &str) -> Option<&[u8]> {
        let (_, start, len) = self.sections.iter().find(|(n, _, _)| n == name.as_bytes())?;
        Some(&self.bytes[*start..*start + *len])
    }

    /// The debug events of `ocamlc -g`, from its `DBUG` section: a count, then per
    /// compilation unit its code's offset and two marshalled values, its events and its
    /// source directories (bytelink.ml `output_debug_info`). `None` without the section.
    pub fn debug_events(&self) -> Option<Result<Vec<DebugEvent>, String>> {
        let dbug = self.section("DBUG")?;
        Some(read_debug_events(dbug))
    }

    /// The table of globals, from its `SYMB` section.
    pub fn globals(&self) -> Result<Vec<(usize, Global)>, String> {
        let symb = self.section("SYMB").ok_or("it has no SYMB section")?;
        let map = unmarshal(symb).map_err(|e| format!("its SYMB section: {e}"))?;
        globals_of(&map, map.root.ok_or("empty SYMB")?)
    }
}

fn read_debug_events(dbug: &[u8]) -> Result<Vec<DebugEvent>, String> {
    let be32 = |at: usize| dbug.get(at..at + 4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
    let count = be32(0).ok_or("DBUG is empty")?;
    let mut at = 4;
    let mut events = Vec::new();
    for unit in 0..count {
        let offset = be32(at).ok_or_else(|| format!("DBUG ends before unit {unit}"))? as u64;
        at += 4;
        let list = unmarshal(&dbug[at..]).map_err(|e| format!("DBUG's unit {unit}: {e}"))?;
        at += marshalled_len(&dbug[at..]).ok_or("DBUG: a value's length")?;
        at += marshalled_len(dbug.get(at..).unwrap_or_default()).ok_or("DBUG: a value's length")?; // its source directories
        let mut cell = list.root.ok_or("DBUG: no events")?;
        while let Some((_, f)) = list.block(cell).filter(|(_, f)| f.len() == 2) {
            events.push(event(&list, f[0]).ok_or_else(|| format!("DBUG's unit {unit}: an event is not a debug_event"))?.at(offset));
            cell = f[1];
        }
    }
    events.sort_by_key(|e| e.pos);
    Ok(events)
}

impl DebugEvent {
    fn at(mut self, unit_offset: u64) -> DebugEvent {
        self.pos += unit_offset;
        self
    }
}

/// `{ ev_pos; ev_module; ev_loc; ev_kind; ev_defname; ev_info; ... }`, `ev_loc` a
/// `Location.t` whose start is `{ pos_fname; pos_lnum; ... }`, `ev_info` `Event_function`
/// (0) or another.
fn event(m: &Marshalled, v: Value) -> Option<DebugEvent> {
    let (_, f) = m.block(v).filter(|(_, f)| f.len() >= 11)?;
    let start = m.field(f[2], 0)?;
    let text = |v: Value| m.string(v).map(|s| String::from_utf8_lossy(s).into_owned());
    Some(DebugEvent {
        pos: u64::try_from(m.int(f[0])?).ok()?,
        module: text(f[1])?,
        defname: text(f[4])?,
        file: text(m.field(start, 0)?)?,
        line: u32::try_from(m.int(m.field(start, 1)?)?).ok()?,
        function_entry: f[5] == Value::Int(0),
        stack_size: u32::try_from(m.int(f[9])?).ok()?,
        locals: stack_variables(m, m.field(f[8], 0)?)?,
    })
}

/// An `int Ident.tbl`: `Empty` (0) or `Node (left, { ident; data; previous }, right, height)`,
/// each ident a block whose first field is its name. Shadowed bindings (`previous`) are not
/// visible at the event: left out.
fn stack_variables(m: &Marshalled, table: Value) -> Option<Vec<(String, u32)>> {
    let mut out = Vec::new();
    let mut todo = vec![table];
    while let Some(node) = todo.pop() {
        if node == Value::Int(0) {
            continue;
        }
        if out.len() > m.objects.len() {
            return None; // not a tree
        }
        let (_, f) = m.block(node).filter(|(_, f)| f.len() == 4)?;
        let name = m.string(m.field(m.field(f[1], 0)?, 0)?)?;
        let position = u32::try_from(m.int(m.field(f[1], 1)?)?).ok()?;
        out.push((String::from_utf8_lossy(name).into_owned(), position));
        todo.extend([f[0], f[2]]);
    }
    out.sort();
    Some(out)
}

/// The length of the marshalled value at the start of `bytes`: its header and data.
fn marshalled_len(bytes: &[u8]) -> Option<usize> {
    let be = |at: usize, n: usize| bytes.get(at..at + n).map(|b| b.iter().fold(0u64, |a, &x| (a << 8) | x as u64));
    let (header, data) = match be(0, 4)? {
        0x8495_A6BE => (20, be(4, 4)?),
        0x8495_A6BF => (32, be(8, 8)?),
        _ => return None,
    };
    let len = header + usize::try_from(data).ok()?;
    (len <= bytes.len()).then_some(len)
}

/// The code's functions, as named by its debug events: each range of code from a
/// definition's first event up to the next definition's, a function's extended back over its
/// prologue (`RESTART`, `GRAB n`: three 4-byte words before its entry event) so that its
/// closures' code pointers fall inside it. (offset in bytes, length, name), sorted.
///
/// Code the compiler made without a source location has events named `??`
/// (`Debuginfo.Scoped_location`'s unknown location): it ends the definition before it and
/// names nothing.
pub fn functions(events: &[DebugEvent]) -> Vec<(u64, u64, String)> {
    const PROLOGUE: u64 = 12;
    const UNKNOWN: &str = "??";
    let mut runs: Vec<(u64, u64, &str)> = Vec::new(); // (start, last event, name)
    for e in events {
        match runs.last_mut() {
            Some(run) if run.2 == e.defname && !e.function_entry => run.1 = e.pos,
            _ => {
                let after_previous = runs.last().map_or(0, |r| r.1 + 4);
                let start = if e.function_entry { e.pos.saturating_sub(PROLOGUE).max(after_previous) } else { e.pos };
                runs.push((start, e.pos, &e.defname));
            }
        }
    }
    let mut out = Vec::with_capacity(runs.len());
    for (i, run) in runs.iter().enumerate().filter(|(_, run)| run.2 != UNKNOWN) {
        let end = runs.get(i + 1).map_or(run.1 + 4, |next| next.0);
        out.push((run.0, end.saturating_sub(run.0).max(4), run.2.to_string()));
    }
    out
}

/// The globals of `caml_sections`, the marshalled section table an executable linked with
/// `-output-complete-exe` or `-output-obj` carries: an array of (name, value) pairs.
pub fn globals_of_section_table(marshalled: &[u8]) -> Result<Vec<(usize, Global)>, String> {
    let table = unmarshal(marshalled).map_err(|e| format!("caml_sections: {e}"))?;
    let root = table.root.ok_or("empty caml_sections")?;
    let (_, pairs) = table.block(root).ok_or("caml_sections is not an array")?;
    for &pair in pairs {
        if table.field(pair, 0).and_then(|n| table.string(n)) == Some(b"SYMB") {
            return globals_of(&table, table.field(pair, 1).ok_or("a SYMB pair without its value")?);
        }
    }
    Err("caml_sections has no SYMB".into())
}

/// Reads `Symtable`'s global map: `{ cnt; tbl }`, `tbl` a `Map.Make` tree of nodes
/// `(left, key, slot, right, height)` from each global to its slot. A key is an `Ident.t` up
/// to OCaml 5.1 (`Global of string`, tag 2, for a unit; `Predef`, tag 3) and a
/// `Symtable.Global.t` since 5.2 (`Glob_compunit`, tag 0; `Glob_predef`, tag 1), each with
/// its name first (a record's first field, or the string itself).
fn globals_of(m: &Marshalled, map: Value) -> Result<Vec<(usize, Global)>, String> {
    let tree = m.field(map, 1).ok_or("the global map is not { cnt; tbl }")?;
    let mut keys = Vec::new();
    let mut todo = vec![tree];
    let mut seen = 0usize;
    while let Some(node) = todo.pop() {
        if node == Value::Int(0) {
            continue;
        }
        seen += 1;
        if seen > m.objects.len() {
            return Err("the global map is not a tree".into());
        }
        let (_, fields) = m.block(node).filter(|(_, f)| f.len() == 5).ok_or("a node of the global map is not (l, key, slot, r, h)")?;
        let slot = m.int(fields[2]).and_then(|s| usize::try_from(s).ok()).ok_or("a global's slot is not a number")?;
        let (tag, key) = m.block(fields[1]).ok_or("a global's key is not a block")?;
        let name = key.first().and_then(|&n| m.string(n)).ok_or("a global's key has no name")?;
        keys.push((slot, tag, String::from_utf8_lossy(name).into_owned()));
        todo.extend([fields[0], fields[3]]);
    }
    let ident_keys = keys.iter().any(|k| k.1 >= 2);
    let mut globals: Vec<(usize, Global)> = keys
        .into_iter()
        .map(|(slot, tag, name)| {
            let unit = if ident_keys { tag == 2 } else { tag == 0 };
            (slot, if unit { Global::Unit(name) } else { Global::Predef(name) })
        })
        .collect();
    globals.sort_by_key(|g| g.0);
    Ok(globals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(pos: u64, defname: &str, function_entry: bool) -> DebugEvent {
        let (module, file, line, stack_size, locals) = ("M".into(), "m.ml".into(), 1, 0, Vec::new());
        DebugEvent { pos, defname: defname.into(), file, line, function_entry, module, stack_size, locals }
    }

    #[test]
    fn functions_span_their_events_and_prologues_and_unknown_code_names_nothing() {
        let events = [
            event(0, "M", false),
            event(40, "M", false),
            event(100, "M.f", true), // f's closures point at its GRAB, before this event
            event(120, "M.f", false),
            event(140, "??", false),
            event(160, "M.g", true),
        ];
        let f = functions(&events);
        assert_eq!(f[0], (0, 88, "M".to_string()));
        assert_eq!(f[1], (88, 52, "M.f".to_string()), "f from its prologue up to the unknown code");
        assert_eq!(f[2], (148, 16, "M.g".to_string()), "g's prologue is after the unknown code's last event");
        assert_eq!(f.len(), 3);
    }

    proptest::proptest! {
        /// Sections of any bytes behind a valid trailer: their globals and debug events are read
        /// or refused, never a panic.
        #[test]
        fn any_sections_are_read_or_refused(symb in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256), dbug in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut file = b"#!/bin/ocamlrun\n".to_vec();
            file.extend_from_slice(&symb);
            file.extend_from_slice(&dbug);
            for (name, len) in [(b"SYMB", symb.len() as u32), (b"DBUG", dbug.len() as u32)] {
                file.extend_from_slice(name);
                file.extend_from_slice(&len.to_be_bytes());
            }
            file.extend_from_slice(&2u32.to_be_bytes());
            file.extend_from_slice(b"Caml1999X035");
            let sections = BytecodeSections::parse(file).expect("a trailer");
            let _ = sections.globals();
            let _ = sections.debug_events();
        }
    }

    #[test]
    fn a_file_without_a_trailer_is_no_bytecode() {
        assert!(BytecodeSections::parse(b"\x7fELF and more bytes than a trailer".to_vec()).is_none());
        assert!(BytecodeSections::parse(b"short".to_vec()).is_none());
    }

    #[test]
    fn sections_are_found_back_from_the_trailer() {
        let mut file = b"#!/bin/ocamlrun\n".to_vec();
        file.extend_from_slice(b"code");
        file.extend_from_slice(b"symbols!");
        for (name, len) in [(b"CODE", 4u32), (b"SYMB", 8u32)] {
            file.extend_from_slice(name);
            file.extend_from_slice(&len.to_be_bytes());
        }
        file.extend_from_slice(&2u32.to_be_bytes());
        file.extend_from_slice(b"Caml1999X035");
        let s = BytecodeSections::parse(file).unwrap();
        assert_eq!(s.section("CODE"), Some(&b"code"[..]));
        assert_eq!(s.section("SYMB"), Some(&b"symbols!"[..]));
        assert_eq!(s.section("DBUG"), None);
        // A table claiming more sections than the file holds is no bytecode.
        let mut lying = b"Caml1999X035".to_vec();
        lying.splice(0..0, 1000u32.to_be_bytes());
        assert!(BytecodeSections::parse(lying).is_none());
    }
}
