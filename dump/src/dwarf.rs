//! Structure layouts and static variables from the executable's DWARF, looked up by name, so
//! that no offset of the OCaml runtime's structures is hard-coded here.

use crate::elf::Executable;
use crate::error::{DumpError, Result};
use gimli::{AttributeValue, EndianSlice, LittleEndian};
use std::collections::HashMap;

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// A type, by its offset in `.debug_info`.
type TypeRef = usize;

#[derive(Clone, Debug)]
struct Member {
    name: Option<String>,
    offset: u64,
    ty: Option<TypeRef>,
    /// For a bit field: (bit offset from the start of the struct, width in bits).
    bits: Option<(u64, u64)>,
}

#[derive(Clone, Debug)]
enum TypeNode {
    /// A struct or union.
    Record {
        size: Option<u64>,
        members: Vec<Member>,
    },
    /// typedef, const, volatile, _Atomic, restrict: the same layout as the target.
    Alias {
        target: Option<TypeRef>,
    },
    Pointer,
    Base {
        size: Option<u64>,
    },
    Array {
        element: Option<TypeRef>,
        count: Option<u64>,
    },
    Other {
        size: Option<u64>,
    },
}

/// A variable with a static address.
#[derive(Clone, Debug)]
pub struct Variable {
    /// Name of the compilation unit that defines it (e.g. "runtime/shared_heap.c").
    pub unit: String,
    /// Link-time address.
    pub address: u64,
    ty: Option<TypeRef>,
}

/// What the executable's DWARF says about types and variables.
pub struct TypeIndex {
    nodes: HashMap<TypeRef, TypeNode>,
    /// struct/union tags and typedef names to type refs (definitions only).
    named: HashMap<String, Vec<TypeRef>>,
    variables: HashMap<String, Vec<Variable>>,
    /// Address ranges of compilation units, sorted: (begin, end, index in `unit_names`).
    unit_ranges: Vec<(u64, u64, usize)>,
    unit_names: Vec<String>,
}

/// The layout of one member, possibly nested (`a.b.c`).
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub offset: u64,
    pub ty: Option<usize>,
}

