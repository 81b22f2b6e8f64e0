//! Whether a unit's field names agree with its module block in the snapshot (issue 53: "mismatches
//! are alarms"). A `.cmt` of another build, or an interface read in the wrong order, names fields
//! with identifiers whose types the values there contradict: an immediate where the type has only
//! blocks, a record of three fields where the type says one, a string where it says a closure.
//! One contradiction makes every name of the unit suspect, so the unit loses its field names
//! (it keeps its types, which do not depend on the fields' order) rather than keeping wrong ones.
//!
//! Only the module block's own fields are checked, each against the shape its type gives at the
//! top (tag, size, immediate or pointer): deeper in the heap a program may store what its types
//! do not say (`Obj.magic`), and that says nothing of the unit's names. A field still holding
//! the value a module block starts with (its unit not yet initialised that far), or an empty
//! block, is no evidence.

use crate::model::Field;
use crate::types::{Shape, TypeEnv};
use heapsnap_format::Snapshot;
use heapsnap_values::{self as ocaml, HeaderFormat};
use std::collections::BTreeMap;

/// A field whose value its name's type or kind rules out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contradiction {
    pub index: usize,
    pub path: String,
    /// What the name says the value is (`a record of 3 fields`, `a closure`).
    pub expected: String,
    /// What the field holds (`an immediate 5`, `a block of tag 0 and 1 field`).
    pub found: String,
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "field {} `{}` should hold {} but holds {}", self.index, self.path, self.expected, self.found)
    }
}

/// Each unit's module block in the snapshot, by unit name: its fields' values, read where the
/// snapshot holds the block (a block it does not hold is left out).
pub fn module_blocks(snap: &Snapshot) -> BTreeMap<String, Vec<u64>> {
    let format = HeaderFormat { reserved_bits: snap.metadata().reserved_header_bits };
    let mut blocks = BTreeMap::new();
    for r in snap.roots().iter().filter(|r| !r.is_binding()) {
        let Some((unit, Some(start))) = crate::find::module_block_of(snap, r) else { continue };
        if blocks.contains_key(unit) {
            continue;
        }
        let Some(header_at) = start.checked_sub(8) else { continue };
        let Some(region) = snap.region_of(header_at) else { continue };
        let Some(header) = region.word_at(header_at) else { continue };
        let size = format.wosize(header).min(1 << 20);
        let fields: Option<Vec<u64>> = (0..size).map(|i| region.word_at(start + 8 * i)).collect();
        if let Some(fields) = fields {
            blocks.insert(unit.to_string(), fields);
        }
    }
    blocks
}

/// What a value is at the top, as far as the snapshot shows it.
enum Seen {
    Immediate(i64),
    Block {
        tag: u8,
        size: u64,
    },
    /// A pointer outside the snapshot's regions (code, data it did not copy): no evidence.
    Elsewhere,
}

fn seen(snap: &Snapshot, format: HeaderFormat, value: u64) -> Seen {
    if !ocaml::is_pointer(value) {
        return Seen::Immediate(value as i64 >> 1);
    }
    let header = value.checked_sub(8).and_then(|h| snap.region_of(h).and_then(|r| r.word_at(h)));
    match header {
        Some(h) => Seen::Block { tag: format.tag(h), size: format.wosize(h) },
        None => Seen::Elsewhere,
    }
}

fn found(seen: &Seen) -> String {
    match seen {
        Seen::Immediate(n) => format!("the immediate {n}"),
        Seen::Block { tag, size } => format!("a block of tag {tag} and {size} fields"),
        Seen::Elsewhere => "a pointer".into(),
    }
}

/// The values a module block's field holds before the unit's initialisation stores into it
/// (`()`, or a null word): no evidence either way.
fn not_yet_stored(value: u64) -> bool {
    value == 1 || value == 0
}

