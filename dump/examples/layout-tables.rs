//! Prints the layout tables of one OCaml release (see `heapsnap_dump::ocaml5::tables`), from
//! an executable built by that release's toolchain with DWARF and `.symtab`, linked with the
//! threads library so that systhreads' structures are in it.
//!
//!     cargo run -p heapsnap-dump --example layout-tables -- VERSION EXECUTABLE
//!
//! `scripts/gen-layout-tables.sh` runs it for every release.

use heapsnap_dump::dwarf::TypeIndex;
use heapsnap_dump::elf::Executable;
use heapsnap_dump::ocaml5::tables::Tables;
use heapsnap_dump::ocaml5::versions;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [version, exe] = args.as_slice() else {
        eprintln!("usage: layout-tables VERSION EXECUTABLE");
        return ExitCode::from(2);
    };
    let result = (|| -> Result<String, Box<dyn std::error::Error>> {
        let release = versions::find(version).ok_or_else(|| format!("OCaml {version} is not a release heapsnap knows"))?;
        let exe = Executable::open(std::path::Path::new(exe))?;
        let types = TypeIndex::load(&exe)?;
        let tables = Tables::generate(&exe, &types, release, version)?;
        Ok(serde_json::to_string_pretty(&tables)?)
    })();
    match result {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("layout-tables: {e}");
            ExitCode::FAILURE
        }
    }
}
