//! The analysis commands, end to end: reports on synthetic and sample snapshots, diffs, exports,
//! allocation sites, the web UI in a real browser, and what a new user sees. One test binary, so
//! that the suite links once.

#[path = "../dump_support/mod.rs"]
mod dump_support;

mod analyze_cli;
mod analyze_samples;
mod diff_cli;
mod diff_samples;
mod export_cli;
mod export_parquet;
mod fleet;
mod mcp;
mod memory_room;
mod new_user;
mod one_vocabulary;
mod sites;
mod web_ui;