/// An empty block (an atom) is a value of every type that has blocks, and what `Obj.new_block 0
/// 0` makes of a dummy (`CamlinternalOO.dummy_met`): no evidence either way.
fn empty_block(seen: &Seen) -> bool {
    matches!(seen, Seen::Block { size: 0, .. })
}

/// The contradictions between `fields` (a unit's names, in the compiler's order) and the values
/// of its module block.
pub fn contradictions(snap: &Snapshot, env: &TypeEnv, fields: &[Field], values: &[u64]) -> Vec<Contradiction> {
    let format = HeaderFormat { reserved_bits: snap.metadata().reserved_header_bits };
    let mut found_wrong = Vec::new();
    for (index, (field, &value)) in fields.iter().zip(values).enumerate() {
        if not_yet_stored(value) {
            continue;
        }
        let seen = seen(snap, format, value);
        if empty_block(&seen) {
            continue;
        }
        let expected = match field.kind.as_str() {
            // A submodule or functor, a class: a block or a closure, never an immediate.
            "module" | "class" => matches!(seen, Seen::Immediate(_)).then(|| "a block (a module)".to_string()),
            // An exception's constructor: an object-tagged block.
            "exception" => match seen {
                Seen::Immediate(_) => Some("an exception constructor (a block of tag 248)".into()),
                Seen::Block { tag, .. } if tag != ocaml::OBJECT_TAG => Some("an exception constructor (a block of tag 248)".into()),
                _ => None,
            },
            "value" => field.ty.as_ref().and_then(|ty| misfit(env, &env.shape(ty), &seen, 0)),
            _ => None,
        };
        if let Some(expected) = expected {
            found_wrong.push(Contradiction { index, path: field.path.clone(), expected, found: found(&seen) });
        }
    }
    found_wrong
}

