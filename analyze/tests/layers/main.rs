//! The analysis's layers on synthetic heaps: dominators against an oracle, OCaml 4.14's heap chunks,
//! hostile snapshots, scanning rules, allocation sites, leak suspects. One test binary, so that the suite links once.

mod dominators_oracle;
mod heap_chunks;
mod robustness;
mod scanning;
mod sites;
mod suspects;
mod written;
