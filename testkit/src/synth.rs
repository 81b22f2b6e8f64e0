//! Synthetic OCaml 5.3 heaps, written as real snapshots.
//!
//! [`SynthHeap`] lays blocks out the way the OCaml 5.3 runtime does, so that the analyser (and
//! the diff and benchmarks built on it) read exactly what a dump of a real process would hold:
//!
//! * major blocks of at most 128 words (header included) go to **pools**: 32 KiB regions that
//!   start with the 4-word `struct pool` header (`next`, `next_obj`, `owner`, `sz`), then
//!   `wastage_sizeclass[sz]` unused words, then slots of `wsize_sizeclass[sz]` words. A free
//!   slot has a zero header and its second word links the pool's free list, as
//!   `pool_initialize` and `pool_sweep` leave them;
//! * bigger major blocks are **large allocations**: a 16-byte `struct large_alloc` then the block;
//! * young blocks go to domain 0's **minor heap**, packed from `young_ptr` to `young_end`;
//! * **static** blocks (module blocks, constants, static closures) go to one static data region
//!   with NOT_MARKABLE headers, like `caml_data_segments`;
//! * headers carry the snapshot's colour encoding (live blocks MARKED unless told otherwise,
//!   garbage GARBAGE) and optional reserved bits.
//!
//! Build a heap with `alloc*`, link blocks with [`Value::Ptr`], add roots, then
//! [`SynthHeap::write`]. [`large_heap_shape`] builds the benchmark heap: the shape of
//! `samples/large_heap.ml`.

use heapsnap_format::{
    ColourEncoding, CustomOpsRecord, DomainInfo, FormatError, Metadata, RegionHeader, RegionKind, RootKind, RootRecord, SnapshotWriter,
    StrId, SymbolKind, SymbolRecord, Trigger, NO_DOMAIN,
};
use heapsnap_values::{self as ocaml, Colour, HeaderLayout, PoolGeometry};
use std::path::Path;

/// Bumped whenever the layout of generated snapshots changes (benchmarks cache them by it).
pub const LAYOUT_VERSION: u32 = 2;

/// A block of the synthetic heap.
pub type ObjId = u64;

/// Where a block is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// The major heap: a pool slot, or a large allocation above 128 words.
    Major,
    /// Domain 0's minor heap.
    Minor,
    /// Static data.
    Static,
}

/// A field's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// An OCaml int (stored as `2n + 1`).
    Int(i64),
    /// A pointer to a block's first field.
    Ptr(ObjId),
    /// A pointer to field `k` of a block (an infix pointer into a set of closures).
    PtrAt(ObjId, u32),
    /// A word stored as is (an address outside the heap, a code pointer, 0...). Must be
    /// 8-aligned or odd.
    Raw(u64),
}

const PTR: u64 = 0b000;
const RAW_EVEN: u64 = 0b010;
const OFFSET_BITS: u32 = 12;

