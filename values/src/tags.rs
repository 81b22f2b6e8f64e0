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

/// The OCaml type of a custom block whose operations the runtime identifies by `identifier`
/// (`struct custom_operations`' first field: runtime/ints.c, io.c, bigarray.c, sync.c), for
/// the runtime's own custom blocks; `None` for another library's, which are named by their
/// identifier alone.
pub fn custom_type_name(identifier: &str) -> Option<&'static str> {
    Some(match identifier {
        "_i" => "int32",
        "_j" => "int64",
        "_n" => "nativeint",
        "_chan" => "in_channel or out_channel",
        "_bigarr02" => "Bigarray.Genarray.t",
        "_mutex" => "Mutex.t",
        "_condition" => "Condition.t",
        _ => return None,
    })
}

/// How a custom block is named: its OCaml type for the runtime's own (`int64 (custom _j)`), else
/// its operations' identifier (`custom _ssl_ctx`), `custom ?` when unknown.
pub fn custom_block_name(identifier: Option<&str>) -> String {
    match identifier {
        Some(id) => match custom_type_name(id) {
            Some(ty) => format!("{ty} (custom {id})"),
            None => format!("custom {id}"),
        },
        None => "custom ?".to_string(),
    }
}

#[cfg(test)]
mod custom_tests {
    #[test]
    fn the_runtimes_custom_blocks_carry_their_ocaml_types() {
        assert_eq!(super::custom_block_name(Some("_j")), "int64 (custom _j)");
        assert_eq!(super::custom_block_name(Some("_bigarr02")), "Bigarray.Genarray.t (custom _bigarr02)");
        assert_eq!(super::custom_block_name(Some("_ssl_ctx")), "custom _ssl_ctx");
        assert_eq!(super::custom_block_name(None), "custom ?");
    }
}
