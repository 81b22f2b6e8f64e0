//! Copy-on-write captures (`--capture fork`) that the target never notices: no SIGCHLD, no child
//! for its `waitpid(-1)`, no zombie, even when the dumper is killed in the middle; `auto` copies
//! where the fork may not fit under a memory limit or the kernel refuses it, and says why.
//! (That a fork snapshot equals the copy of the same moment is checked for every sample, in
//! `check_sample_at`; under load, in dump_stress.rs.)

use crate::dump_support::*;
use heapsnap_format::Snapshot;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Counts the SIGCHLDs it gets and the children its `waitpid(-1, WNOHANG)` finds, while it
/// allocates; a line on stdin makes it print both and exit.
const WATCHES_ITS_CHILDREN: &str = r#"
let sigchld = ref 0
let waited = ref 0
let () = Sys.set_signal Sys.sigchld (Sys.Signal_handle (fun _ -> incr sigchld))
let keep = ref []
let rec loop i =
  keep := List.init 100 (fun j -> (i, j, string_of_int j)) :: (if i mod 100 = 0 then [] else !keep);
  (match Unix.waitpid [Unix.WNOHANG] (-1) with
   | (0, _) -> ()
   | _ -> incr waited
   | exception Unix.Unix_error ((Unix.ECHILD | Unix.EINTR), _, _) -> ());
  match Unix.select [Unix.stdin] [] [] 0.001 with
  | [], _, _ -> loop (i + 1)
  | _ -> ()
  | exception Unix.Unix_error (Unix.EINTR, _, _) -> loop (i + 1)
let () =
  print_endline "READY";
  loop 0;
  Printf.printf "SIGCHLD %d WAITED %d KEPT %d\n%!" !sigchld !waited (List.length !keep)
"#;

/// Holds about MB megabytes of live data and waits for a line on stdin.
const HOLDS_A_HEAP: &str = r#"
let () =
  let mb = int_of_string Sys.argv.(1) in
  let data = Array.init (mb * 1024) (fun i -> Bytes.make 1000 (Char.chr (i land 255))) in
  print_endline "READY";
  ignore (input_line stdin);
  Printf.printf "%d\n" (Array.length data)
"#;

/// Maps the file named by its argument shared (a bigarray), writes to it, and waits.
const MAPS_A_FILE_SHARED: &str = r#"
let () =
  let fd = Unix.openfile Sys.argv.(1) [Unix.O_RDWR; Unix.O_CREAT] 0o600 in
  let a = Bigarray.array1_of_genarray (Unix.map_file fd Bigarray.char Bigarray.c_layout true [| 1 lsl 20 |]) in
  a.{0} <- 'x';
  print_endline "READY";
  ignore (input_line stdin);
  Printf.printf "%c\n" a.{0}
"#;

fn start(exe: &Path, args: &[&str]) -> (KillOnDrop, BufReader<std::process::ChildStdout>) {
    start_command(Command::new(exe).args(args))
}

/// Starts `command` with stdin and stdout piped, and waits for its READY line.
fn start_command(command: &mut Command) -> (KillOnDrop, BufReader<std::process::ChildStdout>) {
    let mut child = KillOnDrop(command.stdin(Stdio::piped()).stdout(Stdio::piped()).dies_with_test().spawn().expect("start"));
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "READY");
    (child, stdout)
}

/// Writes `line` to the program, reads the rest of its output, and checks that it exits 0.
fn release(child: &mut KillOnDrop, stdout: &mut BufReader<std::process::ChildStdout>, line: &[u8]) -> String {
    child.0.stdin.as_mut().unwrap().write_all(line).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(stdout, &mut rest).unwrap();
    assert!(child.0.wait().unwrap().success(), "{rest}");
    rest.trim().to_string()
}

