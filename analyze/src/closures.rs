//! Which function each closure runs, and so what its environment holds (issue 26).
//!
//! A closure block starts with a code pointer and its closure information: the arity and where
//! the environment starts (OCaml 4.14 and 5.x alike). A function of one argument is its own
//! code pointer; a function of more has `caml_curryN` (or `caml_tuplifyN`) there and its own
//! code in field 2. A partial application is a closure of `caml_curryN_K`: its environment
//! holds the K-th argument and the closure it extends, back to the function's own closure
//! (`Cmm_helpers.intermediate_curry_functions`).
//!
//! The function is found by where its code starts: the line table's first row at its entry is
//! the function's own location, and the unit its symbol names has the `.cmt` reader's entry for
//! that place. Without symbols or line tables, no closure is typed.

use crate::blocks::{BlockMap, BlockRef, NodeId};
use crate::facts::HeapFacts;
use crate::names::Names;
use heapsnap_format::Snapshot;
use heapsnap_names::model::ClosureTy;
use heapsnap_names::{Ty, TypeEnv};
use heapsnap_values as ocaml;
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

/// Partial applications are chains at most this long (OCaml's functions take at most 126
/// arguments): a longer chain is not a partial application.
const MAX_CHAIN: usize = 128;

/// The reachable closure blocks whose function is known: their types, and each block's
/// address with its type's index.
#[derive(Default)]
pub struct TypedClosures {
    pub types: Vec<Ty>,
    pub blocks: Vec<(u64, u32)>,
}

/// The closure information word: (arity, where the environment starts).
pub fn closure_info(word: u64) -> (i64, usize) {
    ((word as i64) >> 56, ((word << 8) >> 9) as usize)
}

/// `caml_curryN_K` -> (N, K): the code of a partial application holding K arguments of N.
fn curry_step(symbol: &str) -> Option<(u32, u32)> {
    let rest = symbol.strip_prefix("caml_curry")?;
    let (n, k) = rest.split_once('_')?;
    Some((n.parse().ok()?, k.parse().ok()?))
}

/// What a closure runs: a function's own code, or a partial application of one.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Runs {
    code: u64,
    applied: u32,
    arity: u32,
    env_start: u32,
    env_len: u32,
}

/// Every closure block with what it runs, and where those functions start: what the closures'
/// types are made from. It needs only the blocks and the snapshot (neither the dominators nor
/// the OCaml names), so the analysis makes it beside its dominators.
pub struct ClosureSweep {
    /// `(address, node, what it runs)`, in node order.
    found: Vec<Vec<(u64, NodeId, Runs)>>,
    /// Code address -> where its function was written ([`entry_locations`]).
    entries: FxHashMap<u64, (u32, u32, String)>,
}

impl ClosureSweep {
    /// The blocks swept once, region by region, in node order, rather than each closure's
    /// node looked up: a real program has hundreds of thousands of closures, and a lookup by
    /// node is a search. Each part of the sweep keeps the symbols of the code pointers it met
    /// (a program has thousands of functions, and a partial application's chain runs through
    /// closures of the same list). On every core, or on this thread only (beside the
    /// dominators, which would otherwise compete for the cores).
    pub fn of_blocks<'s>(snap: &'s Snapshot, blocks: &BlockMap<'s>, on_every_core: bool) -> ClosureSweep {
        let timer = crate::progress::PhaseTimer::start("closures");
        let mut regions: Vec<usize> = blocks.block_regions().collect();
        regions.sort_by_key(|&r| blocks.regions[r].nodes.start);
        let sweep = |(mut out, mut known): (Vec<_>, FxHashMap<u64, Option<&'s str>>), &r: &usize| {
            let mut symbol = |code: u64| *known.entry(code).or_insert_with(|| Names::symbol_in(snap, code));
            for b in blocks.region_blocks(r).filter(is_closure) {
                if let Some(runs) = runs_of(&|q| blocks.block_of_pointer(q), &b, &mut symbol) {
                    out.push((b.address, b.node, runs));
                }
            }
            (out, known)
        };
        let found = match on_every_core {
            true => regions.par_iter().fold(Default::default, sweep).map(|(out, _)| out).collect(),
            false => vec![regions.iter().fold(Default::default(), sweep).0],
        };
        timer.lap("what each runs");
        Self::with_entries(snap, found, &timer)
    }

    /// The same from a heap's facts, node by node (a heap without a block map).
    fn of_nodes<'s>(a: &(impl HeapFacts<'s> + ?Sized)) -> ClosureSweep {
        let timer = crate::progress::PhaseTimer::start("closures");
        let snap = a.snap();
        let mut known = FxHashMap::<u64, Option<&'s str>>::default();
        let mut symbol = |code: u64| *known.entry(code).or_insert_with(|| Names::symbol_in(snap, code));
        let found = (0..a.node_count() as NodeId)
            .filter_map(|v| a.block(v))
            .filter(is_closure)
            .filter_map(|b| Some((b.address, b.node, runs_of(&|q| a.block_of_pointer(q), &b, &mut symbol)?)))
            .collect();
        timer.lap("what each runs");
        Self::with_entries(snap, vec![found], &timer)
    }

    fn with_entries(snap: &Snapshot, found: Vec<Vec<(u64, NodeId, Runs)>>, timer: &crate::progress::PhaseTimer) -> ClosureSweep {
        let codes: FxHashSet<u64> = found.iter().flatten().map(|(_, _, r)| r.code).collect();
        let entries = entry_locations(snap, &codes);
        timer.lap("where their functions start (line tables)");
        ClosureSweep { found, entries }
    }
}

