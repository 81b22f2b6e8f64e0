//! Human names for blocks: module globals from symbols (`camlFoo` -> `Foo`), closures by function
//! symbol and `file:line` (addr2line over the snapshot's DWARF sections), custom blocks by their
//! operations' identifier, strings with a short escaped preview.

use crate::blocks::BlockRef;
use gimli::{EndianSlice, LittleEndian};
use heapsnap_format::{RootKind, RootRecord, Snapshot};
use heapsnap_values as ocaml;
use std::collections::HashMap;
use std::sync::Mutex;

type Reader<'s> = EndianSlice<'s, LittleEndian>;

pub struct Names<'s> {
    snap: &'s Snapshot,
    /// The program's OCaml names and types, when the snapshot carries them: parsed on first
    /// use (a report read from the analysis index may need none of them).
    ocaml: std::sync::OnceLock<Option<OcamlNames>>,
    /// The executable's line tables, then each loaded Dynlink plugin's with its load bias: read
    /// on first use (a report read from the analysis index may need none).
    /// Behind a lock: addr2line parses each unit's lines on first use, through `&self`, and
    /// is not `Sync` (reports ask from several threads: the types beside the roots' reach).
    lines: std::sync::OnceLock<Mutex<LineTables<'s>>>,
    line_cache: Mutex<HashMap<u64, Option<String>>>,
    custom_ops: HashMap<u64, &'s str>,
    /// Target address minus this is the executable's link-time address (PIE).
    load_bias: u64,
    /// Where each unit's module-block field paths and the closures' source lines can be read
    /// without parsing the OCaml names or the line tables (the analysis index saves them,
    /// [`OcamlNames::field_paths`]), and what it gave of each.
    saved: Option<&'s dyn SavedNames>,
    field_paths: std::sync::OnceLock<Option<FieldPaths>>,
    saved_lines: std::sync::OnceLock<Option<SourceLines>>,
}

/// By compilation unit, in name order (an index saves them alike every time): its module
/// block's field paths, by index.
pub type FieldPaths = std::collections::BTreeMap<String, Vec<String>>;

/// By code address: its `file:line` ([`Names::source_line`]; `None`: the line tables have none).
pub type SourceLines = HashMap<u64, Option<String>>;

/// What keeps names apart from the snapshot's names section and line tables (the analysis
/// index), for reports that would otherwise parse them for a few answers.
pub trait SavedNames: Sync {
    /// The module blocks' field paths, read when a label first needs one (`None`: not kept).
    fn field_paths(&self) -> Option<FieldPaths>;
    /// The source lines of the closures' code pointers, read when a closure is first named
    /// (`None`: not kept). An address they lack is looked up in the line tables.
    fn source_lines(&self) -> Option<SourceLines>;
}

impl<'s> Names<'s> {
    pub fn new(snap: &'s Snapshot) -> Self {
        let custom_ops = snap.custom_ops().iter().filter_map(|o| Some((o.address, snap.string(o.identifier)?))).collect();
        Names {
            snap,
            ocaml: std::sync::OnceLock::new(),
            lines: std::sync::OnceLock::new(),
            line_cache: Mutex::new(HashMap::new()),
            custom_ops,
            load_bias: snap.load_bias(),
            saved: None,
            field_paths: std::sync::OnceLock::new(),
            saved_lines: std::sync::OnceLock::new(),
        }
    }

    /// These names, the program's OCaml names parsed already ([`OcamlNames::of`], on a thread
    /// of its own while the graph was built).
    pub(crate) fn with_ocaml(mut self, parsed: Option<OcamlNames>) -> Self {
        self.ocaml = std::sync::OnceLock::from(parsed);
        self
    }

    /// These names, module-block fields' paths and closures' source lines read from `saved`
    /// (once, when first needed) instead of from the parsed OCaml names and the line tables;
    /// for what `saved` gives none of, from them.
    pub fn with_saved(mut self, saved: &'s dyn SavedNames) -> Self {
        self.saved = Some(saved);
        self
    }

