//! Where every command gets its analysed snapshots (the one provider): the command line and
//! the MCP server open each one with its analysis index (built and saved on first use, the
//! snapshot analysed once); the web UI lends the ones it serves. What no index answers (the
//! DevTools export reads every edge; a flame graph by group walks the dominator tree with
//! every block's group) is analysed here too, once per snapshot: [`analyse`].

use heapsnap_analyze::Progress;
use heapsnap_format::Snapshot;
use heapsnap_index::store::{load as load_index, load_with, Indexed, StoreError};
use heapsnap_index::Needs;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
    /// [`Loader::indexed`], `also` given the analysis when the index is built (never, for an
    /// index opened or lent): what a command needs beyond the index, made from the one analysis.
    fn indexed_with(&self, path: &Path, needs: Needs, also: &mut dyn FnMut(&heapsnap_analyze::Analysis<'_>)) -> anyhow::Result<Loaded<'_>> {
        let _ = also;
        self.indexed(path, needs)
    }
    /// The snapshot alone (`info`, `verify` and `diff` read it whole).
    fn snapshot(&self, path: &Path) -> anyhow::Result<Snapshot> {
        open_snapshot(path)
    }
    /// For a first look (through [`answer`]): the index, as [`Loader::indexed`] gives it, when
    /// one serves `needs`; else, where an index can be completed in the background, `None`
    /// once `answer` has had the analysis, so that the answer does not wait for any section of
    /// the index: the whole of it is left to that completion.
    fn answer_first(
        &self,
        path: &Path,
        needs: Needs,
        answer: &mut dyn FnMut(&heapsnap_analyze::Analysis<'_>),
    ) -> anyhow::Result<Option<Loaded<'_>>> {
        let _ = answer;
        self.indexed(path, needs).map(Some)
    }
}

/// A report's answer on the snapshot at `path`: on a first look, `first` makes it from the
/// analysis and the index is left to a completion in the background ([`Loader::answer_first`]);
/// otherwise `indexed` makes it from the index, checked for what `needs` names. The two give
/// the same answer word for word.
pub fn answer<T>(
    loader: &dyn Loader,
    path: &Path,
    needs: Needs,
    first: impl FnOnce(&heapsnap_analyze::Analysis<'_>) -> anyhow::Result<T>,
    indexed: impl FnOnce(&heapsnap_index::IndexView<'_>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut first = Some(first);
    let mut answered = None;
    match loader.answer_first(path, needs, &mut |a| answered = first.take().map(|first| first(a)))? {
        Some(ix) => {
            let view = ix.view(needs)?;
            let answer = indexed(&view);
            leave_to_exit(view);
            leave_to_exit(ix);
            answer
        }
        None => answered.unwrap_or_else(|| Err(anyhow::anyhow!("{}: no analysis to answer from", path.display()))),
    }
}

/// Whether this process ends once its report is printed ([`exit_after_answer`]).
static EXITS_AFTER_ANSWER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says that this process ends once its report is printed (the command line): what a report
/// read (an analysis, an index's parsed sections: millions of small allocations on a real
/// program) is then left to the process's exit, which frees it at once, rather than freed piece
/// by piece before the answer is printed. A long-lived process (the MCP server) frees it.
pub fn exit_after_answer() {
    EXITS_AFTER_ANSWER.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Drops `value`, or leaves it to the process's exit ([`exit_after_answer`]).
fn leave_to_exit<T>(value: T) {
    if EXITS_AFTER_ANSWER.load(std::sync::atomic::Ordering::Relaxed) {
        std::mem::forget(value);
    } else {
        drop(value);
    }
}

/// A first look's answer from the analysis of `snap`, which it returns; `then` says in the trace
/// what becomes of the index.
fn analyse_and_answer<'s>(
    snap: &'s Snapshot,
    answer: &mut dyn FnMut(&heapsnap_analyze::Analysis<'_>),
    then: &str,
) -> anyhow::Result<heapsnap_analyze::Analysis<'s>> {
    let analysis = analyse(snap, &Progress::stderr())?;
    answer(&analysis);
    heapsnap_analyze::PhaseTimer::start("provider").lap(&format!("the answer, from the analysis ({then})"));
    Ok(analysis)
}

/// Opens every snapshot from its file, building its index when it has none (progress on
/// stderr when it is a terminal).
pub struct Files;

impl Loader for Files {
    fn answer_first(
        &self,
        path: &Path,
        needs: Needs,
        answer: &mut dyn FnMut(&heapsnap_analyze::Analysis<'_>),
    ) -> anyhow::Result<Option<Loaded<'_>>> {
        if !completes_in_background() || path.is_dir() || kept_unsaved(path, needs).is_some() {
            return self.indexed(path, needs).map(Some);
        }
        // A completion running already: the level it saves first may be the answer's.
        if let Some(ix) = wait_for_index(path, needs) {
            return Ok(Some(ix));
        }
        if crate::handover::is_child() {
            // The process goes on after its answer, to complete the index from this analysis
            // (the snapshot and its analysis live until the process ends).
            let snap: &'static Snapshot = Box::leak(Box::new(open_snapshot(path)?));
            let analysis: &'static heapsnap_analyze::Analysis<'static> =
                Box::leak(Box::new(analyse_and_answer(snap, answer, "the index left to this process once it has answered")?));
            let snapshot = path.to_path_buf();
            crate::handover::complete_after_answer(
                path,
                Box::new(move || {
                    // Other commands on this snapshot are answered from the analysis until the
                    // index is saved ([`answer_others_with`]).
                    let holder = ANSWER_OTHERS.get().and_then(|serve| serve(&snapshot, analysis));
                    // With a holder answering, the index no longer needs the command's
                    // priority: what a next command reads, it answers at once.
                    if holder.is_some() {
                        crate::handover::lower_priority();
                    }
                    // The meta level first, from what the analysis holds (a few KiB), at the
                    // priority of the command that answered unless a holder answers: a second
                    // `summary` or `top` reads it. The rest waits for its turn (held by the
                    // completion of another snapshot), at a lower priority.
                    let mut turn = None;
                    let _ = heapsnap_index::store::save_analysed_in_stages(
                        &snapshot,
                        snap,
                        analysis,
                        Needs::All,
                        &Progress::hidden(),
                        &mut |level| {
                            if level == Needs::Meta {
                                crate::handover::lower_priority();
                                turn = Some(completion_turn());
                            }
                        },
                    );
                    drop(holder);
                    drop(turn);
                }),
            );
            return Ok(None);
        }
        let snap = open_snapshot(path)?;
        let analysis = analyse_and_answer(&snap, answer, "the index left to a completion in the background")?;
        leave_to_exit(analysis);
        leave_to_exit(snap);
        complete_in_background(path);
        Ok(None)
    }

    fn indexed(&self, path: &Path, needs: Needs) -> anyhow::Result<Loaded<'_>> {
        self.indexed_with(path, needs, &mut |_| {})
    }

    fn indexed_with(&self, path: &Path, needs: Needs, also: &mut dyn FnMut(&heapsnap_analyze::Analysis<'_>)) -> anyhow::Result<Loaded<'_>> {
        if path.is_dir() {
            // The same message as every other command's.
            open_snapshot(path)?;
        }
        // The index being completed in the background holds what this report reads: wait for it
        // (no longer than analysing would take) rather than analyse the same snapshot alongside.
        if let Some(ix) = wait_for_index(path, needs) {
            return Ok(ix);
        }
        // The analysis allocates and frees many big arrays: let glibc reuse them (see mem.rs).
        heapsnap_analyze::tune_allocator();
        if let Some(kept) = kept_unsaved(path, needs) {
            return Ok(Loaded::Lent(kept));
        }
        let ix = load_with(path, needs, &Progress::stderr(), also).map_err(|e| match e {
            // The snapshot's own error, as `Snapshot::open` gives it (it names the path).
            StoreError::Snapshot { source, .. } => anyhow::Error::from(source),
            StoreError::Analyze(e) => e.into(),
            StoreError::Index(e) => e.into(),
        })?;
        if ix.path.is_none() {
            return Ok(Loaded::Lent(keep_unsaved(path, ix)));
        }
        if ix.built && !ix.index.serves(Needs::All) {
            complete_in_background(path);
        }
        Ok(Loaded::Opened(Box::new(ix)))
    }
}

/// The snapshot at `path` with an index saved for it that serves `needs`
/// ([`heapsnap_index::store::open_saved`]): a second look opens the snapshot once.
fn open_saved<'a>(path: &Path, needs: Needs) -> Option<Loaded<'a>> {
    heapsnap_index::store::open_saved(path, needs).map(|ix| Loaded::Opened(Box::new(ix)))
}

/// The indexes this process built but could not save (no writable place for them), by the
/// path they were asked for: kept until it ends, so that a long-lived process (the MCP server)
/// analyses each snapshot once, not once per report.
static UNSAVED: std::sync::Mutex<Vec<(PathBuf, &'static Indexed)>> = std::sync::Mutex::new(Vec::new());

/// An index kept in [`UNSAVED`] for `path` that serves `needs`, when the file there is still
/// the snapshot it was built from (its section table and length: `annotate` changes them).
fn kept_unsaved(path: &Path, needs: Needs) -> Option<&'static Indexed> {
    let kept = UNSAVED.lock().expect("no panic while holding the kept indexes");
    let (_, ix) = kept.iter().rev().find(|(p, ix)| p == path && ix.index.serves(needs))?;
    let now = Snapshot::open_with(path, &heapsnap_format::ReadOptions { verify_checksums: false }).ok()?;
    (heapsnap_index::SnapshotId::of(&now) == heapsnap_index::SnapshotId::of(&ix.snap)).then_some(*ix)
}

fn keep_unsaved(path: &Path, ix: Indexed) -> &'static Indexed {
    let kept: &'static Indexed = Box::leak(Box::new(ix));
    UNSAVED.lock().expect("no panic while holding the kept indexes").push((path.to_path_buf(), kept));
    kept
}

/// The program that completes an index in the background: `PROGRAM complete-index SNAP`.
static COMPLETER: OnceLock<PathBuf> = OnceLock::new();

/// What answers other commands from a first look's analysis while its index is saved, until
/// what it returns is dropped: [`answer_others_with`].
pub type AnswerOthers = fn(&Path, &'static heapsnap_analyze::Analysis<'static>) -> Option<Box<dyn std::any::Any>>;

static ANSWER_OTHERS: OnceLock<AnswerOthers> = OnceLock::new();

/// Makes the child of a first look ([`crate::handover`]) answer the reports of other commands
/// on its snapshot with `serve` (the command line gives `heapsnap_reports::held::serve`) while
/// it saves the index; a library user that does not gets no such process.
pub fn answer_others_with(serve: AnswerOthers) {
    let _ = ANSWER_OTHERS.set(serve);
}

/// The subcommand [`complete_indexes_with`]'s program runs to complete an index.
pub const COMPLETE_INDEX: &str = "complete-index";

/// Makes a command that saved only the part of an index it read (a `diff` of fresh snapshots)
/// start `program complete-index SNAP` to build the rest, once its own answer is on its way:
/// the answer does not wait for the sections other reports read, and the next report finds
/// them. A first look answered by the child of [`crate::handover`] completes the index itself,
/// from its analysis. The heapsnap binary names itself; a library user that does not gets no
/// such process. `HEAPSNAP_INDEX_IN_BACKGROUND=0` turns it off.
pub fn complete_indexes_with(program: PathBuf) {
    let _ = COMPLETER.set(program);
}

/// Whether indexes are completed in the background: a program to do it was named, and
/// `HEAPSNAP_INDEX_IN_BACKGROUND=0` does not turn it off.
pub fn completes_in_background() -> bool {
    COMPLETER.get().is_some() && std::env::var_os("HEAPSNAP_INDEX_IN_BACKGROUND").is_none_or(|v| v != "0")
}

/// Starts the completion of `snapshot`'s index, detached ([`crate::handover::detach`]: its own session, so that
/// a Ctrl-C for the next command does not reach it; a lower priority; no terminal). It holds an
/// exclusive `flock` on the snapshot file from before it starts until it ends: the lock is
/// taken here, on the descriptor it gets as its standard input, so that a report that needs
/// the rest waits for it ([`wait_for_index`]) instead of analysing the same snapshot at
/// the same time, as long as analysing would take. The index is replaced by a rename either way, so no reader sees half of one.
///
/// Started without a `pre_exec` step (the child detaches itself), so that the standard library
/// spawns it with `posix_spawn`: a `fork` would copy the page tables of every page this
/// process's analysis touched before the answered command could exit.
fn complete_in_background(snapshot: &Path) {
    use std::os::fd::AsRawFd;
    let Some(program) = COMPLETER.get().filter(|_| completes_in_background()) else { return };
    let Ok(file) = std::fs::File::open(snapshot) else { return };
    // SAFETY: flock on a descriptor we own. Held already: another completion runs.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return;
    }
    let spawned = std::process::Command::new(program)
        .arg(COMPLETE_INDEX)
        .arg(snapshot)
        // The locked descriptor: the lock stays with the child's copy of it until it ends.
        .stdin(file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = spawned {
        // Collected when it ends, should this process (the MCP server) outlive it.
        std::thread::spawn(move || child.wait());
    }
}

/// Completes the index of `snapshot` (what `heapsnap complete-index SNAP` runs), one completion
/// at a time: a `diff` of ten fresh snapshots starts ten of them, and each analyses its snapshot
/// in full, so they queue on one lock (an exclusive `flock` on `heapsnap/completing.lock` in the
/// cache directory) rather than hold ten analyses in memory at once. Each keeps its snapshot's
/// own lock meanwhile: a report that needs that index waits for it, no longer than analysing
/// would take.
pub fn complete_index(snapshot: &Path) -> anyhow::Result<()> {
    let _turn = completion_turn();
    heapsnap_analyze::tune_allocator();
    load_index(snapshot, Needs::All, &Progress::hidden())?;
    Ok(())
}

/// The turn of one completion among those running (None: no cache directory to hold the lock
/// in; the completion then runs at once). Released when dropped.
pub fn completion_turn() -> Option<std::fs::File> {
    completion_turn_in(&heapsnap_index::store::cache_dir()?)
}

/// [`completion_turn`], the lock in `dir`.
fn completion_turn_in(dir: &Path) -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).ok()?;
    let file = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join("completing.lock")).ok()?;
    // SAFETY: flock on a descriptor we own; released when the file closes.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    Some(file)
}

