//! Block tags (runtime/caml/mlvalues.h), the same in every OCaml 5 release.

pub const FORCING_TAG: u8 = 244;
pub const CONT_TAG: u8 = 245;
pub const LAZY_TAG: u8 = 246;
pub const CLOSURE_TAG: u8 = 247;
pub const OBJECT_TAG: u8 = 248;
pub const INFIX_TAG: u8 = 249;
pub const FORWARD_TAG: u8 = 250;
/// Tags at or above this one have no fields for the GC to scan.
pub const NO_SCAN_TAG: u8 = 251;
pub const ABSTRACT_TAG: u8 = 251;
pub const STRING_TAG: u8 = 252;
pub const DOUBLE_TAG: u8 = 253;
pub const DOUBLE_ARRAY_TAG: u8 = 254;
pub const CUSTOM_TAG: u8 = 255;

/// `CAML_EPHE_DATA_OFFSET` and `CAML_EPHE_FIRST_KEY` (field 0 is the runtime's link).
pub const EPHE_DATA_FIELD: usize = 1;
pub const EPHE_FIRST_KEY_FIELD: usize = 2;

/// A human name for a tag.
pub fn tag_name(tag: u8) -> &'static str {
    match tag {
        FORCING_TAG => "forcing",
        CONT_TAG => "continuation",
        LAZY_TAG => "lazy",
        CLOSURE_TAG => "closure",
        OBJECT_TAG => "object",
        INFIX_TAG => "infix",
        FORWARD_TAG => "forward",
        ABSTRACT_TAG => "abstract",
        STRING_TAG => "string",
        DOUBLE_TAG => "float",
        DOUBLE_ARRAY_TAG => "float_array",
        CUSTOM_TAG => "custom",
        _ => "block",
    }
}
