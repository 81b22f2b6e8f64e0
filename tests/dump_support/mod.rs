//! Shared by the end-to-end tests: building and driving the sample programs, running the dumper,
//! and a minimal reachability oracle over a snapshot (until `heapsnap verify --strict` exists).
#![allow(dead_code)]

mod cgroup;
mod checks;
mod oracle;
#[allow(dead_code)]
pub mod series;
#[allow(unused_imports)]
pub use cgroup::{CgroupVersion, TestCgroup};
#[allow(unused_imports)]
pub use checks::*;
/// Where the toolchains and the samples are (shared with the other crates' tests).
#[allow(unused_imports)]
pub use heapsnap_testkit::samples::{
    available_toolchains_where, not_covered, repo, rhb16_samples_dir, samples_dir, toolchain, toolchain_prefix, toolchain_samples,
    toolchains, version_of,
};
#[allow(unused_imports)]
pub use oracle::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Programs a test starts die with the test (SIGKILL through `PR_SET_PDEATHSIG` when the
/// thread that started them ends): a test binary killed by a timeout, or a test that panics
/// before it kills its program, leaves no process behind.
pub trait DiesWithTest {
    fn dies_with_test(&mut self) -> &mut Self;
}

impl DiesWithTest for Command {
    fn dies_with_test(&mut self) -> &mut Command {
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec the closure only makes an async-signal-safe system call.
        unsafe {
            self.pre_exec(|| match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) {
                -1 => Err(std::io::Error::last_os_error()),
                _ => Ok(()),
            })
        }
    }
}

pub fn heapsnap() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_heapsnap"))
}

