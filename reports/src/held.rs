//! A second look answered by the process that holds the snapshot's analysis: the child of a
//! first look ([`crate::handover`]) keeps its analysis in memory while it saves the index, and
//! meanwhile answers the reports of other commands on the same snapshot from it, over a Unix
//! socket (started through [`crate::loader::answer_others_with`]). A command run right after a
//! first look then neither waits for the level of the index it reads nor analyses the snapshot
//! again.
//!
//! The socket lives in the cache directory (`heapsnap/held/`, owner-only), named after the
//! snapshot file (its canonical path, device, inode, size and modification time): a file
//! replaced or rewritten since (by `annotate`) has another name, and no holder. The holder
//! answers only its owner (`SO_PEERCRED`), and only a report on its own snapshot whose level of
//! the index is not saved yet; it declines anything else, and the asking command goes on as
//! it would have without a holder. The asker prints nothing until the whole answer has come.
//!
//! Protocol: the asker writes one JSON line, `{"args": [report, arg...], "cwd": DIR}` (the
//! command line after the program's name, and the directory its paths are relative to); the
//! holder replies with one byte, 255 (declined) or the exit code, and after an exit code the
//! length of the printed answer (8 bytes, little-endian) and the answer.

use crate::loader::{Loaded, Loader};
use crate::report::Format;
use heapsnap_analyze::Analysis;
use heapsnap_index::Needs;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The holder's reply when it does not answer: the asker goes on by itself.
const DECLINED: u8 = 255;

/// How long the holder waits for an asker to send its question, or to take the answer.
const QUESTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long an asker waits for a holder's answer before it goes on by itself (a holder that
/// hangs; one that dies closes the socket at once).
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// The socket of the holder of `snapshot`'s analysis, if there can be one.
fn socket_path(snapshot: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let canonical = std::fs::canonicalize(snapshot).ok()?;
    let meta = std::fs::metadata(&canonical).ok()?;
    // The asker and the holder are the same program: one hasher, with the same keys.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (&canonical, meta.dev(), meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec()).hash(&mut hasher);
    Some(heapsnap_index::store::cache_dir()?.join("held").join(format!("{:016x}.sock", hasher.finish())))
}

/// A holder answering over its socket until dropped.
pub struct Holder {
    socket: PathBuf,
    listener: UnixListener,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Holder {
    /// Stops taking questions (the socket's name goes first, so that no asker connects to a
    /// holder about to end) and waits for the answer being made, if any.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        // SAFETY: shuts down the listening socket we own: its `accept` returns with an error.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers other commands' reports on `snapshot` from `analysis` (on a thread of its own)
/// until the holder returned (a [`Holder`]) is dropped. None where the socket cannot be made.
pub fn serve(snapshot: &Path, analysis: &'static Analysis<'static>) -> Option<Box<dyn std::any::Any>> {
    use std::os::unix::fs::DirBuilderExt;
    let socket = socket_path(snapshot)?;
    let dir = socket.parent()?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).ok()?;
    if !owner_only(dir) {
        return None;
    }
    // A holder of this file that was killed left its socket.
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).ok()?;
    let held = std::fs::canonicalize(snapshot).ok()?;
    let accepting = listener.try_clone().ok()?;
    let (started, has_started) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(crate::handover::ANSWERING_THREAD.into())
        .spawn(move || {
            let _ = started.send(());
            // Answers run on workers of their own, made by this thread (so at its priority,
            // and named after it: the completion's lowering leaves them alone): the
            // completion's workers then give way to them.
            let workers =
                rayon::ThreadPoolBuilder::new().thread_name(|i| format!("{} {i}", crate::handover::ANSWERING_THREAD)).build().ok();
            // One asker at a time: each answer's memory beside the analysis, not several. An
            // asker that stalls is dropped after a while, and a report that panics costs its
            // asker only: the completion waits for this thread before it ends.
            while let Ok((stream, _)) = accepting.accept() {
                if stream.set_read_timeout(Some(QUESTION_TIMEOUT)).is_err() || stream.set_write_timeout(Some(QUESTION_TIMEOUT)).is_err() {
                    continue;
                }
                let answer = || answer_one(stream, &held, analysis);
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &workers {
                    Some(pool) => pool.install(answer),
                    None => answer(),
                }));
            }
        })
        .ok()?;
    // Named from here on (the standard library names a thread before it runs its closure).
    has_started.recv().ok()?;
    Some(Box::new(Holder { socket, listener, thread: Some(thread) }))
}

/// The question the asker writes.
#[derive(serde::Serialize, serde::Deserialize)]
struct Question {
    args: Vec<String>,
    cwd: PathBuf,
}

fn answer_one(mut stream: UnixStream, held: &Path, analysis: &'static Analysis<'static>) -> std::io::Result<()> {
    if peer_uid(&stream) != Some(own_uid()) {
        return stream.write_all(&[DECLINED]);
    }
    // A question is a command line: a megabyte is more than any.
    let mut line = String::new();
    BufReader::new((&stream).take(1 << 20)).read_line(&mut line)?;
    let reply = serde_json::from_str::<Question>(&line).ok().and_then(|q| answer(&q, held, analysis));
    match reply {
        Some((code, printed)) => {
            let mut message = Vec::with_capacity(9 + printed.len());
            message.push(code);
            message.extend_from_slice(&(printed.len() as u64).to_le_bytes());
            message.extend_from_slice(&printed);
            stream.write_all(&message)
        }
        None => stream.write_all(&[DECLINED]),
    }
}

