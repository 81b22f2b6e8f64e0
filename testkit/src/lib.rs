//! What heapsnap's tests and benchmarks share (a dev-dependency only, never shipped):
//!
//! * [`synth`]: synthetic OCaml 5.3 heaps written as real snapshots;
//! * [`mod@bench`]: the benchmarks' directory of generated snapshots and their large-heap snapshot;
//! * [`samples`]: the OCaml toolchains and sample programs (`scripts/ocaml-toolchain.sh`,
//!   `samples/build.sh`, `samples/manifest.json`);
//! * [`coverage`]: what the test command counts beside the tests' results (the checks a test
//!   could not run, the toolchains the tests used).
//!
//! It depends on the snapshot format and the OCaml value facts only, not on the analyser, so
//! that the analyser's own unit tests can use it (a dev-dependency on a crate that depends on
//! the crate under test would link two copies of it).

pub mod bench;
pub mod coverage;
pub mod samples;
pub mod synth;
