//! Where typing stops (issue 26's diagnosis): every reachable block without an OCaml type,
//! classified by the *gate* through which a breadth-first search from the roots first reaches
//! it: the first untyped block on its path, and what holds that block.
//!
//!     cargo run --release -p heapsnap-analyze --example untyped -- SNAP [--limit N]
//!
//! The search runs from every root but the stacks first, then from the stacks, registers and C
//! local roots over what is left: what only those reach is "held only by stack frames". Each
//! untyped block inherits the class of the untyped block it was reached from; a typed block ends
//! the region. Classes of a gate (what holds it -> what it is):
//! - `closure env`: a closure (tag 247) reached from a typed block or a global: what it holds
//!   is its environment, typed only when closures' environments are. Per function symbol:
//!   `caml_curryN`/`caml_tuplifyN` are partial applications.
//! - `module block`: a tag-0 block whose fields are all closures or blocks of closures (a
//!   first-class module, a functor's argument, a record of functions).
//! - `under a typed field`: any other untyped block right below a typed one (a type variable, an
//!   abstract type, an existential, an extensible type, Obj.magic): per type and field.
//! - `untyped global`: a module global's value with no type.
//! - `C/runtime root`: reached first from a C global root, a finaliser, a thread, a domain...
//! - `held only by stack frames`: per frame.
//!
//! A BFS path is one path among many: a block reached from several places counts once, under
//! the first. Bytes are the blocks' own sizes (static data excluded), as `info`'s typed share.

use heapsnap_analyze::{AnalysedHeap, Analysis, HeapFacts, Progress};
use heapsnap_format::{RootKind, Snapshot};
use heapsnap_values as ocaml;
use std::collections::{HashMap, VecDeque};

const UNSEEN: u32 = u32::MAX;
const TYPED: u32 = u32::MAX - 1;