/// The programs memtrace/scripts/build-ocaml-programs.sh builds (memtrace itself, installed
/// in their `lib/`), or `None` (said) when memtrace's source is missing.
pub fn memtrace_programs() -> Option<PathBuf> {
    let out = Command::new(repo().join("memtrace/scripts/build-ocaml-programs.sh")).output().expect("run build-ocaml-programs.sh");
    match out.status.code() {
        Some(0) => Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())),
        Some(3) => {
            not_covered(String::from_utf8_lossy(&out.stderr).trim());
            None
        }
        _ => panic!("build-ocaml-programs.sh failed: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

/// Compiles an OCaml program (with -g) into `dir`; returns the executable.
pub fn compile_ocaml(dir: &Path, name: &str, source: &str, libs: &[&str]) -> PathBuf {
    compile_ocaml_with_c(dir, name, source, libs, None)
}

/// Compiles an OCaml program (with -g), and C stubs for it if given, into `dir`; returns the
/// executable.
pub fn compile_ocaml_with_c(dir: &Path, name: &str, source: &str, libs: &[&str], c_stubs: Option<&str>) -> PathBuf {
    compile_ocaml_by(&toolchain(), dir, name, source, libs, c_stubs)
}

/// Compiles an OCaml program with the toolchain at `prefix`.
pub fn compile_ocaml_by(prefix: &Path, dir: &Path, name: &str, source: &str, libs: &[&str], c_stubs: Option<&str>) -> PathBuf {
    let ml = dir.join(format!("{name}.ml"));
    std::fs::write(&ml, source).expect("write source");
    let c = dir.join(format!("{name}_stubs.c"));
    if let Some(c_stubs) = c_stubs {
        std::fs::write(&c, c_stubs).expect("write C stubs");
    }
    let exe = dir.join(name);
    let ocamlfind_free: Vec<String> = libs.iter().map(|l| format!("{l}.cmxa")).collect();
    let mut cmd = Command::new(prefix.join("bin/ocamlopt"));
    cmd.current_dir(dir).arg("-g");
    if libs.contains(&"threads") {
        cmd.args(["-I", "+threads", "-I", "+unix", "unix.cmxa"]);
    } else if libs.contains(&"unix") {
        cmd.args(["-I", "+unix"]);
    }
    if c_stubs.is_some() {
        cmd.arg(&c); // ocamlopt hands it to the C compiler, with the runtime's headers
    }
    let out = cmd.args(&ocamlfind_free).arg(&ml).arg("-o").arg(&exe).output().expect("run ocamlopt");
    assert!(out.status.success(), "ocamlopt failed: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// Compiles an OCaml program to bytecode (`ocamlc -g`) with the toolchain at `prefix`;
/// returns the bytecode file, which runs through its `#!` line.
pub fn compile_bytecode_by(prefix: &Path, dir: &Path, name: &str, source: &str) -> PathBuf {
    compile_bytecode_linking(prefix, dir, name, source, &[])
}

/// [`compile_bytecode_by`], linked with systhreads (`threads.cma`, which `ocamlrun` loads as
/// `dllthreads.so`).
pub fn compile_bytecode_with_threads(prefix: &Path, dir: &Path, name: &str, source: &str) -> PathBuf {
    compile_bytecode_linking(prefix, dir, name, source, &["-I", "+threads", "-I", "+unix", "unix.cma", "threads.cma"])
}

fn compile_bytecode_linking(prefix: &Path, dir: &Path, name: &str, source: &str, libraries: &[&str]) -> PathBuf {
    let ml = dir.join(format!("{name}.ml"));
    std::fs::write(&ml, source).expect("write source");
    let exe = dir.join(name);
    let out = Command::new(prefix.join("bin/ocamlc"))
        .current_dir(dir)
        .arg("-g")
        .args(libraries)
        .arg(&ml)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run ocamlc");
    assert!(out.status.success(), "ocamlc failed: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// A program whose C stub allocates a block with `caml_alloc_small` and then, before writing its
/// fields, prints `READY` and spins until killed: the fields hold what the minor heap held in
/// its previous cycle, pointers to an array's element that lie in the middle of the new block.
pub fn compile_uninitialised_block_program(dir: &Path) -> PathBuf {
    const PROGRAM: &str = r#"
external alloc_and_wait : unit -> int array = "heapsnap_test_alloc_and_wait"
let () =
  Gc.minor ();
  (* The minor heap's first blocks this cycle: a ref, then an array of 20 pointers to it. *)
  let r = ref (Array.length Sys.argv) in
  ignore (Sys.opaque_identity (Array.make 20 r));
  Gc.minor ();
  print_int (Array.length (alloc_and_wait ()))
"#;
    const STUBS: &str = r#"
#include <unistd.h>
#include <caml/mlvalues.h>
#include <caml/alloc.h>
volatile int heapsnap_test_release = 0;
value heapsnap_test_alloc_and_wait(value unit)
{
  (void) unit;
  value b = caml_alloc_small(10, 0); /* where the ref and the array's last elements were */
  if (write(1, "READY\n", 6) != 6) return Val_unit;
  while (!heapsnap_test_release) {}
  for (int i = 0; i < 10; i++) Field(b, i) = Val_int(i);
  return b;
}
"#;
    compile_ocaml_with_c(dir, "uninitialised_block", PROGRAM, &[], Some(STUBS))
}

pub fn sample_path(name: &str) -> PathBuf {
    samples_dir().join(name)
}

/// A sample started with `--pause`, driven through its READY protocol.
pub struct Sample {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub lines: Vec<String>,
}

impl Sample {
    pub fn start(program: &Path, args: &[&str]) -> Sample {
        Sample::start_with_env(program, args, &[])
    }

    /// [`Sample::start`] with these variables added to its environment.
    pub fn start_with_env(program: &Path, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Sample {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .arg("--pause")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .dies_with_test()
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Sample { child, stdin, stdout, lines: Vec::new() }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Reads stdout until the line `READY step`.
    pub fn wait_ready(&mut self, step: u32) {
        let want = format!("READY {step}");
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read sample stdout");
            assert!(n > 0, "sample ended before {want}; output so far: {:?}", self.lines);
            let line = line.trim_end().to_string();
            self.lines.push(line.clone());
            if line == want {
                return;
            }
        }
    }

    /// Lets the sample go on from its current READY point.
    pub fn release(&mut self) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(b"\n");
            let _ = stdin.flush();
        }
    }

    /// Stops pausing (EOF on stdin) and waits for the end; returns all stdout lines and status.
    pub fn finish(mut self) -> (Vec<String>, ExitStatus) {
        self.stdin.take();
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).expect("read sample stdout");
        self.lines.extend(rest.lines().map(str::to_string));
        let status = self.child.wait().expect("wait for sample");
        (std::mem::take(&mut self.lines), status)
    }
}

impl Drop for Sample {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a program without pausing, to learn its normal output.
pub fn reference_output(program: &Path, args: &[&str]) -> (Vec<String>, ExitStatus) {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().expect("run sample");
    (String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect(), out.status)
}

/// `heapsnap dump --pid PID -o OUT --json EXTRA...`.
pub fn dump(pid: i32, out: &Path, extra: &[&str]) -> Output {
    Command::new(heapsnap())
        .args(["dump", "--pid", &pid.to_string(), "-o"])
        .arg(out)
        .arg("--json")
        .args(extra)
        .output()
        .expect("run heapsnap dump")
}

/// `heapsnap COMMAND SNAPSHOTS... ARGS... --json`, asserting success; its JSON report.
pub fn analyse(command: &str, snapshots: &[&Path], args: &[&str]) -> serde_json::Value {
    let out = Command::new(heapsnap()).arg(command).args(snapshots).args(args).arg("--json").output().expect("run heapsnap");
    assert!(out.status.success(), "heapsnap {command} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("heapsnap {command}: bad JSON ({e})"))
}

/// Like [`dump`], asserting success; returns the JSON report.
pub fn dump_ok(pid: i32, out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = dump(pid, out, extra);
    assert!(o.status.success(), "heapsnap dump failed: {}\n{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
    serde_json::from_slice(&o.stdout).expect("dump --json prints JSON")
}

/// `heapsnap verify [--strict] --json SNAPSHOT`: the analyser's own check of a snapshot.
pub fn verify(path: &Path, strict: bool) -> serde_json::Value {
    let mut cmd = Command::new(heapsnap());
    cmd.arg("verify").arg(path).arg("--json");
    if strict {
        cmd.arg("--strict");
    }
    let out = cmd.output().expect("run heapsnap verify");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("heapsnap verify printed no JSON ({e}): {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

/// Starts `program` (stdin closed) and waits for the `READY` line it prints first.
pub fn start_until_ready(program: &Path) -> KillOnDrop {
    let mut child =
        KillOnDrop(Command::new(program).stdin(Stdio::null()).stdout(Stdio::piped()).dies_with_test().spawn().expect("start program"));
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().expect("piped stdout")).read_line(&mut line).expect("read program stdout");
    assert_eq!(line.trim(), "READY", "{} did not start", program.display());
    child
}

/// A field of `/proc/PID/status` (`"TracerPid:"`, `"State:"`), trimmed; `None` when the process
/// or the field is not there.
pub fn proc_status_field(pid: i32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string())
}

/// Asserts that process `pid` is still there, neither traced nor stopped; `who` is what might
/// have left it otherwise.
pub fn assert_running_untraced(pid: i32, who: &str) {
    let tracer = proc_status_field(pid, "TracerPid:").unwrap_or_else(|| panic!("the target is gone after {who}"));
    assert_eq!(tracer, "0", "{who} left the target traced");
    let state = proc_status_field(pid, "State:").expect("State: in /proc/PID/status");
    assert!(!state.starts_with('t') && !state.starts_with('T'), "{who} left the target stopped: {state}");
}

/// Waits until `pid` has exited (or the timeout passes); true if it did.
pub fn wait_gone(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Kills the child when the test ends, however it ends (a failed assertion must not leave a
/// busy program running, holding the test's output open).
pub struct KillOnDrop(pub Child);

/// The snapshots (`*.heapsnap`) in `dir`, by name (`heapsnap run` numbers them in order).
pub fn snapshots_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("snapshot directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "heapsnap"))
        .collect();
    found.sort();
    found
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