fn is_closure(b: &BlockRef<'_>) -> bool {
    b.header.tag == ocaml::CLOSURE_TAG && b.fields.len() >= 2
}

/// Every reachable closure whose function the snapshot's OCaml names know, with its type:
/// from `sweep` when the analysis made it, else from a sweep of its own.
pub fn typed_closures<'s>(a: &(impl HeapFacts<'s> + ?Sized), env: &TypeEnv, sweep: Option<ClosureSweep>) -> TypedClosures {
    let names = a.names();
    let ClosureSweep { found, entries } = match sweep {
        Some(sweep) => sweep,
        None => match a.block_map() {
            Some(blocks) => ClosureSweep::of_blocks(a.snap(), blocks, true),
            None => ClosureSweep::of_nodes(a),
        },
    };
    let timer = crate::progress::PhaseTimer::start("closures");
    let mut out = TypedClosures::default();
    let mut type_of: FxHashMap<Runs, Option<u32>> = FxHashMap::default();
    for &(address, node, runs) in found.iter().flatten() {
        if !entries.contains_key(&runs.code) || a.idom(node).is_none() {
            continue;
        }
        let index = *type_of.entry(runs).or_insert_with(|| {
            let ty = closure_type(env, &runs, entries.get(&runs.code)?, names.symbol(runs.code)?)?;
            out.types.push(ty);
            Some(out.types.len() as u32 - 1)
        });
        if let Some(index) = index {
            out.blocks.push((address, index));
        }
    }
    timer.lap(&format!("their types ({} closures, {} kinds)", out.blocks.len(), out.types.len()));
    out
}

/// The type of the closures that run `runs`, whose code starts at `entry` and is named `sym`.
fn closure_type(env: &TypeEnv, runs: &Runs, entry: &(u32, u32, String), sym: &str) -> Option<Ty> {
    let &(line, col, ref file) = entry;
    let (unit, f) = units_of(sym).into_iter().find_map(|u| Some((u, env.function(u, line, col)?)))?;
    // A partial application's argument must be one of the function's.
    if runs.applied > 0 && (runs.applied as usize > f.params.len() || runs.arity as usize > f.params.len()) {
        return None;
    }
    let what = f.name.as_deref().unwrap_or("fun");
    // A known function's partial application: the arguments it holds, and those it still takes.
    let (applied, arity) = match f.free.len().checked_sub(1).filter(|_| f.partial) {
        Some(given) => (given as u32, given as u32 + runs.arity),
        None => (runs.applied, runs.arity),
    };
    Some(Ty::Closure(Box::new(ClosureTy {
        unit: unit.to_string(),
        line,
        col,
        function: format!("{}.{what}", heapsnap_names::types::short_path(unit)),
        source: format!("{file}:{line}"),
        applied,
        arity,
        env_start: runs.env_start,
        env_len: runs.env_len,
    })))
}