/// The classes, interned: "class\tdetail".
#[derive(Default)]
struct Classes {
    names: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Classes {
    fn id(&mut self, class: &str, detail: &str) -> u32 {
        let key = format!("{class}\t{detail}");
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        self.names.push(key.clone());
        self.ids.insert(key, self.names.len() as u32 - 1);
        self.names.len() as u32 - 1
    }
}

fn is_stack_kind(k: RootKind) -> bool {
    matches!(k, RootKind::Stack | RootKind::Register | RootKind::LocalRoot)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: untyped SNAP [--limit N]")?;
    let limit: usize = args.iter().position(|a| a == "--limit").and_then(|i| args.get(i + 1)).map_or(Ok(12), |s| s.parse())?;
    let snap = Snapshot::open(path)?;
    let a = Analysis::new(&snap, &Progress::hidden())?;
    let typing = a.typing().ok_or_else(|| format!("{path} has no OCaml types (heapsnap annotate it)"))?;
    let g = &a.graph;
    let nodes = g.offsets.len() - 1;
    let is_typed = |v: u32| typing.type_name(typing.type_id(v)).is_some();
    let closure_symbol = |v: u32| {
        let code = a.block(v).and_then(|b| b.fields.first().copied()).unwrap_or(0);
        a.names.closure_function(code)
    };
    let mut classes = Classes::default();
    let mut class = vec![UNSEEN; nodes];
    // The nearest closure above each untyped block on its search path (itself for a closure),
    // whatever the gate: what closures' environments hold once typing reaches the closures.
    let mut nearest_closure = vec![UNSEEN; nodes];
    // Per class: how many gates, and their own sizes in words (a closure's: code, info, env).
    let mut gate_sizes: HashMap<u32, (u64, u64)> = HashMap::new();
    // Per class: one gate's address, to inspect.
    let mut example: HashMap<u32, u64> = HashMap::new();
    let mut count_gate = |c: u32, v: u32| {
        example.entry(c).or_insert_with(|| a.address(v).unwrap_or(0));
        let e = gate_sizes.entry(c).or_default();
        e.0 += 1;
        e.1 += a.block(v).map_or(0, |b| b.header.wosize);
        c
    };

    // What a gate is: the class of an untyped block reached from `from` (a typed block, or a
    // root record when `root` is given).
    let gate_class = |classes: &mut Classes, v: u32, holder: Holder| -> u32 {
        let Some(b) = a.block(v) else { return classes.id("not a block", "") };
        // Held only by a frame: no type can come from there, whatever the block is.
        if let Holder::Root(label, kind) = &holder {
            if is_stack_kind(*kind) {
                let what = if b.header.tag == ocaml::CLOSURE_TAG { format!(" -> closure {}", closure_symbol(v)) } else { String::new() };
                return classes.id("held only by stack frames", &format!("{label}{what}"));
            }
        }
        if b.header.tag == ocaml::CLOSURE_TAG {
            let sym = closure_symbol(v);
            let kind = if sym.starts_with("caml_curry") || sym.starts_with("caml_tuplify") { "partial application" } else { "function" };
            return classes.id(&format!("closure env ({kind})"), &sym);
        }
        let fields = g.successors(v);
        let closure_like = |w: u32| {
            a.block(w).is_some_and(|c| {
                c.header.tag == ocaml::CLOSURE_TAG
                    || (c.header.tag == 0
                        && !c.fields.is_empty()
                        && g.successors(w).iter().all(|&x| a.block(x).is_some_and(|d| d.header.tag == ocaml::CLOSURE_TAG)))
            })
        };
        if b.header.tag == 0 && b.fields.len() >= 2 && !fields.is_empty() && fields.iter().all(|&w| closure_like(w)) {
            let what = match holder {
                Holder::Typed(p, i) => {
                    format!("{} .{}", a.type_label(p).unwrap_or_default(), a.field_label(p, i).unwrap_or_else(|| i.to_string()))
                }
                Holder::Root(label, _) => label,
            };
            return classes.id("module block (first-class module / record of closures)", &what);
        }
        match holder {
            Holder::Typed(p, i) => {
                let ty = a.type_label(p).unwrap_or_else(|| "?".into());
                let field = a.field_label(p, i).unwrap_or_else(|| format!("{i}"));
                classes.id("under a typed field", &format!("{ty} .{field} -> {}", a.describe(v)))
            }
            Holder::Root(label, kind) if kind == RootKind::Global || kind == RootKind::DynGlobal => classes.id("untyped global", &label),
            Holder::Root(label, kind) => classes.id("C/runtime root", &format!("{} {label}", kind.label())),
        }
    };

    // The roots, in two phases: every root but the stacks, then the stacks.
    for stack_phase in [false, true] {
        let mut queue = VecDeque::new();
        for (i, &kind) in g.root_kinds.iter().enumerate() {
            if is_stack_kind(kind) != stack_phase || !kind.is_root() {
                continue;
            }
            for &v in g.successors(1 + i as u32) {
                if class[v as usize] != UNSEEN {
                    continue;
                }
                if !is_typed(v) && a.block(v).is_some_and(|b| b.header.tag == ocaml::CLOSURE_TAG) {
                    nearest_closure[v as usize] = v;
                }
                class[v as usize] = if is_typed(v) {
                    TYPED
                } else {
                    let record = g.roots_of(v).iter().map(|r| &snap.roots()[r.record as usize]).find(|r| r.root_kind() == kind);
                    let mut label = record.map_or_else(|| kind.label().to_string(), |r| a.names.root_label(r));
                    // A global's type as the names give it: why typing did not start there.
                    if let Some(r) = record.filter(|_| matches!(kind, RootKind::Global | RootKind::DynGlobal)) {
                        let field = snap.string(r.name).and_then(|symbol| a.names.global_field(symbol, r.origin));
                        let ty = field.map_or("no field".to_string(), |f| format!("{} {:?}", f.kind, f.ty));
                        label = format!("{label} : {}", ty.chars().take(160).collect::<String>());
                    }
                    count_gate(gate_class(&mut classes, v, Holder::Root(label, kind)), v)
                };
                queue.push_back(v);
            }
        }
        while let Some(p) = queue.pop_front() {
            let from = class[p as usize];
            let fields = a.block(p).map(|b| b.fields.to_vec()).unwrap_or_default();
            for &v in g.successors(p) {
                if class[v as usize] != UNSEEN {
                    continue;
                }
                if !is_typed(v) {
                    nearest_closure[v as usize] =
                        if a.block(v).is_some_and(|b| b.header.tag == ocaml::CLOSURE_TAG) { v } else { nearest_closure[p as usize] };
                }
                class[v as usize] = if is_typed(v) {
                    TYPED
                } else if from == TYPED {
                    // The field of p that points at v (the first one), for its label.
                    let addr = a.address(v).unwrap_or(0);
                    let i = fields.iter().position(|&f| f == addr).unwrap_or(0);
                    count_gate(gate_class(&mut classes, v, Holder::Typed(p, i)), v)
                } else {
                    from
                };
                queue.push_back(v);
            }
        }
    }

    // Totals per class and per detail.
    let (mut typed_bytes, mut untyped_bytes) = (0u64, 0u64);
    let mut per_detail: HashMap<u32, (u64, u64)> = HashMap::new(); // objects, bytes
    for v in 0..nodes as u32 {
        let c = class[v as usize];
        if c == UNSEEN {
            continue;
        }
        let bytes = a.freeable(v);
        if c == TYPED {
            typed_bytes += bytes;
            continue;
        }
        untyped_bytes += bytes;
        let e = per_detail.entry(c).or_default();
        e.0 += 1;
        e.1 += bytes;
    }
    let reachable = a.reachable_bytes().max(1);
    // The walk counts typed blocks in static data too, which reachable bytes leave out.
    let typed_static: u64 = (0..nodes as u32).filter(|&v| is_typed(v) && a.freeable(v) == 0).map(|v| a.shallow(v)).sum();
    println!("{path}");
    println!(
        "reachable {} bytes; typed (walk) {} ({:.1}%), of which static {}; typed (this search) {}; untyped {} ({:.1}%)",
        a.reachable_bytes(),
        typing.typed_bytes,
        100.0 * typing.typed_bytes as f64 / reachable as f64,
        typed_static,
        typed_bytes,
        untyped_bytes,
        100.0 * untyped_bytes as f64 / reachable as f64
    );
    let mut per_class: HashMap<&str, (u64, u64, u64)> = HashMap::new();
    for (&c, &(objects, bytes)) in &per_detail {
        let name = classes.names[c as usize].split('\t').next().unwrap();
        let e = per_class.entry(name).or_default();
        e.0 += objects;
        e.1 += bytes;
        e.2 += 1;
    }
    let mut sorted: Vec<_> = per_class.into_iter().collect();
    sorted.sort_by_key(|x| std::cmp::Reverse(x.1 .1));
    println!("\n{:>10} {:>12} {:>6} {:>8}  class", "objects", "bytes", "%", "gates");
    for (name, (objects, bytes, details)) in &sorted {
        println!("{objects:>10} {bytes:>12} {:>5.1}% {details:>8}  {name}", 100.0 * *bytes as f64 / reachable as f64);
    }
    for (name, _) in &sorted {
        let mut details: Vec<(&str, u32, (u64, u64))> = per_detail
            .iter()
            .filter(|(&c, _)| classes.names[c as usize].split('\t').next() == Some(name))
            .map(|(&c, &t)| (classes.names[c as usize].split('\t').nth(1).unwrap_or(""), c, t))
            .collect();
        details.sort_by_key(|x| std::cmp::Reverse(x.2 .1));
        println!("\n== {name}: the largest of {} (objects, bytes, % of reachable, gates, mean gate words)", details.len());
        for (detail, c, (objects, bytes)) in details.iter().take(limit) {
            let (n, words) = gate_sizes.get(c).copied().unwrap_or((0, 0));
            let mean = if n == 0 { 0.0 } else { words as f64 / n as f64 };
            let at = example.get(c).map_or(String::new(), |a| format!(" (e.g. {a:#x})"));
            println!("{objects:>10} {bytes:>12} {:>5.1}% {n:>7} {mean:>6.1}  {detail}{at}", 100.0 * *bytes as f64 / reachable as f64);
        }
    }
    // Untyped bytes by the function of the nearest closure above them.
    let mut by_function: HashMap<String, (u64, u64, u64)> = HashMap::new(); // closures, objects, bytes
    let mut below_closures = 0u64;
    for v in 0..nodes as u32 {
        let c = nearest_closure[v as usize];
        if c == UNSEEN || class[v as usize] == TYPED || class[v as usize] == UNSEEN {
            continue;
        }
        let e = by_function.entry(closure_symbol(c)).or_default();
        e.0 += u64::from(c == v);
        e.1 += 1;
        e.2 += a.freeable(v);
        below_closures += a.freeable(v);
    }
    let mut functions: Vec<_> = by_function.into_iter().collect();
    functions.sort_by_key(|x| std::cmp::Reverse(x.1 .2));
    println!(
        "\n== untyped bytes below a closure (the nearest one on the path, the closure included): {} bytes, {:.1}% of reachable, in {} functions",
        below_closures,
        100.0 * below_closures as f64 / reachable as f64,
        functions.len()
    );
    println!("{:>10} {:>10} {:>12} {:>6}  function", "closures", "objects", "bytes", "%");
    for (f, (closures, objects, bytes)) in functions.iter().take(limit) {
        println!("{closures:>10} {objects:>10} {bytes:>12} {:>5.1}%  {f}", 100.0 * *bytes as f64 / reachable as f64);
    }
    Ok(())
}

/// What holds a gate: field `i` of a typed block, or a root record (its label and kind).
enum Holder {
    Typed(u32, usize),
    Root(String, RootKind),
}
