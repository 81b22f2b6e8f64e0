//! `heapsnap serve`: a local web UI over analysed snapshots. Every view answers from the
//! snapshots' analysis indexes (the diff of two or more snapshots is computed once, at start).
//!
//! Security: it listens on 127.0.0.1 unless told otherwise, every request must carry the random
//! token printed at start (as Jupyter does), it only reads, and nothing in a request names a
//! file: snapshots are numbered in the order given on the command line. The page and its script
//! are compiled into the binary: no CDN.

mod api;
mod flame;
mod http;
mod served;

use heapsnap_analyze::diff::{diff, DiffOptions, Input};
use heapsnap_analyze::Progress;
use heapsnap_index::{IndexView, Indexed, Needs};
use std::net::SocketAddr;
use std::path::PathBuf;

pub use http::{random_token, Server};

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(transparent)]
    Store(#[from] heapsnap_index::store::StoreError),
    #[error(transparent)]
    Index(#[from] heapsnap_index::IndexError),
    #[error("diff: {0}")]
    Diff(#[from] heapsnap_analyze::diff::DiffError),
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, String),
}

/// One snapshot the UI shows.
pub struct Shown {
    pub name: String,
    /// The file, as given on the command line (reports name their snapshots by path).
    pub path: PathBuf,
    pub indexed: &'static Indexed,
    pub view: IndexView<'static>,
    /// Its sampled blocks joined with the call stacks their tracker stored, when first asked
    /// for (or why not: no statmemprof tables).
    pub sites: std::sync::OnceLock<Result<heapsnap_analyze::sites::Sites, String>>,
}

/// What the server answers from: the snapshots' views and, with two or more, their diff.
pub struct App {
    pub snapshots: Vec<Shown>,
    pub diff: Option<serde_json::Value>,
    /// Flame graphs, made when first asked for.
    pub flames: flame::Flames,
}

impl App {
    /// Opens (or builds) every snapshot's index, and diffs them when there are two or more.
    pub fn load(paths: &[PathBuf], progress: &Progress) -> Result<App, WebError> {
        let mut snapshots = Vec::new();
        for path in paths {
            let indexed = heapsnap_index::store::load(path, Needs::All, progress)?;
            // The server runs until the process ends: its snapshots live as long.
            let indexed: &'static Indexed = Box::leak(Box::new(indexed));
            let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            snapshots.push(Shown { name, path: path.clone(), indexed, view: indexed.view(Needs::All)?, sites: Default::default() });
        }
        let diff = if snapshots.len() >= 2 {
            // The whole index holds the diff's classification: the diff only compares.
            // (One that fails its checks is left out: that snapshot is analysed.)
            let views: Vec<Option<IndexView<'_>>> = snapshots.iter().map(|s| s.indexed.view(Needs::Diff).ok()).collect();
            let inputs: Vec<Input<'_>> = snapshots
                .iter()
                .zip(&views)
                .map(|(s, v)| Input {
                    name: s.name.clone(),
                    snap: s.view.snap,
                    saved: v.as_ref().and_then(|v| v.diff_profile(heapsnap_analyze::GroupBy::Kind)),
                })
                .collect();
            let report = diff(&inputs, &DiffOptions::default(), progress)?;
            Some(serde_json::to_value(&report).expect("reports serialise"))
        } else {
            None
        };
        Ok(App { snapshots, diff, flames: Default::default() })
    }
}