/// An index saved for `snapshot` that serves `needs`, waiting for one while a completion of it
/// runs (it holds the snapshot's lock, and saves its levels one by one: the meta level first),
/// but no longer than a first look at the snapshot would take: the longer of
/// [`first_look_estimate`] and how long the completion has run ([`completion_age`]: right after
/// a first look, about as long as that look took on this machine, however busy). A report then
/// analyses the snapshot itself rather than wait for all of a long completion. None: no such
/// index, and either no completion runs or the wait has been long enough.
fn wait_for_index<'a>(snapshot: &Path, needs: Needs) -> Option<Loaded<'a>> {
    let started = std::time::Instant::now();
    let bound = first_look_estimate(snapshot).max(completion_age(snapshot).unwrap_or_default());
    loop {
        let running = completion_running(snapshot);
        if let Some(ix) = open_saved(snapshot, needs) {
            return Some(ix);
        }
        if !running {
            return None;
        }
        let waited = started.elapsed();
        if waited >= bound {
            heapsnap_analyze::PhaseTimer::start("provider")
                .lap(&format!("no index for {needs:?} after {waited:.2?} of its completion: analysing instead of waiting"));
            return None;
        }
        std::thread::sleep(WAIT_STEP.min(bound - waited));
    }
}

/// How often a report waiting for a completion looks for the level it needs: a small part of
/// the wait, and opening an index's header costs well under a millisecond.
const WAIT_STEP: std::time::Duration = std::time::Duration::from_millis(10);

