//! Where an index lives and how it is opened: `SNAP.hsidx` next to the snapshot, or, when that
//! directory is not writable, `$XDG_CACHE_HOME/heapsnap/index/` (default `~/.cache`). Written
//! owner-only (0600) to a temporary file renamed into place, so a reader never sees half an
//! index. Any index that fails a check is reported on stderr and rebuilt.

use crate::file::{Bytes, IndexError, IndexFile, SnapshotId};
use crate::Needs;
use heapsnap_analyze::{Analysis, AnalyzeError, Progress};
use heapsnap_format::{ReadOptions, Snapshot};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A snapshot with its index.
pub struct Indexed {
    pub snap: Snapshot,
    pub index: IndexFile,
    /// Where the index was read or written (None: kept in memory only).
    pub path: Option<PathBuf>,
    /// Whether this call built it.
    pub built: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open {path}: {source}")]
    Snapshot { path: PathBuf, source: heapsnap_format::FormatError },
    #[error(transparent)]
    Analyze(#[from] AnalyzeError),
    #[error("the index just built does not read back: {0}")]
    Index(#[from] IndexError),
}

/// `SNAP.hsidx`, next to the snapshot.
pub fn beside(snapshot: &Path) -> PathBuf {
    let mut name = snapshot.file_name().unwrap_or_default().to_os_string();
    name.push(".hsidx");
    snapshot.with_file_name(name)
}

/// The cache location: one file per snapshot path (its canonical path hashed).
pub fn in_cache(snapshot: &Path) -> Option<PathBuf> {
    let base = cache_dir()?;
    let canonical = std::fs::canonicalize(snapshot).unwrap_or_else(|_| snapshot.to_path_buf());
    let hash = xxhash_rust::xxh3::xxh3_64(canonical.as_os_str().as_encoded_bytes());
    let name = snapshot.file_name().unwrap_or_default().to_string_lossy();
    Some(base.join("index").join(format!("{hash:016x}-{name}.hsidx")))
}

/// heapsnap's cache directory: `$XDG_CACHE_HOME/heapsnap` (default `~/.cache`).
pub fn cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("heapsnap"))
}

fn candidates(snapshot: &Path) -> Vec<PathBuf> {
    std::iter::once(beside(snapshot)).chain(in_cache(snapshot)).collect()
}

fn read(path: &Path, id: SnapshotId) -> Result<Option<IndexFile>, IndexError> {
    let Ok(file) = std::fs::File::open(path) else { return Ok(None) };
    // SAFETY: the index is only read; a concurrent writer replaces it by renaming a new file
    // over it, which leaves this mapping's file untouched.
    let map = match unsafe { memmap2::Mmap::map(&file) } {
        Ok(m) => Bytes::Mapped(m),
        Err(_) => return Ok(None),
    };
    IndexFile::parse(map, id).map(Some)
}

/// Whether an index saved for `snapshot` already holds what `needs` reads (checked no further
/// than its header: a command that then finds it bad rebuilds it as usual).
pub fn saved_serves(snapshot: &Path, needs: Needs) -> bool {
    let Ok(snap) = Snapshot::open_with(snapshot, &ReadOptions { verify_checksums: false }) else { return false };
    let id = SnapshotId::of(&snap);
    candidates(snapshot).iter().any(|path| matches!(read(path, id), Ok(Some(index)) if index.serves(needs)))
}

/// The snapshot with an index saved for it that serves `needs` and passes the checks of what
/// `needs` reads, the snapshot opened once; None when there is no such index (nothing is said:
/// [`load`] then says why it rebuilds one). A second look needs nothing else.
pub fn open_saved(snapshot: &Path, needs: Needs) -> Option<Indexed> {
    let snap = Snapshot::open_with(snapshot, &ReadOptions { verify_checksums: false }).ok()?;
    let id = SnapshotId::of(&snap);
    let (index, path) = candidates(snapshot)
        .into_iter()
        .find_map(|path| read(&path, id).ok().flatten().filter(|index| index.serves(needs)).map(|index| (index, path)))?;
    crate::IndexView::open(&snap, &index, needs).ok()?;
    Some(Indexed { snap, index, path: Some(path), built: false })
}

/// The meta data of an index saved for `snapshot`, when there is one that opens (no index is
/// built: a caller without one reads the snapshot itself).
pub fn saved_meta(snapshot: &Path) -> Option<std::sync::Arc<crate::sections::Meta>> {
    let snap = Snapshot::open_with(snapshot, &ReadOptions { verify_checksums: false }).ok()?;
    let id = SnapshotId::of(&snap);
    candidates(snapshot).iter().find_map(|path| read(path, id).ok().flatten()?.meta().ok())
}

/// Opens the snapshot and its index, building (and saving) the whole index when there is no
/// valid one ([`open_or_build_for`] with [`Needs::All`]).
pub fn open_or_build(snapshot: &Path, progress: &Progress) -> Result<Indexed, StoreError> {
    open_or_build_for(snapshot, Needs::All, progress)
}

