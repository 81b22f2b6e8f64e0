//! Where the reports get their snapshots: the command line and the MCP server open each one
//! with its analysis index (built and saved on first use); the web UI lends the ones it serves.

use heapsnap_analyze::Progress;
use heapsnap_format::Snapshot;
use heapsnap_index::store::{load as load_index, Indexed, StoreError};
use heapsnap_index::Needs;
use std::ops::Deref;
use std::path::Path;

/// A snapshot with its index, opened for one report or lent by whoever holds it.
pub enum Loaded<'a> {
    Opened(Box<Indexed>),
    Lent(&'a Indexed),
}

impl Deref for Loaded<'_> {
    type Target = Indexed;
    fn deref(&self) -> &Indexed {
        match self {
            Loaded::Opened(ix) => ix,
            Loaded::Lent(ix) => ix,
        }
    }
}

pub trait Loader {
    /// The snapshot at `path` with its analysis index, checked for the sections `needs` names.
    fn indexed(&self, path: &Path, needs: Needs) -> anyhow::Result<Loaded<'_>>;
    /// The snapshot alone (`info`, `verify` and `diff` read it whole).
    fn snapshot(&self, path: &Path) -> anyhow::Result<Snapshot> {
        open_snapshot(path)
    }
}

/// Opens every snapshot from its file, building its index when it has none (progress on
/// stderr when it is a terminal).
pub struct Files;

impl Loader for Files {
    fn indexed(&self, path: &Path, needs: Needs) -> anyhow::Result<Loaded<'_>> {
        if path.is_dir() {
            // The same message as every other command's.
            open_snapshot(path)?;
        }
        // The analysis allocates and frees many big arrays: let glibc reuse them (see mem.rs).
        heapsnap_analyze::tune_allocator();
        let ix = load_index(path, needs, &Progress::stderr()).map_err(|e| match e {
            // The snapshot's own error, as `Snapshot::open` gives it (it names the path).
            StoreError::Snapshot { source, .. } => anyhow::Error::from(source),
            StoreError::Analyze(e) => e.into(),
            StoreError::Index(e) => e.into(),
        })?;
        Ok(Loaded::Opened(Box::new(ix)))
    }
}

/// A snapshot file, opened, or an error that says what was given instead.
pub fn open_snapshot(path: &Path) -> anyhow::Result<Snapshot> {
    if path.is_dir() {
        anyhow::bail!(
            "{} is a directory, not a snapshot file (`heapsnap run` writes its snapshots inside it: give one of its .heapsnap files)",
            path.display()
        );
    }
    // The analysis allocates and frees many big arrays: let glibc reuse them (see mem.rs).
    heapsnap_analyze::tune_allocator();
    Ok(Snapshot::open(path)?)
}
