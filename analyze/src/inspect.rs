//! `inspect`: one object, its header, its fields resolved to names, its sizes and dominator.

use crate::analysed_heap::AnalysedHeap;
use crate::blocks::PointsTo;
use heapsnap_values as ocaml;
use serde::Serialize;

#[derive(Serialize, Clone, Debug)]
pub struct Field {
    pub index: usize,
    pub raw: String,
    /// `int`, `pointer`, `external`, `bad_pointer`, `code`, `closinfo`, `raw` (not scanned),
    /// `stack` (a continuation's stack), `weak` (an ephemeron key), `ephemeron_data`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The field's OCaml name, when the object's type names it (a record label, `[i]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Inspection {
    pub node: u32,
    pub address: String,
    pub region_kind: String,
    pub domain: Option<u16>,
    pub description: String,
    /// The object's OCaml type, when the snapshot's names give it (`Server.session`, `Cons :
    /// int list`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ocaml_type: Option<String>,
    pub header: String,
    pub tag: u8,
    pub wosize: u64,
    pub colour: ocaml::Colour,
    pub reserved: u32,
    pub shallow: u64,
    pub retained: u64,
    pub reachable: bool,
    pub immediate_dominator: Option<String>,
    pub roots: Vec<String>,
    pub fields: Vec<Field>,
    /// Fields beyond `max_fields` that were not listed.
    pub more_fields: u64,
    /// Objects that point here (at most 16).
    pub referrers: Vec<String>,
    /// Where the block was allocated, when statmemprof sampled it and its stack is known
    /// ([`crate::sites`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
}

/// A sampled block's allocation.
#[derive(Serialize, Clone, Debug)]
pub struct Allocation {
    /// `memtrace` or `callstack`.
    pub source: crate::sites::StackSource,
    pub samples: u64,
    pub sampling_rate: f64,
    /// The site: the innermost frame outside the standard library.
    pub site: String,
    /// Innermost first.
    pub stack: Vec<crate::sites::SiteFrame>,
}

impl Allocation {
    /// The allocation of `node`, if it is a sampled block with a stack.
    pub fn of(sites: &crate::sites::Sites, node: u32) -> Option<Allocation> {
        let b = sites.block_of(node)?;
        Some(Allocation {
            source: b.source,
            samples: b.samples,
            sampling_rate: b.sampling_rate,
            site: sites.site_frames(b, 1).first().map(|&f| sites.frames[f as usize].describe()).unwrap_or_default(),
            stack: sites.stack(b),
        })
    }
}

pub fn inspect<'s>(a: &impl AnalysedHeap<'s>, address: u64, max_fields: usize) -> Result<Inspection, crate::error::AnalyzeError> {
    let node = a.node_at(address)?;
    let b = a.block(node).ok_or(crate::error::AnalyzeError::NoBlockAt(address))?;
    let region = a.snap().region(b.region as usize);
    let h = b.header;
    let scanned_from = h.first_scanned_field(b.fields);
    let is_ephemeron = a.is_ephemeron(node);
    let node_name = |v: u64| -> (String, Option<String>) {
        match a.resolve(v) {
            PointsTo::Node(n) => ("pointer".into(), Some(format!("{v:#x} {}", a.describe(n)))),
            PointsTo::External => ("external".into(), a.names().symbol(v).map(str::to_string)),
            PointsTo::Bad(k) => ("bad_pointer".into(), Some(format!("{k:?}"))),
        }
    };
    let mut fields = Vec::new();
    for (i, &v) in b.fields.iter().enumerate().take(max_fields) {
        let (kind, value) = if h.tag == ocaml::CONT_TAG && i == 0 {
            ("stack".to_string(), Some(format!("stack at {:#x}", v & !1)))
        } else if is_ephemeron && i >= ocaml::EPHE_DATA_FIELD {
            let (k, val) = if ocaml::is_pointer(v) { node_name(v) } else { ("int".into(), Some(((v as i64) >> 1).to_string())) };
            let role = if i == ocaml::EPHE_DATA_FIELD { "ephemeron_data" } else { "weak" };
            (if k == "pointer" { role.to_string() } else { k }, val)
        } else if h.tag == ocaml::CLOSURE_TAG && scanned_from.is_some_and(|s| i < s) {
            if v & 1 == 1 && i > 1 && (v & 0xff) as u8 == ocaml::INFIX_TAG {
                ("infix_header".into(), Some(format!("offset {} words", a.layout().wosize(v))))
            } else if v & 1 == 1 {
                ("closinfo".into(), Some(format!("arity {} env at {}", ocaml::arity_closinfo(v), ocaml::start_env_closinfo(v))))
            } else {
                ("code".into(), Some(a.names().closure_function(v)))
            }
        } else if scanned_from.is_none_or(|s| i < s) {
            ("raw".into(), None)
        } else if v & 1 == 1 {
            ("int".into(), Some(((v as i64) >> 1).to_string()))
        } else if v == 0 {
            ("raw".into(), None)
        } else {
            node_name(v)
        };
        fields.push(Field { index: i, raw: format!("{v:#x}"), kind, value, name: a.field_label(node, i) });
    }
    let snap = a.snap();
    let roots = a.root_records(node).iter().filter_map(|&r| snap.roots().get(r as usize)).map(|rec| a.names().root_label(rec)).collect();
    let referrers = a.referrers(node, 16).into_iter().map(|u| a.with_address(u)).collect();
    Ok(Inspection {
        node,
        address: format!("{:#x}", b.address),
        region_kind: region.kind().label().to_string(),
        domain: (region.header.domain != heapsnap_format::NO_DOMAIN).then_some(region.header.domain),
        description: a.describe(node),
        ocaml_type: a.type_label(node),
        header: format!("{:#x}", h.raw),
        tag: h.tag,
        wosize: h.wosize,
        colour: h.colour,
        reserved: h.reserved,
        shallow: h.bytes(),
        retained: a.retained(node),
        reachable: a.is_reachable(node),
        immediate_dominator: a.idom(node).map(|d| a.with_address(d)),
        roots,
        more_fields: b.fields.len().saturating_sub(max_fields) as u64,
        fields,
        referrers,
        allocation: None,
    })
}