/// What `shape` says the value must be, when `seen` is not that; `None` when it fits or the
/// snapshot cannot tell.
fn misfit(env: &TypeEnv, shape: &Shape, seen: &Seen, depth: usize) -> Option<String> {
    let block = |want_tag: &dyn Fn(u8, u64) -> bool, what: &str| -> Option<String> {
        match *seen {
            Seen::Immediate(_) => Some(what.to_string()),
            Seen::Block { tag, size } if !want_tag(tag, size) => Some(what.to_string()),
            _ => None,
        }
    };
    match shape {
        Shape::Immediate => matches!(seen, Seen::Block { .. } | Seen::Elsewhere).then(|| "an immediate".to_string()),
        Shape::Float => block(&|t, _| t == ocaml::DOUBLE_TAG, "a boxed float"),
        Shape::String => block(&|t, _| t == ocaml::STRING_TAG, "a string"),
        Shape::Custom(_) => block(&|t, _| t == ocaml::CUSTOM_TAG, "a custom block"),
        Shape::FloatArray => block(&|t, s| t == ocaml::DOUBLE_ARRAY_TAG || s == 0, "a float array"),
        Shape::Array(_) => block(&|t, s| t == 0 || t == ocaml::DOUBLE_ARRAY_TAG || s == 0, "an array"),
        Shape::Fields(f) => {
            let n = f.len() as u64;
            block(&|t, s| t == 0 && s == n, &format!("a block of tag 0 and {n} fields"))
        }
        Shape::FloatRecord(l) => {
            let n = l.len() as u64;
            block(&|t, s| t == ocaml::DOUBLE_ARRAY_TAG && s == n, &format!("a float record of {n} fields"))
        }
        Shape::Variant { constants, blocks, .. } => match *seen {
            Seen::Immediate(n) if n < 0 || n as usize >= constants.len() => {
                Some(format!("one of {} constant constructors or a block", constants.len()))
            }
            Seen::Block { tag, size } if blocks.get(tag as usize).is_none_or(|(_, f)| f.len() as u64 != size) => {
                Some("a block of one of its constructors".to_string())
            }
            _ => None,
        },
        Shape::PolyVariant(_) => block(&|t, s| t == 0 && s == 2, "a polymorphic variant").filter(|_| !matches!(seen, Seen::Immediate(_))),
        Shape::Object => block(&|t, _| t == ocaml::OBJECT_TAG, "an object"),
        Shape::Function | Shape::Closure { .. } => block(&|t, _| t == ocaml::CLOSURE_TAG || t == ocaml::INFIX_TAG, "a closure"),
        Shape::Package(p) => {
            let n = p.fields.len() as u64;
            block(&|t, s| t == 0 && s == n, &format!("a module of {n} fields"))
        }
        Shape::Unboxed(inner) if depth < 8 => misfit(env, &env.shape(inner), seen, depth + 1),
        // A lazy value may be forced into anything; unknown types say nothing.
        Shape::Unboxed(_) | Shape::Lazy(_) | Shape::Unknown => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Program, Ty};

    fn misfits(shape: Shape, seen: Seen) -> Option<String> {
        misfit(&TypeEnv::new(&Program::default()), &shape, &seen, 0)
    }

    fn record(n: usize) -> Shape {
        Shape::Fields((0..n).map(|i| (Some(format!("f{i}")), Ty::Unknown)).collect())
    }

    #[test]
    fn a_value_its_type_rules_out_is_a_contradiction() {
        assert_eq!(misfits(Shape::Immediate, Seen::Block { tag: 0, size: 2 }).as_deref(), Some("an immediate"));
        assert_eq!(misfits(record(3), Seen::Block { tag: 0, size: 1 }).as_deref(), Some("a block of tag 0 and 3 fields"));
        assert_eq!(misfits(record(3), Seen::Immediate(7)).as_deref(), Some("a block of tag 0 and 3 fields"));
        assert_eq!(misfits(Shape::String, Seen::Block { tag: ocaml::CLOSURE_TAG, size: 3 }).as_deref(), Some("a string"));
        assert_eq!(misfits(Shape::Function, Seen::Block { tag: ocaml::STRING_TAG, size: 1 }).as_deref(), Some("a closure"));
        let option =
            Shape::Variant { constants: vec!["None".into()], blocks: vec![("Some".into(), vec![(None, Ty::Unknown)])], reveals: vec![] };
        assert!(misfits(option.clone(), Seen::Immediate(1)).is_some(), "None is 0: 1 is no constructor of an option");
        assert!(misfits(option.clone(), Seen::Block { tag: 1, size: 1 }).is_some(), "an option has one block constructor");
    }

    #[test]
    fn values_its_type_allows_or_the_snapshot_cannot_tell_are_none() {
        assert_eq!(misfits(Shape::Immediate, Seen::Immediate(42)), None);
        assert_eq!(misfits(record(3), Seen::Block { tag: 0, size: 3 }), None);
        assert_eq!(misfits(record(3), Seen::Elsewhere), None);
        assert_eq!(misfits(Shape::Function, Seen::Block { tag: ocaml::INFIX_TAG, size: 2 }), None, "a mutually recursive function");
        assert_eq!(
            misfits(Shape::Array(Ty::Unknown), Seen::Block { tag: ocaml::DOUBLE_ARRAY_TAG, size: 4 }),
            None,
            "'a array may hold floats"
        );
        let option =
            Shape::Variant { constants: vec!["None".into()], blocks: vec![("Some".into(), vec![(None, Ty::Unknown)])], reveals: vec![] };
        assert_eq!(misfits(option.clone(), Seen::Immediate(0)), None);
        assert_eq!(misfits(option, Seen::Block { tag: 0, size: 1 }), None);
        assert_eq!(misfits(Shape::Unknown, Seen::Immediate(3)), None);
        assert_eq!(misfits(Shape::Lazy(Ty::Unknown), Seen::Immediate(3)), None, "a forced lazy value is anything");
        assert!(empty_block(&Seen::Block { tag: 0, size: 0 }) && !empty_block(&Seen::Immediate(0)));
        assert!(not_yet_stored(1) && not_yet_stored(0) && !not_yet_stored(3));
    }
}