/// The bytes of snapshot a first look analyses in a second, at the least, on heaps like the
/// synthetic one of the benchmarks, whose look is the fastest per byte (real programs' heaps
/// go slower): a wait bounded by the snapshot's size over this is no longer than analysing.
const FIRST_LOOK_BYTES_PER_SECOND: u64 = 250_000_000;

/// How long a first look at `snapshot` takes at the least (its size over
/// [`FIRST_LOOK_BYTES_PER_SECOND`]): the longest a report waits for a completion.
fn first_look_estimate(snapshot: &Path) -> std::time::Duration {
    let bytes = std::fs::metadata(snapshot).map(|m| m.len()).unwrap_or(0);
    std::time::Duration::from_secs_f64(bytes as f64 / FIRST_LOOK_BYTES_PER_SECOND as f64)
}

/// How long the process holding `snapshot`'s lock (a completion) has run: the first look that
/// answered and went on to complete the index started it, forked at its start. From the kernel's
/// list of locks (`/proc/locks`: the holder's pid and the locked file's device and inode) and
/// the holder's start time; None when it cannot be known (no holder, one that has gone: a
/// `complete-index` holds the lock its parent took, or one that is not this program).
fn completion_age(snapshot: &Path) -> Option<std::time::Duration> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::metadata(snapshot).ok()?;
    let locked = format!("{:02x}:{:02x}:{}", libc::major(file.dev()), libc::minor(file.dev()), file.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // `1: FLOCK  ADVISORY  WRITE 4711 fd:01:1234567 0 EOF` (a waiter's line has `->` after the number).
    let holder: u32 = locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields[..] {
            [_, "FLOCK", _, "WRITE", pid, file, ..] if file == locked => pid.parse().ok(),
            _ => None,
        }
    })?;
    // Another program holding the lock says nothing of how long a first look takes.
    if std::fs::read_link(format!("/proc/{holder}/exe")).ok()? != std::env::current_exe().ok()? {
        return None;
    }
    // Field 22 of its stat, after the command's name: its start, in clock ticks since boot.
    let stat = std::fs::read_to_string(format!("/proc/{holder}/stat")).ok()?;
    let started: f64 = stat.rsplit_once(") ")?.1.split(' ').nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| std::time::Duration::from_secs_f64((uptime - started / ticks as f64).max(0.0)))
}

