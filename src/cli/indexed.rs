//! Opening a snapshot through its analysis index (built and saved on first use).

use heapsnap_analyze::Progress;
use heapsnap_index::store::{load as load_index, Indexed};
use heapsnap_index::Needs;
use std::path::Path;

pub fn load(snapshot: &Path, needs: Needs) -> anyhow::Result<Indexed> {
    // The analysis allocates and frees many big arrays: let glibc reuse them (see mem.rs).
    heapsnap_analyze::mem::tune_allocator();
    Ok(load_index(snapshot, needs, &Progress::stderr())?)
}