impl TypeIndex {
    pub fn load(exe: &Executable) -> Result<TypeIndex> {
        if !exe.has_dwarf() {
            return Err(DumpError::NoDebugInfo { path: exe.path.clone() });
        }
        let sections: HashMap<&str, std::borrow::Cow<'_, [u8]>> = [
            ".debug_info",
            ".debug_abbrev",
            ".debug_str",
            ".debug_line_str",
            ".debug_str_offsets",
            ".debug_addr",
            ".debug_rnglists",
            ".debug_ranges",
            ".debug_line",
        ]
        .into_iter()
        .filter_map(|n| exe.debug_section_data(n).map(|b| (n, b)))
        .collect();
        let dwarf = gimli::Dwarf::load(|id| -> std::result::Result<Reader<'_>, gimli::Error> {
            let bytes = sections.get(id.name()).map(|b| &b[..]).unwrap_or(&[]);
            Ok(EndianSlice::new(bytes, LittleEndian))
        })
        .map_err(|e| DumpError::Dwarf(e.to_string()))?;
        let mut index = TypeIndex {
            nodes: HashMap::new(),
            named: HashMap::new(),
            variables: HashMap::new(),
            unit_ranges: Vec::new(),
            unit_names: Vec::new(),
        };
        let mut units = dwarf.units();
        while let Some(header) = units.next().map_err(|e| DumpError::Dwarf(e.to_string()))? {
            let unit = dwarf.unit(header).map_err(|e| DumpError::Dwarf(e.to_string()))?;
            index.load_unit(&dwarf, &unit).map_err(|e| DumpError::Dwarf(e.to_string()))?;
            if let (Some(name), Ok(mut ranges)) = (unit.name, dwarf.unit_ranges(&unit)) {
                let id = index.unit_names.len();
                index.unit_names.push(String::from_utf8_lossy(name.slice()).into_owned());
                while let Ok(Some(r)) = ranges.next() {
                    if r.begin < r.end {
                        index.unit_ranges.push((r.begin, r.end, id));
                    }
                }
            }
        }
        index.unit_ranges.sort_unstable();
        Ok(index)
    }

    fn load_unit(&mut self, dwarf: &gimli::Dwarf<Reader<'_>>, unit: &gimli::Unit<Reader<'_>>) -> gimli::Result<()> {
        let global = |o: gimli::UnitOffset| -> Option<TypeRef> { o.to_debug_info_offset(&unit.header).map(|o| o.0) };
        let type_of = |e: &gimli::DebuggingInformationEntry<Reader<'_>>| -> Option<TypeRef> {
            match e.attr_value(gimli::DW_AT_type)? {
                AttributeValue::UnitRef(o) => global(o),
                AttributeValue::DebugInfoRef(o) => Some(o.0),
                _ => None,
            }
        };
        let name_of = |e: &gimli::DebuggingInformationEntry<Reader<'_>>| -> Option<String> {
            let v = e.attr_value(gimli::DW_AT_name)?;
            let s = dwarf.attr_string(unit, v).ok()?;
            Some(String::from_utf8_lossy(s.slice()).into_owned())
        };
        let udata =
            |e: &gimli::DebuggingInformationEntry<Reader<'_>>, at| -> Option<u64> { e.attr_value(at).and_then(|v| v.udata_value()) };
        let unit_name = unit.name.map(|n| String::from_utf8_lossy(n.slice()).into_owned()).unwrap_or_default();

        // The record (struct/union) or array each depth belongs to, to attach members/subranges.
        let mut parents: Vec<Option<TypeRef>> = Vec::new();
        let mut declarations: HashMap<TypeRef, (Option<String>, Option<TypeRef>)> = HashMap::new();
        let mut entries = unit.entries();
        while let Some(entry) = entries.next_dfs()? {
            let depth = entry.depth().max(0) as usize;
            parents.truncate(depth);
            let parent = parents.last().copied().flatten();
            let here = global(entry.offset());
            let mut this_parent = None;
            match entry.tag() {
                gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => {
                    let name = name_of(entry);
                    let declaration = entry.attr_value(gimli::DW_AT_declaration).is_some();
                    if let Some(r) = here {
                        self.nodes.insert(r, TypeNode::Record { size: udata(entry, gimli::DW_AT_byte_size), members: Vec::new() });
                        if let (Some(n), false) = (name, declaration) {
                            self.named.entry(n).or_default().push(r);
                        }
                        this_parent = Some(r);
                    }
                }
                gimli::DW_TAG_member => {
                    if let Some(TypeNode::Record { members, .. }) = parent.and_then(|p| self.nodes.get_mut(&p)) {
                        let bit_offset = udata(entry, gimli::DW_AT_data_bit_offset);
                        let bits = bit_offset.zip(udata(entry, gimli::DW_AT_bit_size));
                        members.push(Member {
                            name: name_of(entry),
                            offset: udata(entry, gimli::DW_AT_data_member_location).or(bit_offset.map(|b| b / 8)).unwrap_or(0),
                            ty: type_of(entry),
                            bits,
                        });
                    }
                }
                gimli::DW_TAG_typedef => {
                    if let Some(r) = here {
                        self.nodes.insert(r, TypeNode::Alias { target: type_of(entry) });
                        if let Some(n) = name_of(entry) {
                            if type_of(entry).is_some() {
                                self.named.entry(n).or_default().push(r);
                            }
                        }
                    }
                }
                gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type | gimli::DW_TAG_atomic_type | gimli::DW_TAG_restrict_type => {
                    if let Some(r) = here {
                        self.nodes.insert(r, TypeNode::Alias { target: type_of(entry) });
                    }
                }
                gimli::DW_TAG_pointer_type => {
                    if let Some(r) = here {
                        self.nodes.insert(r, TypeNode::Pointer);
                    }
                }
                gimli::DW_TAG_base_type | gimli::DW_TAG_enumeration_type => {
                    if let Some(r) = here {
                        self.nodes.insert(r, TypeNode::Base { size: udata(entry, gimli::DW_AT_byte_size) });
                    }
                }
                gimli::DW_TAG_array_type => {
                    if let Some(r) = here {
                        self.nodes.insert(r, TypeNode::Array { element: type_of(entry), count: None });
                        this_parent = Some(r);
                    }
                }
                gimli::DW_TAG_subrange_type => {
                    if let Some(TypeNode::Array { count, .. }) = parent.and_then(|p| self.nodes.get_mut(&p)) {
                        if count.is_none() {
                            *count = udata(entry, gimli::DW_AT_count).or_else(|| udata(entry, gimli::DW_AT_upper_bound).map(|u| u + 1));
                        }
                    }
                }
                gimli::DW_TAG_variable => {
                    // A definition may only point (DW_AT_specification) to a declaration
                    // that carries the name and the type.
                    let spec = match entry.attr_value(gimli::DW_AT_specification) {
                        Some(AttributeValue::UnitRef(o)) => global(o).and_then(|o| declarations.get(&o).cloned()),
                        _ => None,
                    };
                    let name = name_of(entry).or_else(|| spec.as_ref().and_then(|s| s.0.clone()));
                    let ty = type_of(entry).or_else(|| spec.as_ref().and_then(|s| s.1));
                    if entry.attr_value(gimli::DW_AT_declaration).is_some() {
                        if let Some(r) = here {
                            declarations.insert(r, (name.clone(), ty));
                        }
                    }
                    if let (Some(name), Some(AttributeValue::Exprloc(expr))) = (name, entry.attr_value(gimli::DW_AT_location)) {
                        if let Some(address) = static_address(expr, unit.encoding()) {
                            self.variables.entry(name).or_default().push(Variable { unit: unit_name.clone(), address, ty });
                        }
                    }
                }
                _ => {
                    if let Some(r) = here {
                        self.nodes.entry(r).or_insert_with(|| TypeNode::Other { size: udata(entry, gimli::DW_AT_byte_size) });
                    }
                }
            }
            parents.push(this_parent);
        }
        Ok(())
    }

    /// Follows typedefs and qualifiers.
    fn strip(&self, mut ty: TypeRef) -> TypeRef {
        for _ in 0..32 {
            match self.nodes.get(&ty) {
                Some(TypeNode::Alias { target: Some(t) }) => ty = *t,
                _ => break,
            }
        }
        ty
    }

    /// The definition of struct/union/typedef `name` (one with members, if several).
    pub fn type_named(&self, name: &str) -> Result<usize> {
        let candidates = self.named.get(name).ok_or_else(|| DumpError::MissingType { name: name.to_string() })?;
        candidates
            .iter()
            .map(|&t| self.strip(t))
            .max_by_key(|t| match self.nodes.get(t) {
                Some(TypeNode::Record { members, .. }) => members.len(),
                _ => 0,
            })
            .ok_or_else(|| DumpError::MissingType { name: name.to_string() })
    }

    /// Size in bytes of a type.
    pub fn size_of(&self, ty: usize) -> Option<u64> {
        match self.nodes.get(&self.strip(ty))? {
            TypeNode::Record { size, .. } | TypeNode::Base { size } | TypeNode::Other { size } => *size,
            TypeNode::Pointer => Some(8),
            TypeNode::Array { element, count } => Some(self.size_of((*element)?)? * (*count)?),
            TypeNode::Alias { .. } => None,
        }
    }

    /// Size in bytes of struct/typedef `name`.
    pub fn size_of_named(&self, name: &str) -> Result<u64> {
        let ty = self.type_named(name)?;
        self.size_of(ty).ok_or_else(|| DumpError::MissingType { name: format!("{name} (with a size)") })
    }

    /// Number of elements of an array type.
    pub fn array_len(&self, ty: usize) -> Option<u64> {
        match self.nodes.get(&self.strip(ty))? {
            TypeNode::Array { count, .. } => *count,
            _ => None,
        }
    }

    /// Whether a type is a pointer (through typedefs and qualifiers).
    pub fn is_pointer(&self, ty: usize) -> bool {
        matches!(self.nodes.get(&self.strip(ty)), Some(TypeNode::Pointer))
    }

    /// Element type of an array type.
    pub fn array_element(&self, ty: usize) -> Option<usize> {
        match self.nodes.get(&self.strip(ty))? {
            TypeNode::Array { element, .. } => *element,
            _ => None,
        }
    }

    /// Offset and type of member `path` (dotted for nested members) of type `ty`. Members of
    /// anonymous nested structs and unions are found as if they were direct members.
    pub fn field_of(&self, ty: usize, ty_name: &str, path: &str) -> Result<Field> {
        let missing = || DumpError::MissingMember { ty: ty_name.to_string(), member: path.to_string() };
        let mut current = Field { offset: 0, ty: Some(ty) };
        for part in path.split('.') {
            let record = self.strip(current.ty.ok_or_else(missing)?);
            let found = self.find_member(record, part, 0).ok_or_else(missing)?;
            current = Field { offset: current.offset + found.offset, ty: found.ty };
        }
        Ok(current)
    }

    fn find_member(&self, record: TypeRef, name: &str, depth: usize) -> Option<Field> {
        let TypeNode::Record { members, .. } = self.nodes.get(&record)? else { return None };
        if let Some(m) = members.iter().find(|m| m.name.as_deref() == Some(name)) {
            return Some(Field { offset: m.offset, ty: m.ty });
        }
        if depth > 4 {
            return None;
        }
        members.iter().filter(|m| m.name.is_none()).find_map(|m| {
            let inner = self.find_member(self.strip(m.ty?), name, depth + 1)?;
            Some(Field { offset: m.offset + inner.offset, ty: inner.ty })
        })
    }

    /// (bit offset from the start of the struct, width in bits) of bit-field member `member` of
    /// struct/typedef `ty_name` (a direct member, as DWARF 4 and 5 describe them).
    pub fn bit_field(&self, ty_name: &str, member: &str) -> Result<(u64, u64)> {
        let missing = || DumpError::MissingMember { ty: ty_name.to_string(), member: format!("{member} (a bit field)") };
        let ty = self.type_named(ty_name)?;
        let TypeNode::Record { members, .. } = self.nodes.get(&ty).ok_or_else(missing)? else { return Err(missing()) };
        members.iter().find(|m| m.name.as_deref() == Some(member)).and_then(|m| m.bits).ok_or_else(missing)
    }

    /// Offset of member `path` of struct/typedef `ty_name`.
    pub fn offset_of(&self, ty_name: &str, path: &str) -> Result<u64> {
        let ty = self.type_named(ty_name)?;
        Ok(self.field_of(ty, ty_name, path)?.offset)
    }

    /// The members of a struct, with their offsets (empty if not a struct).
    pub fn members(&self, ty: usize) -> Vec<(String, u64)> {
        match self.nodes.get(&self.strip(ty)) {
            Some(TypeNode::Record { members, .. }) => members.iter().filter_map(|m| Some((m.name.clone()?, m.offset))).collect(),
            _ => Vec::new(),
        }
    }

    /// The static variable `name`, preferring the one defined in a unit whose name ends with
    /// `unit_suffix` (several C files may have file-local variables of the same name).
    pub fn variable(&self, name: &str, unit_suffix: &str) -> Result<&Variable> {
        let all = self.variables.get(name).ok_or_else(|| DumpError::MissingVariable { name: name.to_string() })?;
        all.iter()
            .find(|v| v.unit.ends_with(unit_suffix))
            .or_else(|| (all.len() == 1).then(|| &all[0]))
            .ok_or_else(|| DumpError::MissingVariable { name: format!("{name} (in {unit_suffix})") })
    }

    /// Offset of member `path` in the type of variable `var`.
    pub fn variable_field(&self, var: &Variable, var_name: &str, path: &str) -> Result<Field> {
        let ty = var.ty.ok_or_else(|| DumpError::MissingType { name: format!("type of {var_name}") })?;
        self.field_of(ty, var_name, path)
    }

    pub fn variable_type(&self, var: &Variable) -> Option<usize> {
        var.ty
    }

    /// The compilation units' address ranges: (begin, end, unit name), sorted.
    pub fn code_units(&self) -> Vec<(u64, u64, String)> {
        self.unit_ranges.iter().map(|&(b, e, i)| (b, e, self.unit_names[i].clone())).collect()
    }
}

/// The address of a `DW_OP_addr ADDR` location.
fn static_address(expr: gimli::Expression<Reader<'_>>, encoding: gimli::Encoding) -> Option<u64> {
    let mut ops = expr.operations(encoding);
    match ops.next().ok()?? {
        gimli::Operation::Address { address } => Some(address),
        _ => None,
    }
}
