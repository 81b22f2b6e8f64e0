//! OCaml names and types from `.cmt` files, end to end: globals by identifier, blocks by type,
//! installed libraries. One test binary, so that the suite links once.

#[path = "../dump_support/mod.rs"]
mod dump_support;

mod names_oracle;
mod ocaml_libraries;
mod ocaml_names;
mod ocaml_types;
