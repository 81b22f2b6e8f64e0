//! heapsnap: heap snapshots for OCaml native programs (4.14 and 5.x). A thin command line over the
//! `heapsnap-format`, `heapsnap-dump` and `heapsnap-analyze` crates.
// Every unsafe block states the invariant it relies on.
#![warn(clippy::undocumented_unsafe_blocks)]

mod cli;

// Small blocks on per-thread heaps, big arrays on the tuned C library heap (see the type).
#[global_allocator]
static ALLOCATOR: heapsnap_analyze::SplitAllocator = heapsnap_analyze::SplitAllocator;

fn main() -> std::process::ExitCode {
    // Die quietly on a closed pipe (`heapsnap top SNAP | head`), as command-line tools do,
    // instead of panicking in println!.
    // SAFETY: the default action for SIGPIPE, set before any thread starts; no memory involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // `--json` before a `--` (after it come a launched program's own arguments).
    let json = std::env::args().take_while(|a| a != "--").any(|a| a == "--json");
    let matches = cli::command().get_matches();
    match cli::run(&matches) {
        Ok(code) => code,
        Err(err) => {
            cli::errors::report(&err, json);
            std::process::ExitCode::from(2)
        }
    }
}
