//! The dumper, end to end, on the sample programs of every OCaml toolchain: live and core dumps,
//! roots, consistent stops, safety of the target, stress, releases and deployed executables,
//! and `heapsnap run`'s triggers. One test binary, so that the suite links once.

#[path = "../dump_support/mod.rs"]
mod dump_support;

mod dump_bytecode;
mod dump_containers;
mod dump_core;
mod dump_dynlink;
mod dump_errors;
mod dump_fork;
mod dump_memprof;
mod dump_ocamlopt;
mod dump_probe;
mod dump_redact;
mod dump_roots;
mod dump_safety;
mod dump_samples;
mod dump_semgrep;
mod dump_stress;
mod dump_versions;
mod run_memory;
mod run_triggers;