impl Value {
    fn encode(self) -> u64 {
        match self {
            Value::Int(n) => ((n as u64) << 1) | 1,
            Value::Ptr(id) => (id << (OFFSET_BITS + 3)) | PTR,
            Value::PtrAt(id, k) => {
                assert!(k < 1 << OFFSET_BITS, "infix offset {k} too large");
                (((id << OFFSET_BITS) | u64::from(k)) << 3) | PTR
            }
            Value::Raw(w) if w & 1 == 1 => w,
            Value::Raw(w) => {
                assert!(w % 8 == 0, "raw word {w:#x} is neither odd nor 8-aligned");
                w | RAW_EVEN
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Obj {
    fields: u64,
    wosize: u32,
    tag: u8,
    space: u8,
    colour: u8,
    /// Fields are raw bytes (strings, floats, custom payloads): copied verbatim.
    verbatim: bool,
    reserved: u32,
}

const COLOUR_DEFAULT: u8 = 0;
const COLOUR_GARBAGE: u8 = 1;
const COLOUR_UNMARKED: u8 = 2;

/// Where a synthetic heap puts things in the (pretend) address space.
pub mod addresses {
    pub const STATIC_BASE: u64 = 0x5555_5560_0000;
    pub const CODE_BASE: u64 = 0x5555_5550_0000;
    pub const LARGE_BASE: u64 = 0x5555_6000_0000;
    pub const POOL_BASE: u64 = 0x7f00_0000_0000;
    pub const MINOR_END: u64 = 0x7e00_0000_0000;
    /// Reserved size of domain 0's minor heap.
    pub const MINOR_RESERVATION: u64 = 256 << 20;
    /// The runtime's `caml_ephe_none` lives in C data: outside every region.
    pub const EPHE_NONE: u64 = 0x5555_5540_0008;
}

/// A heap being built. See the module documentation.
pub struct SynthHeap {
    objs: Vec<Obj>,
    words: Vec<u64>,
    roots: Vec<(RootKind, Value, String, u64, u16)>,
    /// Module blocks: their fields become `global` roots (slot = field address, origin = index).
    modules: Vec<(ObjId, String)>,
    suspended: Vec<(u64, Value)>,
    symbols: Vec<(String, u64, u64, SymbolKind)>,
    custom_ops: Vec<(u64, String)>,
    ephemerons: Vec<ObjId>,
    /// Statmemprof's tracked blocks: (block, the tracker's value, samples, sampling rate).
    memprof: Vec<(ObjId, Value, u64, f64)>,
    /// The process the snapshot says it is of: pid and executable.
    pub process: Option<(u32, String)>,
    /// Leave one free slot after every `free_every` allocations in a pool (0: never).
    pub free_every: u32,
    pub reserved_header_bits: u8,
    pub colours: ColourEncoding,
    pub redacted: bool,
}

impl Default for SynthHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl SynthHeap {
    pub fn new() -> Self {
        SynthHeap {
            objs: Vec::new(),
            words: Vec::new(),
            roots: Vec::new(),
            modules: Vec::new(),
            suspended: Vec::new(),
            symbols: Vec::new(),
            custom_ops: Vec::new(),
            ephemerons: Vec::new(),
            memprof: Vec::new(),
            process: None,
            free_every: 0,
            reserved_header_bits: 0,
            colours: ColourEncoding::OCAML5_INITIAL,
            redacted: false,
        }
    }

    pub fn with_capacity(objects: usize, words: usize) -> Self {
        let mut h = Self::new();
        h.objs.reserve(objects);
        h.words.reserve(words);
        h
    }

    pub fn len(&self) -> usize {
        self.objs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objs.is_empty()
    }

    fn push(&mut self, space: Space, tag: u8, words: impl IntoIterator<Item = u64>, verbatim: bool) -> ObjId {
        let start = self.words.len() as u64;
        self.words.extend(words);
        let wosize = (self.words.len() as u64 - start) as u32;
        let space = match space {
            Space::Major => 0,
            Space::Minor => 1,
            Space::Static => 2,
        };
        self.objs.push(Obj { fields: start, wosize, tag, space, colour: COLOUR_DEFAULT, verbatim, reserved: 0 });
        self.objs.len() as ObjId - 1
    }

    /// A block of scanned fields (tags below 251, Abstract for ephemerons).
    pub fn alloc(&mut self, space: Space, tag: u8, fields: &[Value]) -> ObjId {
        assert!(!fields.is_empty() || space == Space::Static, "OCaml 5 heap blocks have at least one field");
        self.push(space, tag, fields.iter().map(|v| v.encode()), false)
    }

    /// A block whose fields are raw words, copied verbatim (no-scan tags, or garbage-looking data).
    pub fn alloc_raw(&mut self, space: Space, tag: u8, words: &[u64]) -> ObjId {
        self.push(space, tag, words.iter().copied(), true)
    }

    /// A string (tag 252) with OCaml's padding: the last byte says how many bytes pad the end.
    pub fn alloc_string(&mut self, space: Space, bytes: &[u8]) -> ObjId {
        let wosize = bytes.len() / 8 + 1;
        let mut buf = vec![0u8; wosize * 8];
        buf[..bytes.len()].copy_from_slice(bytes);
        let last = wosize * 8 - 1;
        buf[last] = (last - bytes.len()) as u8;
        let words: Vec<u64> = buf.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        self.push(space, ocaml::STRING_TAG, words, true)
    }

    pub fn alloc_float(&mut self, space: Space, x: f64) -> ObjId {
        self.push(space, ocaml::DOUBLE_TAG, [x.to_bits()], true)
    }

    /// A closure: one function `code` of `arity`, then its environment.
    pub fn alloc_closure(&mut self, space: Space, code: u64, arity: i64, env: &[Value]) -> ObjId {
        let mut fields = vec![Value::Raw(code), Value::Raw(ocaml::make_closinfo(arity, 2))];
        fields.extend_from_slice(env);
        self.alloc(space, ocaml::CLOSURE_TAG, &fields)
    }

    /// A set of two mutually recursive closures sharing an environment: returns the block and
    /// the value of the second function (an infix pointer).
    pub fn alloc_closure_pair(&mut self, space: Space, code: [u64; 2], env: &[Value]) -> (ObjId, Value) {
        // f: code, closinfo(arity 1, env at 5) | infix header | g: code, closinfo | env...
        let infix = HeaderLayout::new(self.reserved_header_bits, self.colours).encode(3, ocaml::INFIX_TAG, Colour::Marked, 0);
        let mut fields = vec![
            Value::Raw(code[0]),
            Value::Raw(ocaml::make_closinfo(1, 5)),
            Value::Raw(infix),
            Value::Raw(code[1]),
            Value::Raw(ocaml::make_closinfo(1, 2)),
        ];
        fields.extend_from_slice(env);
        let id = self.alloc(space, ocaml::CLOSURE_TAG, &fields);
        (id, Value::PtrAt(id, 3))
    }

    /// A custom block: field 0 points to `struct custom_operations` at `ops` (registered with
    /// `identifier`), then `payload` raw words.
    pub fn alloc_custom(&mut self, space: Space, ops: u64, identifier: &str, payload: &[u64]) -> ObjId {
        if !self.custom_ops.iter().any(|(a, _)| *a == ops) {
            self.custom_ops.push((ops, identifier.to_string()));
        }
        let mut words = vec![ops];
        words.extend_from_slice(payload);
        self.push(space, ocaml::CUSTOM_TAG, words, true)
    }

    /// An ephemeron (`Ephemeron.K*`) or weak array (no data): an Abstract block
    /// `[link; data; keys...]` listed in the snapshot's ephemeron section.
    pub fn alloc_ephemeron(&mut self, data: Option<Value>, keys: &[Value]) -> ObjId {
        let none = Value::Raw(addresses::EPHE_NONE);
        let mut fields = vec![Value::Int(0), data.unwrap_or(none)];
        fields.extend(keys.iter().copied());
        let id = self.alloc(Space::Major, ocaml::ABSTRACT_TAG, &fields);
        self.ephemerons.push(id);
        id
    }

    /// Lists a block in the ephemeron section once more (a runtime lists each ephemeron once:
    /// for snapshots that do not).
    pub fn list_ephemeron_again(&mut self, id: ObjId) {
        self.ephemerons.push(id);
    }

    /// A continuation (Cont_tag) owning a suspended fiber stack at `stack`, whose frames hold `values`.
    pub fn alloc_continuation(&mut self, stack: u64, values: &[Value]) -> ObjId {
        let id = self.alloc(Space::Major, ocaml::CONT_TAG, &[Value::Raw(stack + 1), Value::Int(0)]);
        for &v in values {
            self.suspended.push((stack, v));
        }
        id
    }

    /// Sets a field of a block (scanned blocks only).
    pub fn set_field(&mut self, obj: ObjId, index: usize, value: Value) {
        let o = self.objs[obj as usize];
        assert!(!o.verbatim && index < o.wosize as usize, "field {index} of block {obj}");
        self.words[o.fields as usize + index] = value.encode();
    }

    /// Colours the block GARBAGE: found dead by the last marking, not swept yet.
    pub fn make_garbage(&mut self, obj: ObjId) {
        self.objs[obj as usize].colour = COLOUR_GARBAGE;
    }

    /// Colours the block UNMARKED (as during marking).
    pub fn make_unmarked(&mut self, obj: ObjId) {
        self.objs[obj as usize].colour = COLOUR_UNMARKED;
    }

    /// Sets the block's reserved header bits (needs `reserved_header_bits > 0`).
    pub fn set_reserved(&mut self, obj: ObjId, value: u32) {
        self.objs[obj as usize].reserved = value;
    }

    /// Records `obj` as a block statmemprof tracks, with the tracker's value (a memtrace id
    /// as `Value::Int`, or a call stack block), its samples and the profile's rate.
    pub fn track(&mut self, obj: ObjId, user_data: Value, samples: u64, sampling_rate: f64) {
        self.memprof.push((obj, user_data, samples, sampling_rate));
    }

    pub fn add_root(&mut self, kind: RootKind, value: Value, name: &str, origin: u64) {
        self.roots.push((kind, value, name.to_string(), origin, 0));
    }

    /// A module block (static, fields given): each field is a `global` root named
    /// `caml<Module>`, with the field's address as slot and its index as origin (FORMAT.md).
    pub fn add_module(&mut self, module: &str, fields: &[Value]) -> ObjId {
        let id = self.alloc(Space::Static, 0, fields);
        self.modules.push((id, format!("caml{module}")));
        id
    }

    pub fn add_symbol(&mut self, name: &str, start: u64, end: u64, kind: SymbolKind) {
        self.symbols.push((name.to_string(), start, end, kind));
    }

    /// The address (first field) a block will have in the written snapshot. Lays the whole heap
    /// out: O(blocks), meant for tests. Major blocks keep their address when more are added;
    /// minor blocks move (the minor heap is packed against its end).
    pub fn address_of(&self, id: ObjId) -> u64 {
        Plan::new(self).address[id as usize]
    }

    /// Writes the heap as a snapshot.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), FormatError> {
        let layout = HeaderLayout::new(self.reserved_header_bits, self.colours);
        let plan = Plan::new(self);
        let mut w = SnapshotWriter::create(path)?;
        let minor_start = addresses::MINOR_END - addresses::MINOR_RESERVATION;
        w.write_metadata(&Metadata {
            ocaml_version: "5.3.0".into(),
            word_size: 8,
            reserved_header_bits: self.reserved_header_bits,
            colours: self.colours,
            pid: self.process.as_ref().map(|p| p.0),
            executable: self.process.as_ref().map(|p| p.1.clone()),
            build_id: None,
            time_unix_ns: 0,
            trigger: Trigger::Synthetic,
            dumper: format!("heapsnap-analyze synth {}", env!("CARGO_PKG_VERSION")),
            domains: vec![DomainInfo {
                id: 0,
                minor_start,
                minor_end: addresses::MINOR_END,
                young_ptr: addresses::MINOR_END - plan.minor_words * 8,
            }],
            compactions: Some(1),
            redacted: self.redacted,
            warnings: vec![],
            pools: Some(PoolGeometry::ocaml_5_2()),
            forced_version: false,
            bytecode: false,
            layouts_from: None,
            ocaml4_gc: None,
            capture: None,
            probed: None,
            namespaces: None,
            host: None,
        })?;
        let mut roots = Vec::with_capacity(self.roots.len() + self.suspended.len());
        for (kind, value, name, origin, domain) in &self.roots {
            let name = if name.is_empty() { StrId::NONE } else { w.intern(name) };
            roots.push(RootRecord {
                kind: kind.code(),
                domain: *domain,
                flags: 0,
                thread: 0,
                slot: 0,
                value: plan.translate(value.encode()),
                origin: *origin,
                name,
                reserved: 0,
            });
        }
        for (id, name) in &self.modules {
            let o = &self.objs[*id as usize];
            let name = w.intern(name);
            for k in 0..o.wosize as usize {
                let word = self.words[o.fields as usize + k];
                roots.push(RootRecord {
                    kind: RootKind::Global.code(),
                    domain: NO_DOMAIN,
                    flags: 0,
                    thread: 0,
                    slot: plan.address[*id as usize] + 8 * k as u64,
                    value: plan.translate(word),
                    origin: k as u64,
                    name,
                    reserved: 0,
                });
            }
        }
        for (stack, value) in &self.suspended {
            roots.push(RootRecord {
                kind: RootKind::SuspendedStack.code(),
                domain: 0,
                flags: 0,
                thread: 0,
                slot: 0,
                value: plan.translate(value.encode()),
                origin: *stack,
                name: StrId::NONE,
                reserved: 0,
            });
        }
        w.write_roots(&roots)?;

        // Pools.
        let geometry = PoolGeometry::ocaml_5_2();
        let pool_wsize = geometry.pool_wsize as usize;
        let mut pool = vec![0u64; pool_wsize];
        for (p, &sz) in plan.pool_classes.iter().enumerate() {
            let base = addresses::POOL_BASE + p as u64 * (pool_wsize as u64 * 8);
            let wh = geometry.size_classes[sz].wsize as usize;
            let first = geometry.size_classes[sz].first_block as usize / 8;
            pool.fill(0);
            pool[2] = 0x5555_5570_0000; // owner: a domain state somewhere in C memory
            pool[3] = sz as u64;
            let mut free_head = 0u64;
            let mut slot = first;
            while slot + wh <= pool_wsize {
                pool[slot] = 0;
                pool[slot + 1] = free_head;
                slot += wh;
            }
            for &id in &plan.pool_members[plan.pool_member_start[p]..plan.pool_member_start[p + 1]] {
                let o = &self.objs[id as usize];
                let at = ((plan.address[id as usize] - base) / 8) as usize;
                pool[at - 1] = self.header(&layout, o);
                self.copy_fields(&plan, o, &mut pool[at..at + o.wosize as usize]);
            }
            // Link the free slots (zero headers) into the pool's free list, as sweeping does.
            let mut slot = first;
            while slot + wh <= pool_wsize {
                if pool[slot] == 0 {
                    pool[slot + 1] = free_head;
                    free_head = base + slot as u64 * 8;
                }
                slot += wh;
            }
            pool[1] = free_head;
            let header = RegionHeader {
                kind: RegionKind::Pool.code(),
                domain: 0,
                flags: 0,
                base,
                block_wsize: wh as u32,
                first_block: (first * 8) as u32,
                owner: 0,
            };
            w.write_region(&header, bytemuck::cast_slice(&pool))?;
        }
        // Large allocations.
        for &id in &plan.large {
            let o = &self.objs[id as usize];
            let mut words = vec![0u64; 2 + 1 + o.wosize as usize];
            words[0] = 0x5555_5570_0000;
            words[2] = self.header(&layout, o);
            self.copy_fields(&plan, o, &mut words[3..]);
            let header = RegionHeader {
                kind: RegionKind::Large.code(),
                domain: 0,
                flags: 0,
                base: plan.address[id as usize] - 24,
                block_wsize: 0,
                first_block: ocaml::LARGE_ALLOC_HEADER_BYTES as u32,
                owner: 0,
            };
            w.write_region(&header, bytemuck::cast_slice(&words))?;
        }
        // Minor heap and static data: packed blocks.
        for (space, kind, base, words, domain) in [
            (1u8, RegionKind::MinorHeap, addresses::MINOR_END - plan.minor_words * 8, plan.minor_words, 0u16),
            (2u8, RegionKind::Static, addresses::STATIC_BASE, plan.static_words, NO_DOMAIN),
        ] {
            if words == 0 {
                continue;
            }
            let mut buf = vec![0u64; words as usize];
            for (id, o) in self.objs.iter().enumerate().filter(|(_, o)| o.space == space) {
                let at = ((plan.address[id] - base) / 8) as usize;
                buf[at - 1] = if space == 2 {
                    layout.encode(u64::from(o.wosize), o.tag, Colour::NotMarkable, o.reserved)
                } else {
                    // Minor blocks carry colour 0 whatever it means.
                    self.header(&layout, o) & !(3 << 8)
                };
                self.copy_fields(&plan, o, &mut buf[at..at + o.wosize as usize]);
            }
            let header = RegionHeader { kind: kind.code(), domain, flags: 0, base, block_wsize: 0, first_block: 0, owner: 0 };
            w.write_region(&header, bytemuck::cast_slice(&buf))?;
        }
        let mut symbols: Vec<SymbolRecord> = self
            .symbols
            .iter()
            .map(|(name, start, end, kind)| SymbolRecord { start: *start, end: *end, name: w.intern(name), kind: kind.code() })
            .collect();
        w.write_symbols(&mut symbols)?;
        let ops: Vec<CustomOpsRecord> =
            self.custom_ops.iter().map(|(a, name)| CustomOpsRecord { address: *a, identifier: w.intern(name), reserved: 0 }).collect();
        w.write_custom_ops(&ops)?;
        if !self.ephemerons.is_empty() {
            let values: Vec<u64> = self.ephemerons.iter().map(|&id| plan.address[id as usize]).collect();
            w.write_ephemerons(&values)?;
        }
        if !self.memprof.is_empty() {
            let records: Vec<heapsnap_format::MemprofRecord> = self
                .memprof
                .iter()
                .map(|&(obj, user_data, samples, sampling_rate)| heapsnap_format::MemprofRecord {
                    block: plan.address[obj as usize],
                    user_data: plan.translate(user_data.encode()),
                    samples,
                    wosize: u64::from(self.objs[obj as usize].wosize),
                    profile: 0,
                    sampling_rate,
                    domain: 0,
                    table: heapsnap_format::MEMPROF_TABLE_DOMAIN,
                    source: heapsnap_format::MEMPROF_SOURCE_NORMAL,
                    flags: 0,
                    reserved: [0; 3],
                })
                .collect();
            w.write_memprof(&records)?;
        }
        w.finish()?;
        Ok(())
    }

    fn header(&self, layout: &HeaderLayout, o: &Obj) -> u64 {
        let colour = match o.colour {
            COLOUR_GARBAGE => Colour::Garbage,
            COLOUR_UNMARKED => Colour::Unmarked,
            _ => Colour::Marked,
        };
        layout.encode(u64::from(o.wosize), o.tag, colour, o.reserved)
    }

    fn copy_fields(&self, plan: &Plan, o: &Obj, out: &mut [u64]) {
        let src = &self.words[o.fields as usize..(o.fields + u64::from(o.wosize)) as usize];
        if o.verbatim {
            out.copy_from_slice(src);
        } else {
            for (d, &s) in out.iter_mut().zip(src) {
                *d = plan.translate(s);
            }
        }
    }
}

/// Addresses of every block.
struct Plan {
    /// Address of each block's first field.
    address: Vec<u64>,
    pool_classes: Vec<usize>,
    pool_member_start: Vec<usize>,
    pool_members: Vec<ObjId>,
    large: Vec<ObjId>,
    minor_words: u64,
    static_words: u64,
}

impl Plan {
    fn new(heap: &SynthHeap) -> Plan {
        let geometry = PoolGeometry::ocaml_5_2();
        let n = heap.objs.len();
        let mut address = vec![0u64; n];
        // Pools: one open pool per size class; a pool is numbered when opened.
        let mut open: [Option<(usize, usize)>; 32] = [None; 32]; // (pool index, next slot word)
        let mut pool_classes: Vec<usize> = Vec::new();
        let mut pool_of: Vec<u32> = vec![u32::MAX; n];
        let mut counts_in_class = [0u32; 32];
        let mut large = Vec::new();
        let mut minor_words = 0u64;
        let mut static_words = 0u64;
        let mut large_next = addresses::LARGE_BASE;
        for (id, o) in heap.objs.iter().enumerate() {
            let whsize = o.wosize as usize + 1;
            match o.space {
                0 if whsize <= geometry.sizeclass_max() => {
                    let sz = geometry.sizeclass_of_whsize(whsize).expect("fits a size class");
                    let wh = geometry.size_classes[sz].wsize as usize;
                    loop {
                        let (p, slot) = *open[sz].get_or_insert_with(|| {
                            pool_classes.push(sz);
                            (pool_classes.len() - 1, geometry.size_classes[sz].first_block as usize / 8)
                        });
                        if slot + wh > geometry.pool_wsize as usize {
                            open[sz] = None;
                            continue;
                        }
                        counts_in_class[sz] += 1;
                        let skip = heap.free_every > 0 && counts_in_class[sz] % heap.free_every == 0;
                        open[sz] = Some((p, slot + wh));
                        if skip {
                            continue; // leave this slot free
                        }
                        let base = addresses::POOL_BASE + p as u64 * (geometry.pool_wsize as u64 * 8);
                        address[id] = base + (slot as u64 + 1) * 8;
                        pool_of[id] = p as u32;
                        break;
                    }
                }
                0 => {
                    // large_alloc header (16 bytes) + block header, then the fields; 4 KiB apart.
                    address[id] = large_next + 24;
                    large.push(id as ObjId);
                    large_next += (24 + u64::from(o.wosize) * 8).div_ceil(4096) * 4096 + 4096;
                }
                1 => {
                    address[id] = minor_words + 1; // relative for now
                    minor_words += whsize as u64;
                }
                _ => {
                    address[id] = static_words + 1;
                    static_words += whsize as u64;
                }
            }
        }
        let minor_base = addresses::MINOR_END - minor_words * 8;
        for (id, o) in heap.objs.iter().enumerate() {
            match o.space {
                1 => address[id] = minor_base + address[id] * 8,
                2 => address[id] = addresses::STATIC_BASE + address[id] * 8,
                _ => {}
            }
        }
        // Group pool members by pool (counting sort).
        let pools = pool_classes.len();
        let mut pool_member_start = vec![0usize; pools + 1];
        for &p in pool_of.iter().filter(|&&p| p != u32::MAX) {
            pool_member_start[p as usize + 1] += 1;
        }
        for i in 0..pools {
            pool_member_start[i + 1] += pool_member_start[i];
        }
        let mut cursor = pool_member_start.clone();
        let mut pool_members = vec![0; pool_member_start[pools]];
        for (id, &p) in pool_of.iter().enumerate().filter(|(_, &p)| p != u32::MAX) {
            pool_members[cursor[p as usize]] = id as ObjId;
            cursor[p as usize] += 1;
        }
        Plan { address, pool_classes, pool_member_start, pool_members, large, minor_words, static_words }
    }

    #[inline]
    fn translate(&self, w: u64) -> u64 {
        if w & 1 == 1 {
            return w;
        }
        if w & 0b111 == RAW_EVEN {
            return w & !0b111;
        }
        let v = w >> 3;
        let (id, k) = (v >> OFFSET_BITS, v & ((1 << OFFSET_BITS) - 1));
        self.address[id as usize] + k * 8
    }
}

/// What [`large_heap_shape`] built.
pub struct LargeHeapShape {
    pub heap: SynthHeap,
    pub items: u64,
    /// Blocks, all live and reachable.
    pub objects: u64,
}

/// The heap of `samples/large_heap.ml` with `items` items: 7 blocks per item (name string, int
/// array of 3, boxed float, closure over the index and name, the item record, a cell of the
/// global list `items`, a Hashtbl bucket in `index`), plus the bucket array, the Hashtbl
/// record, the `items` ref; the module block's two fields are the roots. Most blocks have one referrer; each item record
/// has two (its list cell and its bucket), each name two (the item and the closure).
pub fn large_heap_shape(items: u64) -> LargeHeapShape {
    let mut h = SynthHeap::with_capacity(items as usize * 7 + 8, items as usize * 20 + 64);
    let code = addresses::CODE_BASE + 0x1000;
    h.add_symbol("camlLarge_heap.score_123", code, code + 0x40, SymbolKind::Function);
    let buckets = (items / 2).max(16).next_power_of_two();
    let table = h.alloc(Space::Major, 0, &vec![Value::Int(0); buckets as usize]);
    let mut list = Value::Int(0);
    let mut chains = vec![Value::Int(0); buckets as usize];
    for i in 0..items {
        let name = h.alloc_string(Space::Major, format!("item-{i}").as_bytes());
        let vec = h.alloc(Space::Major, 0, &[Value::Int(i as i64), Value::Int(2 * i as i64), Value::Int(3 * i as i64)]);
        let weight = h.alloc_float(Space::Major, i as f64 * 0.5);
        let score = h.alloc_closure(Space::Major, code, 1, &[Value::Int(i as i64), Value::Ptr(name)]);
        let item =
            h.alloc(Space::Major, 0, &[Value::Int(i as i64), Value::Ptr(name), Value::Ptr(vec), Value::Ptr(score), Value::Ptr(weight)]);
        let cell = h.alloc(Space::Major, 0, &[Value::Ptr(item), list]);
        list = Value::Ptr(cell);
        let b = (i % buckets) as usize;
        let bucket = h.alloc(Space::Major, 0, &[Value::Int(i as i64), Value::Ptr(item), chains[b]]);
        chains[b] = Value::Ptr(bucket);
    }
    for (b, v) in chains.into_iter().enumerate() {
        h.set_field(table, b, v);
    }
    let hashtbl = h.alloc(Space::Major, 0, &[Value::Int(items as i64), Value::Ptr(table), Value::Int(0), Value::Int(16)]);
    let items_ref = h.alloc(Space::Major, 0, &[list]);
    h.add_module("Large_heap", &[Value::Ptr(items_ref), Value::Ptr(hashtbl)]);
    // The module block is static data that no pointer reaches: its fields are roots, it is no node.
    let objects = items * 7 + 3;
    LargeHeapShape { heap: h, items, objects }
}