    /// The path of a field of a compilation unit's module block (`Server.sessions`' field
    /// `sessions`), by the unit's symbol (`camlServer`): from the saved paths when there are.
    pub fn global_path(&self, symbol: &str, index: u64) -> Option<&str> {
        if let Some(saved) = self.saved {
            if let Some(paths) = self.field_paths.get_or_init(|| saved.field_paths()) {
                return paths.get(module_name(symbol))?.get(usize::try_from(index).ok()?).map(String::as_str);
            }
        }
        self.global_field(symbol, index).map(|f| f.path.as_str())
    }

    fn line_tables(&self) -> std::sync::MutexGuard<'_, LineTables<'s>> {
        let tables = self.lines.get_or_init(|| {
            let snap = self.snap;
            let plugins = snap.plugin_dwarf();
            let mut biases: Vec<u64> = plugins.iter().map(|d| d.load_bias).collect();
            biases.sort_unstable();
            biases.dedup();
            let plugins = biases
                .into_iter()
                .filter_map(|bias| {
                    let section = |name: &str| plugins.iter().find(|d| d.load_bias == bias && d.name == name).map(|d| d.bytes);
                    Some((bias, line_context(section)?))
                })
                .collect();
            Mutex::new(LineTables { executable: line_context(|name| snap.dwarf_section(name)), plugins })
        });
        tables.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the target's addresses minus the executable's link-time addresses are (PIE).
    pub fn load_bias(&self) -> u64 {
        self.load_bias
    }

    /// The program's OCaml names and types, when the snapshot carries them (`heapsnap annotate`).
    pub fn ocaml(&self) -> Option<&OcamlNames> {
        self.ocaml.get_or_init(|| OcamlNames::of(self.snap)).as_ref()
    }

    /// Forgets the program's OCaml names: module globals are then numbered and no block gets
    /// a type, as in a snapshot without names (a diff of snapshots of which only some have
    /// names compares them all so, for their signatures to match).
    pub fn forget_ocaml(&mut self) {
        self.ocaml = std::sync::OnceLock::from(None);
    }

    /// A field of a compilation unit's module block, by the unit's symbol (`camlFoo`).
    pub fn global_field(&self, symbol: &str, index: u64) -> Option<&heapsnap_names::model::Field> {
        let unit = self.ocaml()?.units.get(module_name(symbol))?;
        unit.get(usize::try_from(index).ok()?)
    }

    /// The field of the toplevel binding a `BINDING` root is named after (`Cache_leak.cache`:
    /// a variable of the unit's initialisation, in its frame), when every identifier of the
    /// unit of that name has the same kind and type (a shadowed binding of another type and its
    /// successor: the frame's variable could be either; an `include struct` binding and its
    /// copy: one value).
    pub fn binding_field(&self, name: &str) -> Option<&heapsnap_names::model::Field> {
        let (unit, variable) = name.split_once('.')?;
        let fields = self.ocaml()?.units.get(unit)?;
        let mut named = fields.iter().filter(|f| f.path == variable);
        let field = named.next()?;
        named.all(|other| other.kind == field.kind && other.ty == field.ty).then_some(field)
    }

    /// A short label for a root record: `Module.field` for globals (the field's identifier
    /// when the snapshot has OCaml names, else its index), the function for stack frames, the
    /// symbol or field name for the others.
    pub fn root_label(&self, r: &RootRecord) -> String {
        if matches!(r.root_kind(), RootKind::Global | RootKind::DynGlobal) && !r.is_binding() {
            if let Some(n) = self.snap.string(r.name).filter(|s| !s.is_empty()) {
                if let Some(path) = self.global_path(n, r.origin) {
                    return format!("{}.{}", module_name(n), path);
                }
            }
        }
        root_label(self.snap, r)
    }

    /// The symbol covering a code address. A unit's sizeless markers (`camlFoo.code_begin`)
    /// start where its first function does, and are innermost there by the format's rule: the
    /// function that starts at the same address, and has a size, names it instead.
    pub fn symbol(&self, address: u64) -> Option<&'s str> {
        Self::symbol_in(self.snap, address)
    }

