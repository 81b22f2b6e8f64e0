//! Which runtime family reads the target: chosen once, at discovery, from the OCaml version
//! the program runs and the registry of releases ([`heapsnap_values::releases`]). This is the
//! one place that knows every family; the rest of a dump talks to the
//! [`RuntimeFamily`] it returns.

use crate::common::family::RuntimeFamily;
use crate::common::program::{open_program, DiscoverOptions};
use crate::error::Result;
use crate::ocaml4::Runtime4;
use crate::source::MemorySource;
use crate::watch::CompactionsCounter;
use heapsnap_values::releases::{self, Family};

/// Reads what the dump needs to know about the target before stopping it: its program, then
/// its family's knowledge of the runtime. `source` need not be stopped.
pub fn discover(source: &dyn MemorySource, options: &DiscoverOptions) -> Result<Box<dyn RuntimeFamily>> {
    let program = open_program(source, options)?;
    match releases::find(&program.version).map(|r| r.family) {
        Some(Family::Ocaml4) => Ok(Box::new(Runtime4::discover(source, program.exe, program.bias, program.version, program.kind)?)),
        // A version the registry does not know is OCaml 5's to refuse, or to read as its
        // newest release (`--force`).
        Some(Family::Ocaml5) | None => Ok(Box::new(crate::ocaml5::discover::from_program(source, program, options)?)),
    }
}

/// Where a running process counts its compactions, found without stopping it (for a watcher
/// that polls it): each family's counter, tried in turn.
pub fn compactions_counter(pid: u32) -> Result<CompactionsCounter> {
    let missing = match crate::ocaml5::compactions_counter(pid) {
        Ok(counter) => return Ok(counter),
        Err(e) => e,
    };
    crate::ocaml4::compactions_counter(pid)?.ok_or(missing)
}
