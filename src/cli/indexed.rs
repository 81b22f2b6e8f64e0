//! Opening a snapshot through its analysis index (built and saved on first use): the report
//! commands answer from it, with the errors `errors::open_snapshot` gives for the snapshot.

use heapsnap_analyze::Progress;
use heapsnap_index::store::{load as load_index, Indexed, StoreError};
use heapsnap_index::Needs;
use std::path::Path;

pub fn load(snapshot: &Path, needs: Needs) -> anyhow::Result<Indexed> {
    if snapshot.is_dir() {
        // The same message as every other command's.
        super::errors::open_snapshot(snapshot)?;
    }
    // The analysis allocates and frees many big arrays: let glibc reuse them (see mem.rs).
    heapsnap_analyze::tune_allocator();
    load_index(snapshot, needs, &Progress::stderr()).map_err(|e| match e {
        // The snapshot's own error, as `Snapshot::open` gives it (it names the path).
        StoreError::Snapshot { source, .. } => source.into(),
        StoreError::Analyze(e) => e.into(),
        StoreError::Index(e) => e.into(),
    })
}