    /// [`Names::symbol`] in a snapshot, without its names made (the analysis sweeps closures
    /// before they are).
    pub fn symbol_in(snap: &'s Snapshot, address: u64) -> Option<&'s str> {
        let (found, name) = snap.symbol_at(address)?;
        let name = if found.end == found.start {
            let symbols = snap.symbols();
            let run = symbols.partition_point(|s| s.start < found.start);
            symbols[run..]
                .iter()
                .take_while(|s| s.start == found.start)
                .find(|s| address < s.end)
                .and_then(|s| snap.string(s.name))
                .unwrap_or(name)
        } else {
            name
        };
        Some(name).filter(|n| !n.is_empty())
    }

    /// `file:line` of a code address, when the snapshot carries line tables (the executable's,
    /// then each plugin's).
    pub fn source_line(&self, address: u64) -> Option<String> {
        if let Some(lines) = self.saved.and_then(|saved| self.saved_lines.get_or_init(|| saved.source_lines()).as_ref()) {
            if let Some(line) = lines.get(&address) {
                return line.clone();
            }
        }
        let mut cache = self.line_cache.lock().expect("no panics while holding the cache");
        cache
            .entry(address)
            .or_insert_with(|| {
                // DWARF holds link-time addresses: undo the load bias of a PIE executable, or of
                // the plugin.
                let tables = self.line_tables();
                let loc = tables
                    .executable
                    .iter()
                    .map(|ctx| (self.load_bias, ctx))
                    .chain(tables.plugins.iter().map(|(bias, ctx)| (*bias, ctx)))
                    .find_map(|(bias, ctx)| ctx.find_location(address.wrapping_sub(bias)).ok().flatten())?;
                let file = loc.file?;
                let short = file.rsplit('/').next().unwrap_or(file);
                Some(match loc.line {
                    Some(line) => format!("{short}:{line}"),
                    None => short.to_string(),
                })
            })
            .clone()
    }

    /// The source file (as the line tables name it, directories dropped) and line of a code
    /// address, the innermost inlined frame first when the line tables record inlining.
    pub fn source_frames(&self, address: u64) -> Vec<(String, u32)> {
        let short = |file: &str| file.rsplit('/').next().unwrap_or(file).to_string();
        let tables = self.line_tables();
        let contexts =
            tables.executable.iter().map(|ctx| (self.load_bias, ctx)).chain(tables.plugins.iter().map(|(bias, ctx)| (*bias, ctx)));
        for (bias, ctx) in contexts {
            let Ok(mut frames) = ctx.find_frames(address.wrapping_sub(bias)).skip_all_loads() else { continue };
            let mut out = Vec::new();
            while let Ok(Some(frame)) = frames.next() {
                if let Some(loc) = frame.location {
                    out.push((loc.file.map(short).unwrap_or_default(), loc.line.unwrap_or(0)));
                }
            }
            if !out.is_empty() {
                return out;
            }
        }
        Vec::new()
    }

    /// A closure's function: symbol and source line of its code pointer.
    pub fn closure_function(&self, code: u64) -> String {
        let sym = self.symbol(code).map_or_else(|| format!("{code:#x}"), str::to_string);
        match self.source_line(code) {
            Some(line) => format!("{sym} ({line})"),
            None => sym,
        }
    }

    /// Custom operations' addresses and identifiers.
    pub fn custom_ops(&self) -> &HashMap<u64, &'s str> {
        &self.custom_ops
    }