/// Whether a completion of `snapshot`'s index runs: it holds an exclusive `flock` on the
/// snapshot file (a shared one is refused meanwhile).
fn completion_running(snapshot: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::File::open(snapshot) else { return false };
    // SAFETY: flock on a descriptor we own; released when the file closes, below.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) != 0 }
}

/// The full analysis of a snapshot, for what its index does not hold (see the module's
/// documentation): the one place a command analyses a snapshot other than to build its index.
/// Callers analyse each snapshot once and keep what they need of it.
pub fn analyse<'s>(snap: &'s Snapshot, progress: &Progress) -> anyhow::Result<heapsnap_analyze::Analysis<'s>> {
    // The analysis allocates and frees many big arrays: let glibc reuse them (see mem.rs).
    heapsnap_analyze::tune_allocator();
    let timer = heapsnap_analyze::PhaseTimer::start("provider");
    let analysis = heapsnap_analyze::Analysis::new(snap, progress)?;
    timer.lap("a full analysis (what no index holds)");
    Ok(analysis)
}

/// Calls `f` with the diff's classification of the snapshot at `path` saved in its index
/// (the index built, to the diff's level, when there is none): the diff, and the flame graph
/// by path signature, read it instead of analysing. `None` when the saved sections fail
/// their checks (said on stderr; the caller analyses).
pub fn with_saved_profile<T>(
    loader: &dyn Loader,
    path: &Path,
    f: impl FnOnce(&Snapshot, &heapsnap_analyze::diff::SavedProfile) -> T,
) -> anyhow::Result<Option<T>> {
    let ix = loader.indexed(path, Needs::Diff)?;
    let view = match ix.view(Needs::Diff) {
        Ok(view) => view,
        Err(e) => {
            eprintln!("heapsnap: ignoring the diff's sections of the index of {}: {e}; analysing it", path.display());
            return Ok(None);
        }
    };
    Ok(view.diff_profile(heapsnap_analyze::GroupBy::Kind).map(|saved| f(&ix.snap, saved)))
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

#[cfg(test)]
mod tests {
    use super::completion_turn_in;

    /// Completions take turns: a second one waits until the first is done.
    #[test]
    fn completions_take_turns() {
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("heapsnap");
        let first = completion_turn_in(&dir).expect("a lock");
        let (tx, rx) = std::sync::mpsc::channel();
        let in_second = dir.clone();
        let second = std::thread::spawn(move || {
            let turn = completion_turn_in(&in_second);
            tx.send(()).unwrap();
            turn.is_some()
        });
        assert!(rx.recv_timeout(std::time::Duration::from_millis(300)).is_err(), "the second ran alongside the first");
        drop(first);
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the second's turn once the first ended");
        assert!(second.join().unwrap());
        let lock = dir.join("completing.lock");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(lock).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
