//! `heapsnap run --export parquet[=DIR] [--keep-snapshots N]`: each snapshot's Parquet tables,
//! written while the program runs on, and the run's older snapshot files removed once their
//! tables are written, so that a long run keeps small tables and only its last snapshots.
//!
//! The work is done on a thread of its own, fed one snapshot at a time: the watch loop (and a
//! program waiting on its exit snapshot) never waits for an analysis.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::thread::JoinHandle;

/// What the thread did, for the run's report.
#[derive(Default, serde::Serialize)]
pub struct Done {
    /// The snapshots whose tables were written (each named by OCaml names first).
    pub exported: Vec<PathBuf>,
    /// Snapshot files removed (`--keep-snapshots`), their tables kept.
    pub removed: Vec<PathBuf>,
    /// Snapshots whose tables could not be written (said on stderr; the snapshot is kept).
    pub failed: Vec<PathBuf>,
}

pub struct Tables {
    send: Sender<PathBuf>,
    thread: JoinHandle<Done>,
}

impl Tables {
    /// The thread a watch's `export` asks for (`heapsnap run --export`, OCAML_HEAPSNAP's
    /// `export=`), if it asks; `snapshots_dir` is where the snapshots go.
    pub fn for_spec(
        spec: &heapsnap_dump::triggers::TriggerSpec,
        snapshots_dir: &Path,
        names: &super::annotate::NamesArgs,
    ) -> Option<Tables> {
        let to = spec.export.as_ref()?.dir(snapshots_dir);
        Some(Tables::start(to, spec.keep_snapshots.map(|n| n as usize), names.clone()))
    }

    /// Starts the thread: every snapshot sent is annotated (`names`), exported into `dir`, then
    /// all but the last `keep` exported snapshots of the run are removed.
    pub fn start(dir: PathBuf, keep: Option<usize>, names: super::annotate::NamesArgs) -> Tables {
        let (send, receive) = channel::<PathBuf>();
        let thread = std::thread::spawn(move || {
            let mut done = Done::default();
            for snapshot in receive {
                super::annotate::after_dump(&snapshot, &names, true);
                match super::export::write_parquet(&snapshot, &dir, None, heapsnap_export::parquet::DEFAULT_PATHS) {
                    Ok(report) => {
                        eprintln!("heapsnap: tables of {} written to {} ({} bytes)", snapshot.display(), report.output, report.bytes);
                        done.exported.push(snapshot);
                    }
                    Err(e) => {
                        eprintln!("heapsnap: warning: no tables for {}: {e:#} (the snapshot is kept)", snapshot.display());
                        done.failed.push(snapshot);
                    }
                }
                if let Some(keep) = keep {
                    remove_older(&mut done, keep);
                }
            }
            done
        });
        Tables { send, thread }
    }

    pub fn send(&self, snapshot: &Path) {
        // The thread ends only when this sender is dropped.
        let _ = self.send.send(snapshot.to_path_buf());
    }

    /// Waits for the snapshots sent to be done.
    pub fn finish(self) -> Done {
        drop(self.send);
        self.thread.join().unwrap_or_default()
    }
}

/// Removes the exported snapshots but the last `keep` (and their analysis indexes).
fn remove_older(done: &mut Done, keep: usize) {
    let kept: Vec<&PathBuf> = done.exported.iter().filter(|p| !done.removed.contains(p)).collect();
    let older: Vec<PathBuf> = kept.iter().take(kept.len().saturating_sub(keep)).map(|p| p.to_path_buf()).collect();
    for snapshot in older {
        match std::fs::remove_file(&snapshot) {
            Ok(()) => {
                let mut index = snapshot.clone().into_os_string();
                index.push(".hsidx");
                let _ = std::fs::remove_file(PathBuf::from(index));
                done.removed.push(snapshot);
            }
            Err(e) => eprintln!("heapsnap: warning: cannot remove {}: {e}", snapshot.display()),
        }
    }
}