/// The exit code and printed answer of the report `question` names, when it reads the held
/// snapshot only, through the first look's path ([`crate::loader::answer`]).
fn answer(question: &Question, held: &Path, analysis: &'static Analysis<'static>) -> Option<(u8, Vec<u8>)> {
    let report = crate::registry::find(question.args.first()?)?;
    let matches = crate::registry::subcommand(report).try_get_matches_from(&question.args).ok()?;
    let format = if matches.get_flag("json") { Format::Json } else { Format::Human };
    let loader = HeldLoader { cwd: &question.cwd, held, analysis };
    let mut printed = Vec::new();
    let passed = report.print(&matches, &loader, format, &mut printed).ok()?;
    Some((if passed { 0 } else { 1 }, printed))
}

/// What a report run by the holder reads: the held analysis, for a first look at the held
/// snapshot whose level of the index is not saved yet; anything else fails, and the holder
/// declines.
struct HeldLoader<'a> {
    cwd: &'a Path,
    held: &'a Path,
    analysis: &'static Analysis<'static>,
}

impl HeldLoader<'_> {
    fn is_held(&self, path: &Path) -> bool {
        std::fs::canonicalize(self.cwd.join(path)).is_ok_and(|p| p == self.held)
    }
}

impl Loader for HeldLoader<'_> {
    fn indexed(&self, path: &Path, _needs: Needs) -> anyhow::Result<Loaded<'_>> {
        anyhow::bail!("{}: not answered from the held analysis", path.display())
    }

    fn snapshot(&self, path: &Path) -> anyhow::Result<heapsnap_format::Snapshot> {
        anyhow::bail!("{}: not answered from the held analysis", path.display())
    }

    fn answer_first(&self, path: &Path, needs: Needs, answer: &mut dyn FnMut(&Analysis<'_>)) -> anyhow::Result<Option<Loaded<'_>>> {
        // A saved level is read as fast by the asker, without taking this process's time.
        if !self.is_held(path) || heapsnap_index::store::saved_serves(self.held, needs) {
            anyhow::bail!("{}: not answered from the held analysis", path.display());
        }
        answer(self.analysis);
        Ok(None)
    }
}

/// The answer of the holder of `snapshot`'s analysis to the command line `args` (the report's
/// name and its arguments), printed to `out`, and its exit code; None when there is no holder,
/// it declines, or its answer does not come whole (nothing is printed then).
pub fn ask(snapshot: &Path, args: &[String], out: &mut dyn Write) -> Option<u8> {
    let socket = socket_path(snapshot)?;
    let mut stream = UnixStream::connect(&socket).ok()?;
    // Only a holder of our own: a socket another user placed there answers nothing.
    if peer_uid(&stream) != Some(own_uid()) {
        return None;
    }
    stream.set_read_timeout(Some(ANSWER_TIMEOUT)).ok()?;
    let question = Question { args: args.to_vec(), cwd: std::env::current_dir().ok()? };
    let mut line = serde_json::to_vec(&question).ok()?;
    line.push(b'\n');
    stream.write_all(&line).ok()?;
    let mut code = [0u8; 1];
    stream.read_exact(&mut code).ok()?;
    if code[0] == DECLINED {
        return None;
    }
    let mut length = [0u8; 8];
    stream.read_exact(&mut length).ok()?;
    let length = usize::try_from(u64::from_le_bytes(length)).ok()?;
    let mut printed = Vec::new();
    (&mut stream).take(length as u64).read_to_end(&mut printed).ok()?;
    if printed.len() != length {
        return None;
    }
    heapsnap_analyze::PhaseTimer::start("provider").lap("the answer, from the process holding the analysis");
    out.write_all(&printed).ok()?;
    Some(code[0])
}

/// Whether `dir` is ours and closed to everyone else (one made by another user, or opened up,
/// is not used).
fn owner_only(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == own_uid() && m.mode() & 0o077 == 0)
}

fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The user id of the process at the other end of `stream`.
fn peer_uid(stream: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which has that size.
    let got = unsafe {
        libc::getsockopt(stream.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len)
    };
    (got == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some(cred.uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn holders_live_only_in_a_directory_closed_to_others() {
        let dir = tempfile::tempdir().unwrap();
        let held = dir.path().join("held");
        std::fs::create_dir(&held).unwrap();
        std::fs::set_permissions(&held, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(owner_only(&held));
        std::fs::set_permissions(&held, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!owner_only(&held), "a directory others can read");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&held, &link).unwrap();
        std::fs::set_permissions(&held, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(!owner_only(&link), "a symbolic link to one");
    }

    #[test]
    fn the_peer_of_a_socket_is_known() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a), Some(own_uid()));
    }
}