/// Waits (up to 5 s) until process `pid` is running untraced with no child left.
fn assert_unharmed(pid: i32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let tracer = proc_status_field(pid, "TracerPid:").unwrap_or_else(|| panic!("{what}: the target is gone"));
        let state = proc_status_field(pid, "State:").unwrap_or_default();
        let children: String = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| tasks.flatten().map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default()).collect())
            .unwrap_or_default();
        assert!(!state.starts_with('Z') && !state.starts_with('X'), "{what}: the target died");
        let stopped = state.starts_with('t') || state.starts_with('T');
        if tracer == "0" && !stopped && children.trim().is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: tracer {tracer}, state {state}, children {children:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A small pseudo-random sequence (the seed is printed, to replay a failure).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn fork_dumps_are_invisible_to_a_program_that_watches_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_ocaml(dir.path(), "watcher", WATCHES_ITS_CHILDREN, &["unix"]);
    let (mut child, mut stdout) = start(&exe, &[]);
    let pid = child.0.id() as i32;
    for i in 0..50 {
        let path = dir.path().join("w.snap");
        let report = dump_ok(pid, &path, &["--capture", "fork", "--no-dwarf"]);
        assert_eq!(report["capture"]["method"], "fork", "dump {i}: {report}");
        assert!(report["capture"]["child_lived_ns"].as_u64().unwrap() > 0, "dump {i}: {report}");
        assert_unharmed(pid, &format!("fork dump {i}"));
        if i % 10 == 0 {
            let snap = Snapshot::open(&path).unwrap_or_else(|e| panic!("dump {i}: {e}"));
            reachability(&snap).assert_well_formed(&format!("fork dump {i}"));
        }
    }
    // Now kill the dumper at each step of a fork, at random moments of it: with the world
    // stopped before the fork, with the child stopped and the world still stopped, while the
    // child is read, after the child is killed. Each step waits there, saying so (a hook only
    // tests turn on).
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("kill points: seed {seed}");
    let mut random = Lcg(seed);
    let steps = ["BeforeFork", "Forked", "Reading", "Killed"];
    let step_delay_ms = 40;
    for i in 0..50 {
        let step = steps[i % steps.len()];
        let mut dumper = Command::new(heapsnap())
            .args(["dump", "--pid", &pid.to_string(), "--capture", "fork", "--no-dwarf", "-o"])
            .arg(dir.path().join("killed.snap"))
            .env("HEAPSNAP_TEST_FORK_DELAY_MS", step_delay_ms.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(dumper.stderr.take().unwrap());
        let want = format!("heapsnap: test: at {step}");
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap() > 0 && line.trim() != want {
            line.clear();
        }
        assert_eq!(line.trim(), want, "dump {i}: the dumper ended before {step}");
        let after = Duration::from_millis(random.below(step_delay_ms));
        std::thread::sleep(after);
        let _ = dumper.kill();
        let _ = dumper.wait();
        assert_unharmed(pid, &format!("dumper killed {after:?} into {step} (dump {i}, seed {seed})"));
    }
    let rest = release(&mut child, &mut stdout, b"stop\n");
    let rest = rest.as_str();
    assert!(rest.starts_with("SIGCHLD 0 WAITED 0 KEPT "), "the program noticed the forks: {rest}");
}

/// A cgroup of `controller` holding process `pid`; `None` where cgroups cannot be made (not
/// root, or no such controller mounted writable).
fn cgroup_holding(controller: &str, pid: i32) -> Option<TestCgroup> {
    let cgroup = TestCgroup::make_any(controller).ok()?;
    cgroup.add(pid).ok()?;
    Some(cgroup)
}

/// `auto` copies process `pid` (into `path`), saying why in its report and in the snapshot's
/// metadata, with every one of `why_has` in it; an explicit `--capture fork` fails with every
/// one of `refusal_has` in its message. Returns the copy.
fn assert_copied_not_forked(pid: i32, path: &Path, why_has: &[&str], refusal_has: &[&str]) -> Snapshot {
    let auto = dump_ok(pid, path, &["--no-dwarf"]);
    assert_eq!(auto["capture"]["method"], "copy", "{auto}");
    let why = auto["capture"]["why_copy"].as_str().unwrap_or_default();
    assert!(why_has.iter().all(|w| why.contains(w)), "{why}");
    let snap = Snapshot::open(path).unwrap();
    assert_eq!(snap.metadata().capture.as_ref().and_then(|c| c.why_copy.as_deref()), Some(why), "the metadata keeps why");
    let refused = dump_error(pid, path, &["--capture", "fork", "--no-dwarf"]);
    assert!(refusal_has.iter().all(|r| refused.contains(r)), "{refused}");
    snap
}

/// The message of a failed `heapsnap dump`.
fn dump_error(pid: i32, out: &Path, extra: &[&str]) -> String {
    let o = dump(pid, out, extra);
    assert!(!o.status.success(), "heapsnap dump {extra:?} should have failed");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn auto_copies_and_fork_refuses_when_a_memory_limit_leaves_too_little_room() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_ocaml(dir.path(), "holder", HOLDS_A_HEAP, &[]);
    let (mut child, mut stdout) = start(&exe, &["96"]);
    let pid = child.0.id() as i32;
    let path = dir.path().join("h.snap");
    // With room: auto forks (96 MB is above its threshold).
    let roomy = dump_ok(pid, &path, &["--no-dwarf"]);
    assert_eq!(roomy["capture"]["method"], "fork", "{roomy}");
    let Some(cgroup) = cgroup_holding("memory", pid) else {
        not_covered("memory limits: cannot make a memory cgroup here (needs root and a writable cgroup hierarchy)");
        return;
    };
    // A limit with less room than the target's private memory: charges stay where they were
    // made, so the usage here starts near zero and the limit is what is left.
    let (limit_file, limit) =
        if cgroup.dir.join("memory.max").exists() { ("memory.max", 32 << 20) } else { ("memory.limit_in_bytes", 32 << 20) };
    cgroup.set(limit_file, &limit.to_string());
    assert_copied_not_forked(pid, &path, &["memory cgroup", "MiB"], &["not forking", "memory cgroup"]);
    assert_unharmed(pid, "dumps under a memory limit");
    drop(cgroup);
    assert_eq!(release(&mut child, &mut stdout, b"\n"), (96 * 1024).to_string());
}

#[test]
fn a_fork_the_kernel_refuses_falls_back_to_a_copy_under_auto_and_fails_when_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_ocaml(dir.path(), "holder", HOLDS_A_HEAP, &[]);
    let (mut child, mut stdout) = start(&exe, &["80"]);
    let pid = child.0.id() as i32;
    let Some(cgroup) = cgroup_holding("pids", pid) else {
        not_covered("refused forks: cannot make a pids cgroup here (needs root and a writable cgroup hierarchy)");
        return;
    };
    // As many tasks as it has: a clone is refused (EAGAIN).
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count();
    cgroup.set("pids.max", &threads.to_string());
    let path = dir.path().join("p.snap");
    let snap = assert_copied_not_forked(pid, &path, &["clone failed", "EAGAIN", "pids.max"], &["could not fork", "EAGAIN"]);
    reachability(&snap).assert_exact("a copy after a refused fork");
    assert_unharmed(pid, "refused forks");
    drop(cgroup);
    assert_eq!(release(&mut child, &mut stdout, b"\n"), (80 * 1024).to_string());
}