/// What one closure block runs; `None` for closures heapsnap cannot read (an unnamed code
/// pointer, a broken chain of partial applications).
fn runs_of<'s>(
    block_of_pointer: &dyn Fn(u64) -> Option<BlockRef<'s>>,
    b: &BlockRef<'s>,
    symbol: &mut dyn FnMut(u64) -> Option<&'s str>,
) -> Option<Runs> {
    let (arity, env_start) = closure_info(b.fields[1]);
    let env_start32 = u32::try_from(env_start).ok()?;
    let env_len = u32::try_from(b.fields.len().checked_sub(env_start)?).ok()?;
    if let Some((n, k)) = symbol(b.fields[0]).and_then(curry_step) {
        // Back along the chain of partial applications to the function's own closure.
        let mut block = *b;
        for _ in 0..MAX_CHAIN {
            let (_, start) = closure_info(block.fields[1]);
            let previous = *block.fields.get(start + 1)?;
            block = block_of_pointer(previous).filter(|p| p.header.tag == ocaml::CLOSURE_TAG && p.fields.len() >= 3)?;
            if symbol(block.fields[0]).and_then(curry_step).is_none() {
                let (own_arity, _) = closure_info(block.fields[1]);
                return (own_arity == i64::from(n) && k < n).then_some(Runs {
                    code: block.fields[2],
                    applied: k,
                    arity: n,
                    env_start: env_start32,
                    env_len,
                });
            }
        }
        return None;
    }
    let code = match arity {
        1 => b.fields[0],
        // A function of several arguments, or a tupled one (`fun (k, v) -> ...`, arity -N,
        // `caml_tuplifyN` in field 0): its own code is in field 2, its environment as any
        // function's.
        n if !(-1..=1).contains(&n) => *b.fields.get(2)?,
        _ => return None,
    };
    Some(Runs { code, applied: 0, arity: arity.unsigned_abs() as u32, env_start: env_start32, env_len })
}

/// The units a function symbol may belong to: `camlFoo__Bar.f_12` (OCaml 5) names `Foo__Bar`;
/// `camlFoo__Bar__f_12` (4.14) any prefix before a `__`.
fn units_of(symbol: &str) -> Vec<&str> {
    let Some(name) = symbol.strip_prefix("caml") else { return Vec::new() };
    if let Some((unit, _)) = name.split_once('.') {
        return vec![unit];
    }
    name.match_indices("__").map(|(i, _)| &name[..i]).filter(|u| !u.is_empty()).collect()
}

/// For each code address, the first line-table row at it (line, 0-based column, file name):
/// where the function whose code starts there was written.
fn entry_locations(snap: &Snapshot, codes: &FxHashSet<u64>) -> FxHashMap<u64, (u32, u32, String)> {
    let mut out = FxHashMap::default();
    if codes.is_empty() {
        return out;
    }
    let bias = snap.load_bias();
    let Some(dwarf) = crate::names::dwarf(|name| snap.dwarf_section(name)) else { return out };
    let wanted: FxHashSet<u64> = codes.iter().map(|c| c.wrapping_sub(bias)).collect();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else { continue };
        let Some(program) = unit.line_program.clone() else { continue };
        let mut rows = program.rows();
        while let Ok(Some((header, row))) = rows.next_row() {
            let address = row.address();
            if !wanted.contains(&address) || out.contains_key(&address.wrapping_add(bias)) {
                continue;
            }
            let (Some(line), column) = (row.line(), row.column()) else { continue };
            let col = match column {
                gimli::ColumnType::LeftEdge => 0,
                gimli::ColumnType::Column(c) => c.get(),
            };
            let file = row
                .file(header)
                .and_then(|f| dwarf.attr_string(&unit, f.path_name()).ok())
                .map(|s| String::from_utf8_lossy(s.slice()).rsplit('/').next().unwrap_or_default().to_string())
                .unwrap_or_default();
            let (Ok(line), Ok(col)) = (u32::try_from(line.get()), u32::try_from(col)) else { continue };
            out.insert(address.wrapping_add(bias), (line, col, file));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closure_information_and_curry_symbols_read() {
        // arity 3, environment at field 3: (3 << 56) | (3 << 1) | 1
        assert_eq!(closure_info((3 << 56) | (3 << 1) | 1), (3, 3));
        assert_eq!(closure_info(((-2i64 as u64) << 56) | (5 << 1) | 1), (-2, 5));
        assert_eq!(curry_step("caml_curry5_4"), Some((5, 4)));
        assert_eq!(curry_step("caml_curry5"), None);
        assert_eq!(curry_step("caml_curry5_4_app"), None);
        assert_eq!(units_of("camlFoo__Bar.f_12"), vec!["Foo__Bar"]);
        assert_eq!(units_of("camlFoo__Bar__f_12"), vec!["Foo", "Foo__Bar"]);
    }
}