    pub fn custom_identifier(&self, ops: u64) -> Option<&'s str> {
        self.custom_ops.get(&ops).copied()
    }

    /// A one-line description of a block.
    pub fn describe(&self, b: &BlockRef<'_>) -> String {
        let size = b.header.wosize;
        match b.header.tag {
            ocaml::STRING_TAG => format!("string {}", string_preview(b.fields, 32)),
            ocaml::DOUBLE_TAG => match b.fields.first() {
                Some(&w) => format!("float {}", f64::from_bits(w)),
                None => "float".into(),
            },
            ocaml::DOUBLE_ARRAY_TAG => format!("float array [{size}]"),
            ocaml::CUSTOM_TAG => {
                let ops = b.fields.first().copied().unwrap_or(0);
                ocaml::custom_block_name(self.custom_identifier(ops))
            }
            ocaml::CLOSURE_TAG => {
                let code = b.fields.first().copied().unwrap_or(0);
                format!("closure {}", self.closure_function(code))
            }
            tag => format!("{} tag {tag} size {size}", ocaml::tag_name(tag)),
        }
    }
}

/// The program's OCaml names (the snapshot's `ocaml_names` section), parsed once.
pub struct OcamlNames {
    pub program: heapsnap_names::Program,
    pub env: heapsnap_names::TypeEnv,
    /// Each unit's module-block fields, by unit name.
    units: HashMap<String, Vec<heapsnap_names::model::Field>>,
}

impl OcamlNames {
    /// `None` without the section, or when its JSON does not parse (a hostile or damaged
    /// file: the snapshot then analyses as one without names).
    pub(crate) fn of(snap: &Snapshot) -> Option<OcamlNames> {
        let timer = crate::progress::PhaseTimer::start("OCaml names");
        let mut program = heapsnap_names::Program::parse(snap.ocaml_names()?).ok()?;
        timer.lap("parsed");
        let env = heapsnap_names::TypeEnv::new(&program);
        timer.lap("type environment");
        let units = program.units.iter_mut().map(|u| (u.unit.clone(), std::mem::take(&mut u.fields))).collect();
        Some(OcamlNames { program, env, units })
    }

    /// Units named, and module-block fields named.
    pub fn counts(&self) -> (usize, usize) {
        (self.units.len(), self.units.values().map(Vec::len).sum())
    }

    pub fn fields(&self, unit: &str) -> Option<&[heapsnap_names::model::Field]> {
        self.units.get(unit).map(Vec::as_slice)
    }

    /// Every unit's module-block field paths ([`Names::global_path`]'s answers), to save.
    pub fn field_paths(&self) -> FieldPaths {
        self.units.iter().map(|(unit, fields)| (unit.clone(), fields.iter().map(|f| f.path.clone()).collect())).collect()
    }
}

/// The executable's line tables and each loaded Dynlink plugin's, with its load bias.
struct LineTables<'s> {
    executable: Option<addr2line::Context<Reader<'s>>>,
    plugins: Vec<(u64, addr2line::Context<Reader<'s>>)>,
}

/// Line tables from DWARF sections found by name; `None` without `.debug_line` or `.debug_info`.
fn line_context<'s>(section: impl Fn(&str) -> Option<&'s [u8]>) -> Option<addr2line::Context<Reader<'s>>> {
    if section(".debug_line").is_none() && section(".debug_info").is_none() {
        return None;
    }
    dwarf(section).and_then(|dwarf| addr2line::Context::from_dwarf(dwarf).ok())
}

/// DWARF sections found by name (absent ones empty), read in place.
pub(crate) fn dwarf<'s>(section: impl Fn(&str) -> Option<&'s [u8]>) -> Option<gimli::Dwarf<Reader<'s>>> {
    let load = |id: gimli::SectionId| -> Result<Reader<'s>, gimli::Error> {
        Ok(EndianSlice::new(section(id.name()).unwrap_or(&[]), LittleEndian))
    };
    gimli::Dwarf::load(load).ok()
}