/// Opens the snapshot and its index, building (and saving) an index with the sections `needs`
/// reads when there is no valid one, or the whole index when the one there was written with
/// fewer (a `summary` writes its meta data only: a later `dominators` analyses again and saves
/// everything, so that the `path` or `inspect` after it need not analyse a third time). With
/// a valid index the snapshot's sections are not re-hashed: the index ties itself to the hash
/// of their checksums, which were all checked when the index was built.
pub fn open_or_build_for(snapshot: &Path, needs: Needs, progress: &Progress) -> Result<Indexed, StoreError> {
    open_or_build_with(snapshot, needs, progress, &mut |_| {})
}

/// [`open_or_build_for`], `also` given the analysis when the index is built.
fn open_or_build_with(
    snapshot: &Path,
    needs: Needs,
    progress: &Progress,
    also: &mut dyn FnMut(&Analysis<'_>),
) -> Result<Indexed, StoreError> {
    let err = |source| StoreError::Snapshot { path: snapshot.to_path_buf(), source };
    let snap = Snapshot::open_with(snapshot, &ReadOptions { verify_checksums: false }).map_err(err)?;
    let id = SnapshotId::of(&snap);
    // A valid index of a lower level (the command that wrote it needed less) is built again,
    // whole; one found elsewhere may have more.
    let mut fewer = None;
    for path in candidates(snapshot) {
        match read(&path, id) {
            Ok(Some(index)) => match crate::IndexView::open(&snap, &index, Needs::Meta) {
                Ok(_) if index.serves(needs) => return Ok(Indexed { snap, index, path: Some(path), built: false }),
                Ok(_) => fewer = fewer.or(Some(path)),
                Err(e) => eprintln!("heapsnap: ignoring the index {}: {e}; rebuilding it", path.display()),
            },
            Ok(None) => {}
            Err(e) => eprintln!("heapsnap: ignoring the index {}: {e}; rebuilding it", path.display()),
        }
    }
    let level = match fewer {
        Some(path) => {
            heapsnap_analyze::PhaseTimer::start("index")
                .lap(&format!("{} has fewer sections than {needs:?} reads: building it again, whole", path.display()));
            Needs::All
        }
        None => needs,
    };
    drop(snap);
    build_and_save_with(snapshot, level, progress, also)
}

/// Analyses the snapshot and saves its whole index ([`build_and_save_for`] with [`Needs::All`]).
pub fn build_and_save(snapshot: &Path, progress: &Progress) -> Result<Indexed, StoreError> {
    build_and_save_for(snapshot, Needs::All, progress)
}

/// Analyses the snapshot and saves an index with the sections `needs` reads (the first
/// writable location wins).
pub fn build_and_save_for(snapshot: &Path, needs: Needs, progress: &Progress) -> Result<Indexed, StoreError> {
    build_and_save_with(snapshot, needs, progress, &mut |_| {})
}

/// [`build_and_save_for`], `also` given the analysis (whoever needs more of it than the index
/// keeps need not analyse the snapshot again).
fn build_and_save_with(
    snapshot: &Path,
    needs: Needs,
    progress: &Progress,
    also: &mut dyn FnMut(&Analysis<'_>),
) -> Result<Indexed, StoreError> {
    let snap = Snapshot::open(snapshot).map_err(|source| StoreError::Snapshot { path: snapshot.to_path_buf(), source })?;
    let id = SnapshotId::of(&snap);
    // Where it was saved, else the index in memory.
    let saved: Result<PathBuf, Vec<u8>> = {
        let analysis = Analysis::new(&snap, progress)?;
        also(&analysis);
        save_analysed(snapshot, &snap, &analysis, needs, progress)
    };
    match saved {
        // Mapped back rather than kept: the file is in the page cache already.
        Ok(path) => match read(&path, id)? {
            Some(index) => Ok(Indexed { snap, index, path: Some(path), built: true }),
            None => Err(IndexError::Inconsistent("the index just written cannot be opened".into()).into()),
        },
        Err(bytes) => {
            let index = IndexFile::parse(Bytes::copied(&bytes), id)?;
            Ok(Indexed { snap, index, path: None, built: true })
        }
    }
}

/// Saves the index of `snap` (the snapshot at `snapshot`), analysed as `analysis`, with the
/// sections `needs` reads, in the first writable place: where it was saved, or the index in
/// memory when no place was writable (said on stderr). An index of more saved there meanwhile
/// by another command is kept when what `needs` reads of it passes its checks.
pub fn save_analysed(
    snapshot: &Path,
    snap: &Snapshot,
    analysis: &Analysis<'_>,
    needs: Needs,
    progress: &Progress,
) -> Result<PathBuf, Vec<u8>> {
    save_analysed_with(snapshot, snap, analysis, needs, progress, None)
}

/// [`save_analysed`], each lower level saved first as soon as the analysis gives its sections
/// ([`crate::build::build_in_stages`]: the meta level, then, for the whole index, the paths'),
/// each replaced by the next with a rename, `saved` called after each: what completes an index
/// in the background saves it so, and a report that reads less need not wait for all of it.
pub fn save_analysed_in_stages(
    snapshot: &Path,
    snap: &Snapshot,
    analysis: &Analysis<'_>,
    needs: Needs,
    progress: &Progress,
    saved: &mut dyn FnMut(Needs),
) -> Result<PathBuf, Vec<u8>> {
    save_analysed_with(snapshot, snap, analysis, needs, progress, Some(saved))
}

fn save_analysed_with(
    snapshot: &Path,
    snap: &Snapshot,
    analysis: &Analysis<'_>,
    needs: Needs,
    progress: &Progress,
    mut stages: Option<&mut dyn FnMut(Needs)>,
) -> Result<PathBuf, Vec<u8>> {
    let id = SnapshotId::of(snap);
    let step = progress.step("writing the analysis index", 0);
    let builder = crate::build::build_in_stages(analysis, needs, &mut |stage, level| {
        if let Some(saved) = stages.as_mut() {
            // A stage that cannot be saved is no loss: the whole index says why it cannot.
            let _ = save_builder(snapshot, snap, id, stage, level);
            heapsnap_analyze::PhaseTimer::start("index").lap(&format!("the {level:?} level saved, ahead of the rest"));
            saved(level);
        }
    });
    let saved = save_builder(snapshot, snap, id, &builder, needs);
    step.finish_and_clear();
    match saved {
        Ok(path) => Ok(path),
        Err(last_error) => {
            if let Some((path, e)) = last_error {
                eprintln!("heapsnap: cannot save the analysis index ({}: {e}); it will be rebuilt next time", path.display());
            }
            Err(builder.finish(id))
        }
    }
}

/// Writes `builder`, an index with the sections `needs` reads, in the first writable place
/// (where it was saved), unless an index of more is there already and what `needs` reads of it
/// passes its checks (another command saved it meanwhile: it is kept). The error: the last
/// place that could not be written, and why.
fn save_builder(
    snapshot: &Path,
    snap: &Snapshot,
    id: SnapshotId,
    builder: &crate::file::IndexBuilder<'_>,
    needs: Needs,
) -> Result<PathBuf, Option<(PathBuf, std::io::Error)>> {
    let mut last_error = None;
    for path in candidates(snapshot) {
        // Another command may have saved more meanwhile (a `dominators` while this
        // `summary` analysed): that index is kept, when what this command reads of it
        // passes its checks (a corrupt section is written over).
        let more = read(&path, id).ok().flatten().filter(|ix| ix.level().is_some_and(|level| level > needs));
        if more.is_some_and(|ix| crate::IndexView::open(snap, &ix, needs).is_ok()) {
            return Ok(path);
        }
        let timer = heapsnap_analyze::PhaseTimer::start("index");
        let result = save_with(&path, |w| builder.write_to(w, id));
        timer.lap("hashed and written");
        match result {
            Ok(()) => return Ok(path),
            Err(e) => last_error = Some((path, e)),
        }
    }
    Err(last_error)
}

/// Writes owner-only to a temporary file in the same directory, then renames it into place.
/// Not synced to disk: a crash may leave a short or empty index, which fails its checks and is
/// rebuilt.
pub fn save(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    save_with(path, |w| w.write_all(bytes))
}

/// [`save`], the contents written by `write`.
pub fn save_with(path: &Path, write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    // tempfile creates the file with O_EXCL and mode 0600.
    let mut tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".partial").tempfile_in(&dir)?;
    write(tmp.as_file_mut())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

impl Indexed {
    /// The view of the snapshot through its index, `needs` deciding which sections are checked.
    pub fn view(&self, needs: Needs) -> Result<crate::IndexView<'_>, IndexError> {
        crate::IndexView::open(&self.snap, &self.index, needs)
    }
}

/// [`open_or_build`], and a rebuild when a section the caller needs fails its check.
pub fn load(snapshot: &Path, needs: Needs, progress: &Progress) -> Result<Indexed, StoreError> {
    load_with(snapshot, needs, progress, &mut |_| {})
}

/// [`load`], `also` given the analysis when the index is built: what a command needs of the
/// snapshot beyond its index is made from the same analysis (the provider analyses each
/// snapshot at most once).
pub fn load_with(snapshot: &Path, needs: Needs, progress: &Progress, also: &mut dyn FnMut(&Analysis<'_>)) -> Result<Indexed, StoreError> {
    let ix = open_or_build_with(snapshot, needs, progress, also)?;
    if let Err(e) = ix.view(needs) {
        if ix.built {
            return Err(e.into());
        }
        let at = ix.path.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
        eprintln!("heapsnap: ignoring the index {at}: {e}; rebuilding it");
        drop(ix);
        return build_and_save_with(snapshot, needs, progress, also);
    }
    Ok(ix)
}