#[test]
fn the_report_names_the_memory_a_fork_does_not_freeze() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_ocaml(dir.path(), "shared", MAPS_A_FILE_SHARED, &["unix"]);
    let file = dir.path().join("shared.bin");
    let (mut child, mut stdout) = start(&exe, &[file.to_str().unwrap()]);
    let pid = child.0.id() as i32;
    let path = dir.path().join("s.snap");
    let report = dump_ok(pid, &path, &["--capture", "fork", "--no-dwarf"]);
    let not_frozen: Vec<&str> = report["capture"]["not_frozen"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(not_frozen.iter().any(|n| n.contains("MAP_SHARED") && n.contains(file.to_str().unwrap())), "{not_frozen:?}");
    let snap = Snapshot::open(&path).unwrap();
    assert_eq!(snap.metadata().capture.as_ref().map(|c| c.not_frozen.len()), Some(not_frozen.len()));
    reachability(&snap).assert_exact("a program with a shared mapping, by fork");
    // Copied, nothing is said of it.
    let copied = dump_ok(pid, &path, &["--capture", "copy", "--no-dwarf"]);
    assert_eq!(copied["capture"]["not_frozen"].as_array().map(Vec::len), Some(0), "{copied}");
    assert_unharmed(pid, "fork of a program with a shared mapping");
    assert_eq!(release(&mut child, &mut stdout, b"\n"), "x");
}

/// Starts `exe` under a seccomp filter (one that allows everything: what matters is that there
/// is one).
fn start_under_seccomp(exe: &Path, args: &[&str]) -> (KillOnDrop, BufReader<std::process::ChildStdout>) {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(exe);
    command.args(args);
    // SAFETY: between fork and exec the closure only makes async-signal-safe system calls, on
    // data on its stack.
    unsafe {
        command.pre_exec(|| {
            let allow = [libc::sock_filter { code: (libc::BPF_RET | libc::BPF_K) as u16, jt: 0, jf: 0, k: libc::SECCOMP_RET_ALLOW }];
            let program = libc::sock_fprog { len: 1, filter: allow.as_ptr() as *mut libc::sock_filter };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &program as *const libc::sock_fprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    start_command(&mut command)
}

#[test]
fn a_program_under_seccomp_is_copied_not_forked() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_ocaml(dir.path(), "holder", HOLDS_A_HEAP, &[]);
    let (mut child, mut stdout) = start_under_seccomp(&exe, &["80"]);
    let pid = child.0.id() as i32;
    assert_eq!(proc_status_field(pid, "Seccomp:").as_deref(), Some("2"));
    let path = dir.path().join("s.snap");
    assert_copied_not_forked(pid, &path, &["seccomp"], &["not forking", "seccomp"]);
    assert_unharmed(pid, "dumps under seccomp");
    assert_eq!(release(&mut child, &mut stdout, b"\n"), (80 * 1024).to_string());
}