/// An OCaml function symbol as OCaml's backtraces name the function: `camlFoo__Bar.baz_123`
/// (OCaml 5) or `camlFoo__Bar__baz_123` (4.14, where the last `__` ends the unit) ->
/// `Foo__Bar.baz` (the unit's prefix and the unique stamp dropped); other names unchanged.
pub fn function_name(symbol: &str) -> std::borrow::Cow<'_, str> {
    let drop_stamp = |name: &'_ str| -> usize {
        match name.rsplit_once('_') {
            Some((base, stamp)) if !stamp.is_empty() && stamp.bytes().all(|c| c.is_ascii_digit()) && !base.ends_with(['.', '_']) => {
                base.len()
            }
            _ => name.len(),
        }
    };
    let Some(name) = symbol.strip_prefix("caml").filter(|s| s.starts_with(|c: char| c.is_ascii_uppercase())) else { return symbol.into() };
    if name.contains('.') {
        return name[..drop_stamp(name)].into();
    }
    match name.rsplit_once("__") {
        Some((unit, function)) if !function.is_empty() => format!("{unit}.{}", &function[..drop_stamp(function)]).into(),
        _ => symbol.into(),
    }
}

/// `camlFoo__Bar` -> `Foo__Bar`; other names unchanged.
pub fn module_name(symbol: &str) -> &str {
    symbol.strip_prefix("caml").filter(|s| !s.is_empty()).unwrap_or(symbol)
}

/// The contents of a string block (without OCaml's padding), escaped and cut to `max` bytes.
pub fn string_preview(fields: &[u64], max: usize) -> String {
    let bytes: &[u8] = bytemuck::cast_slice(fields);
    let len = match bytes.last() {
        Some(&pad) if (pad as usize) < bytes.len().min(8) => bytes.len() - 1 - pad as usize,
        _ => bytes.len(),
    };
    let shown = &bytes[..len.min(max)];
    let mut out = String::from("\"");
    for &c in shown {
        out.extend(std::ascii::escape_default(c).map(char::from));
    }
    out.push('"');
    if len > max {
        out.push_str(&format!("...({len} bytes)"));
    }
    out
}

/// A short label for a root record without OCaml names ([`Names::root_label`] uses them):
/// `Module.index` for globals, the function for stack frames, the symbol or field name for
/// the others.
pub fn root_label(snap: &Snapshot, r: &RootRecord) -> String {
    let kind = r.root_kind();
    let name = snap.string(r.name).filter(|s| !s.is_empty());
    match (kind, name) {
        // A module's toplevel binding, in its initialisation's frame, or the toplevel's:
        // named as itself.
        (_, Some(n)) if r.is_binding() => n.to_string(),
        // A field of a module block: `Module.index`.
        (RootKind::Global | RootKind::DynGlobal, Some(n)) => format!("{}.{}", module_name(n), r.origin),
        (_, Some(n)) => format!("{kind} {n}"),
        (_, None) if r.slot != 0 => format!("{kind} @{:#x}", r.slot),
        (_, None) => kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews() {
        let mut bytes = *b"req-000001\0\0\0\0\0\x05";
        assert_eq!(string_preview(bytemuck::cast_slice(&bytes), 32), "\"req-000001\"");
        bytes[1] = b'\n';
        assert_eq!(string_preview(bytemuck::cast_slice(&bytes), 4), "\"r\\nq-\"...(10 bytes)");
        assert_eq!(module_name("camlCache_leak"), "Cache_leak");
        assert_eq!(module_name("caml"), "caml");
        assert_eq!(function_name("camlAlloc_sites.open_session_271"), "Alloc_sites.open_session");
        assert_eq!(function_name("camlStdlib__Bytes.make_95"), "Stdlib__Bytes.make");
        assert_eq!(function_name("caml_alloc_shr"), "caml_alloc_shr");
        assert_eq!(function_name("camlAlloc_sites__open_session_271"), "Alloc_sites.open_session");
        assert_eq!(function_name("camlStdlib__Bytes__make_279"), "Stdlib__Bytes.make");
        assert_eq!(function_name("camlRoots__entry"), "Roots.entry");
        assert_eq!(function_name("camlCache_leak"), "camlCache_leak");
    }
}
