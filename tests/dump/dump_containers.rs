//! A process in a container (issue 55): the program runs in new PID and mount namespaces
//! from a path that exists only inside them (a tmpfs mounted there over the host's
//! directory), and is dumped from outside by its host pid. Its executable, libraries and Dynlink
//! plugins must be read as it sees them, never the host's files at the same paths: with no
//! file there, with a different program there, with a plugin inside; captured by fork and by
//! copy; by root on the host, without CAP_SYS_ADMIN (which `/proc/PID/map_files` needs), and
//! from a sidecar in its PID namespace and a mount namespace of its own. The snapshot records
//! the namespaces.

use crate::dump_support::*;
use heapsnap_format::Snapshot;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A sample started in new PID and mount namespaces, from `app/NAME` inside.
struct Contained {
    sample: Sample,
    /// Its pid here.
    pid: i32,
    /// The path it runs from, which only its namespace has.
    exe: PathBuf,
}

/// Whether this machine lets us make PID and mount namespaces (root, and a kernel that allows
/// them); said once when it does not.
fn namespaces_available() -> bool {
    let ok = Command::new("unshare").args(["--pid", "--mount", "--fork", "--mount-proc", "true"]).status().is_ok_and(|s| s.success());
    if !ok {
        not_covered("unshare --pid --mount (root, and a kernel that allows new namespaces): a process in a container");
    }
    ok
}

/// Starts `files[0]` (with `files` copied beside it) in new PID and mount namespaces, from
/// `app/NAME` under `dir`: a tmpfs is mounted on `app` inside, so the host's `app` (which
/// `host_file`, if given, fills with a file of the program's name) is not what it sees.
fn start_contained(dir: &Path, files: &[PathBuf], host_file: Option<&Path>) -> Contained {
    start_contained_after(dir, files, host_file, ":")
}

/// [`start_contained`], running the shell commands `setup` inside first.
fn start_contained_after(dir: &Path, files: &[PathBuf], host_file: Option<&Path>, setup: &str) -> Contained {
    let app = dir.join("app");
    std::fs::create_dir_all(&app).unwrap();
    let name = files[0].file_name().unwrap().to_str().unwrap();
    if let Some(other) = host_file {
        std::fs::copy(other, app.join(name)).unwrap();
    }
    let copies: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let script = format!(
        "set -e; {setup}; mount -t tmpfs tmpfs {app}; cp {copies} {app}/; exec {app}/{name} \"$@\"",
        app = app.display(),
        copies = copies.join(" ")
    );
    let unshare_args = ["--pid", "--mount", "--fork", "--mount-proc", "--kill-child", "sh", "-c", &script, "sh"];
    // Sample adds --pause, which the script hands to the program.
    let mut sample = Sample::start(Path::new("unshare"), &unshare_args);
    sample.wait_ready(1);
    let unshare = sample.pid();
    let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
    let pid: i32 = children.trim().parse().unwrap_or_else(|_| panic!("unshare's one child: {children:?}"));
    Contained { sample, pid, exe: app.join(name) }
}

/// Who dumps a contained process.
#[derive(Clone, Copy, Debug)]
enum Dumper {
    /// Root on the host, by the process's host pid.
    Host,
    /// The same without CAP_SYS_ADMIN and CAP_CHECKPOINT_RESTORE, which `/proc/PID/map_files`
    /// needs: its files are read inside its root.
    HostWithoutSysAdmin,
    /// A sidecar (`kubectl debug --target`): in the process's PID namespace (where it is pid
    /// 1), in a mount namespace of its own (the host's files, its own `/proc`), without
    /// CAP_SYS_ADMIN.
    Sidecar,
}

const DUMPERS: [Dumper; 3] = [Dumper::Host, Dumper::HostWithoutSysAdmin, Dumper::Sidecar];

/// `heapsnap dump` of `contained` into `out` with `extra`, by `dumper`; its JSON report.
fn dump_as(dumper: Dumper, contained: &Contained, out: &Path, extra: &[&str]) -> Value {
    let without_sys_admin = |c: &mut Command| {
        c.args(["capsh", "--drop=cap_sys_admin,cap_checkpoint_restore", "--", "-c"])
            .arg(format!("exec {} \"$@\"", heapsnap().display()))
            .arg("heapsnap");
    };
    let (mut command, pid) = match dumper {
        Dumper::Host => (Command::new(heapsnap()), contained.pid),
        Dumper::HostWithoutSysAdmin => {
            let mut c = Command::new("env");
            without_sys_admin(&mut c);
            (c, contained.pid)
        }
        Dumper::Sidecar => {
            let mut c = Command::new("nsenter");
            c.args(["--target", &contained.pid.to_string(), "--pid", "--", "unshare", "--mount", "--mount-proc", "--fork"]);
            without_sys_admin(&mut c);
            (c, 1)
        }
    };
    let o = command.args(["dump", "--pid", &pid.to_string(), "-o"]).arg(out).arg("--json").args(extra).output().unwrap();
    assert!(
        o.status.success(),
        "heapsnap dump by {dumper:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    serde_json::from_slice(&o.stdout).expect("dump --json prints JSON")
}

/// What every snapshot of a contained process must be: consistent, without warnings,
/// verifying strictly, with the program's own build id and names, and the namespaces recorded
/// as `dumper` sees them.
fn check_contained(dumper: Dumper, report: &Value, path: &Path, contained: &Contained, program: &Path, what: &str) -> Snapshot {
    assert_eq!(report["consistent"], true, "{what}: {report}");
    assert_eq!(report["warnings"].as_array().map_or(0, Vec::len), 0, "{what}: {report}");
    let snap = Snapshot::open(path).unwrap_or_else(|e| panic!("{what}: the snapshot does not validate: {e}"));
    reachability(&snap).assert_exact(what);
    let v = verify(path, true);
    assert_eq!(v["ok"], true, "{what}: heapsnap verify --strict: {v}");
    let m = snap.metadata();
    assert_eq!(m.executable.as_deref(), Some(&*contained.exe.to_string_lossy()), "{what}: the executable as the program names it");
    let build_id = Command::new("readelf").arg("-n").arg(program).output().unwrap();
    let build_id = String::from_utf8_lossy(&build_id.stdout).lines().find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string));
    assert_eq!(m.build_id, build_id, "{what}: the build id of the program that runs");
    let ns = m.namespaces.as_ref().unwrap_or_else(|| panic!("{what}: no namespaces in the metadata"));
    let (pid, other_pid_namespace) = match dumper {
        Dumper::Host | Dumper::HostWithoutSysAdmin => (contained.pid as u32, true),
        Dumper::Sidecar => (1, false),
    };
    assert!(ns.other_pid_namespace == other_pid_namespace && ns.other_mount_namespace && !ns.other_root, "{what}: {ns:?}");
    assert_eq!(ns.pid_inside, Some(1), "{what}: the first process of its PID namespace");
    assert_eq!(m.pid, Some(pid), "{what}");
    let info = Command::new(heapsnap()).arg("info").arg(path).output().unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    let said = if other_pid_namespace {
        "ran in another PID namespace (pid 1 inside), mount namespace than"
    } else {
        "ran in another mount namespace than"
    };
    assert!(info.contains(said), "{what}: heapsnap info says where it ran: {info}");
    snap
}

/// The group of `top --by root` named `root`, and the bytes it retains.
fn retained_by_root(path: &Path, root: &str) -> u64 {
    let top = analyse("top", &[path], &["--by", "root", "--limit", "0"]);
    let groups = top["groups"].as_array().unwrap();
    let group = groups.iter().find(|g| g["name"] == root).unwrap_or_else(|| {
        let first: Vec<&Value> = groups.iter().take(5).map(|g| &g["name"]).collect();
        panic!("no group {root} in top --by root; the biggest are {first:?}")
    });
    group["retained"].as_u64().unwrap()
}

/// cache_leak's global at its first step: what the manifest says it retains.
fn check_cache_leak(path: &Path, what: &str) {
    let sample = heapsnap_testkit::samples::manifest_sample("cache_leak");
    let expect = &sample["roots"][0]["retained_bytes"][0];
    let (min, max) = (expect["min"].as_u64().unwrap(), expect["max"].as_u64().unwrap());
    let retained = retained_by_root(path, "Cache_leak.1");
    assert!((min..=max).contains(&retained), "{what}: Cache_leak.1 retains {retained}, expected {min}..={max}");
}

/// Dumps the contained cache_leak both ways (fork and copy), as root and as a sidecar, checks
/// each snapshot, then lets the program finish as it would have.
fn dump_contained_cache_leak(case: &str) {
    if !namespaces_available() {
        return;
    }
    let _one = one_core_at_a_time();
    let program = sample_path("cache_leak");
    let (expected, expected_status) = reference_output(&program, &[]);
    let dir = tempfile::tempdir().unwrap();
    let contained = start_contained(dir.path(), std::slice::from_ref(&program), None);
    for dumper in DUMPERS {
        for capture in ["fork", "copy"] {
            let what = format!("{case}, --capture {capture}, by {dumper:?}");
            let path = dir.path().join(format!("{capture}-{dumper:?}.snap"));
            let report = dump_as(dumper, &contained, &path, &["--capture", capture]);
            assert_eq!(report["capture"]["method"], capture, "{what}: {report}");
            check_contained(dumper, &report, &path, &contained, &program, &what);
            check_cache_leak(&path, &what);
        }
    }
    let (lines, status) = contained.sample.finish();
    assert_eq!(lines, expected, "{case}: output changed by the dumps");
    assert_eq!(status.code(), expected_status.code(), "{case}: exit status");
}

#[test]
fn a_contained_program_with_no_file_at_its_path_here() {
    dump_contained_cache_leak("no file at the path here");
}

/// Holds its domain in C code of its own executable (a stub that spins), so that the stop is
/// judged by unwinding that code with the executable's unwind tables, and by the owner of the
/// domain's lock, a thread id of its own PID namespace. The host's file at its path is another
/// OCaml program (long_list): read instead, its unwind tables would never let the stop look
/// consistent.
const SPINS_IN_C: &str = r#"
external spin : unit -> unit = "heapsnap_test_spin"
let keep = ref []
let () =
  keep := List.init (999 + Array.length Sys.argv) string_of_int;
  spin ();
  print_int (List.length !keep)
"#;

const SPINS_IN_C_STUBS: &str = r#"
#include <unistd.h>
#include <caml/mlvalues.h>
volatile int heapsnap_test_release = 0;
value heapsnap_test_spin(value unit)
{
  (void) unit;
  if (write(1, "READY 1\n", 8) != 8) return Val_unit;
  while (!heapsnap_test_release) {}
  return Val_unit;
}
"#;

#[test]
fn a_contained_program_in_its_own_c_code_with_another_program_at_its_path_here() {
    if !namespaces_available() {
        return;
    }
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    std::fs::create_dir(&build).unwrap();
    let program = compile_ocaml_with_c(&build, "spins_in_c", SPINS_IN_C, &[], Some(SPINS_IN_C_STUBS));
    let contained = start_contained(dir.path(), std::slice::from_ref(&program), Some(&sample_path("long_list")));
    for dumper in DUMPERS {
        for capture in ["fork", "copy"] {
            let what = format!("in its C code, --capture {capture}, by {dumper:?}");
            let path = dir.path().join(format!("{capture}-{dumper:?}.snap"));
            let report = dump_as(dumper, &contained, &path, &["--capture", capture, "--require-consistent"]);
            assert_eq!(report["attempts"], 1, "{what}: a consistent stop at once: {report}");
            check_contained(dumper, &report, &path, &contained, &program, &what);
            let strings = retained_by_root(&path, "Spins_in_c.0");
            assert!(strings >= 1000 * 24, "{what}: Spins_in_c.keep retains its 1000 strings (with --pause): {strings}");
        }
    }
}

/// A bytecode program inside, run through its `#!` line by an `ocamlrun` both sides have: the
/// interpreter reads the program from the path it was started by, which only the namespace
/// has; its globals, frames and closures are named from that file, read inside.
#[test]
fn a_contained_bytecode_program_is_read_inside() {
    if !namespaces_available() {
        return;
    }
    let _one = one_core_at_a_time();
    let program = samples_dir().join("bytecode/cache_leak");
    let dir = tempfile::tempdir().unwrap();
    let contained = start_contained(dir.path(), std::slice::from_ref(&program), None);
    for dumper in DUMPERS {
        let what = format!("bytecode, by {dumper:?}");
        let path = dir.path().join(format!("{dumper:?}.snap"));
        let report = dump_as(dumper, &contained, &path, &["--capture", "copy"]);
        assert_eq!(report["bytecode"], true, "{what}: {report}");
        assert_eq!(report["consistent"], true, "{what}: {report}");
        let said = format!("{}{}", report["notes"], report["warnings"]);
        assert!(
            !said.contains("not named") && !said.contains(&*contained.exe.to_string_lossy()),
            "{what}: the program's file was read: {report}"
        );
        let v = verify(&path, true);
        assert_eq!(v["ok"], true, "{what}: heapsnap verify --strict: {v}");
        let top = analyse("top", &[&path], &["--by", "root", "--limit", "3"]);
        let first = top["groups"][0]["name"].as_str().unwrap_or_default();
        assert!(first.contains("Cache_leak.cache"), "{what}: the cache is named from the bytecode's globals: {top}");
        assert!(Snapshot::open(&path).unwrap().metadata().namespaces.is_some(), "{what}");
    }
}

/// Runs a binutils command, asserting success.
fn binutils(command: &mut Command) {
    let o = command.output().expect("run binutils");
    assert!(o.status.success(), "{command:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A stripped program's debug file, which only its root holds, is found there: by its build id
/// under its `/usr/lib/debug` (a tmpfs mounted there inside hides the host's), and by its
/// debuglink next to it. The host has neither, and without them the dump would read the
/// runtime's layouts from heapsnap's tables.
#[test]
fn a_contained_programs_debug_file_is_found_inside_it() {
    if !namespaces_available() {
        return;
    }
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build");
    std::fs::create_dir(&build).unwrap();
    let (stripped, split, debug) = (build.join("stripped/cache_leak"), build.join("split/cache_leak"), build.join("cache_leak.debug"));
    for copy in [&stripped, &split] {
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::copy(sample_path("cache_leak"), copy).unwrap();
    }
    binutils(Command::new("objcopy").arg("--only-keep-debug").arg(&split).arg(&debug));
    binutils(Command::new("strip").arg(&stripped));
    binutils(
        Command::new("objcopy")
            .args(["--strip-debug", "--strip-unneeded"])
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&split),
    );
    let id = heapsnap_dump::elf::Executable::open(&stripped).unwrap().build_id.expect("samples have a build id");
    let by_id = format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]);
    assert!(!Path::new(&by_id).exists(), "{by_id} is on the host: the test would not show where it was found");

    let setup = format!(
        "mkdir -p /usr/lib/debug; mount -t tmpfs tmpfs /usr/lib/debug; mkdir -p {}; cp {} {by_id}",
        Path::new(&by_id).parent().unwrap().display(),
        debug.display()
    );
    for (case, program, contained) in [
        (
            "by build id in its root",
            &stripped,
            start_contained_after(&dir.path().join("by-id"), std::slice::from_ref(&stripped), None, &setup),
        ),
        ("by debuglink next to it", &split, start_contained(&dir.path().join("by-link"), &[split.clone(), debug.clone()], None)),
    ] {
        for dumper in DUMPERS {
            let what = format!("{case}, by {dumper:?}");
            let path = dir.path().join(format!("{}-{dumper:?}.snap", case.replace(' ', "-")));
            let report = dump_as(dumper, &contained, &path, &["--capture", "copy"]);
            assert_eq!(report["layouts_from"], "debug_file", "{what}: the debug file inside was used: {report}");
            check_contained(dumper, &report, &path, &contained, program, &what);
            check_cache_leak(&path, &what);
            let snap = Snapshot::open(&path).unwrap();
            assert!(snap.dwarf_section(".debug_line").is_some(), "{what}: the debug file's line tables are in the snapshot");
        }
    }
}

/// A Dynlink plugin inside: its static data is captured from the file the program loaded,
/// read inside its namespace (the host's path holds a different shared object: not read).
#[test]
fn a_contained_program_with_a_dynlink_plugin() {
    if !namespaces_available() {
        return;
    }
    let _one = one_core_at_a_time();
    let program = sample_path("dynlink_plugin");
    let plugin = program.with_file_name("plugin_data.cmxs");
    let dir = tempfile::tempdir().unwrap();
    // Another shared object where the host would look for the plugin.
    std::fs::create_dir_all(dir.path().join("app")).unwrap();
    let other_library = find_shared_object();
    std::fs::copy(&other_library, dir.path().join("app/plugin_data.cmxs")).unwrap();
    let contained = start_contained(dir.path(), &[program.clone(), plugin], None);
    for dumper in DUMPERS {
        for capture in ["fork", "copy"] {
            let what = format!("dynlink plugin, --capture {capture}, by {dumper:?}");
            let path = dir.path().join(format!("{capture}-{dumper:?}.snap"));
            let report = dump_as(dumper, &contained, &path, &["--capture", capture]);
            let snap = check_contained(dumper, &report, &path, &contained, &program, &what);
            let v = verify(&path, true);
            assert_eq!(v["external_pointers"], 0, "{what}: pointers into the plugin's data must be edges: {v}");
            let names: Vec<&str> = snap
                .roots()
                .iter()
                .filter(|r| r.root_kind() == heapsnap_format::RootKind::DynGlobal)
                .map(|r| snap.string(r.name).unwrap_or(""))
                .collect();
            assert_eq!(names, ["camlPlugin_data", "camlPlugin_data"], "{what}: the plugin's global roots, named from its symbols");
            assert!(retained_by_root(&path, "Plugin_data.1") > 0, "{what}");
        }
    }
    drop(contained);
}

/// A shared object of this machine's, to stand where the host would look for the plugin.
fn find_shared_object() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains(".so"))
        .map(PathBuf::from)
        .expect("this test links a shared library")
}

/// Runs `command` under a seccomp filter that refuses `ptrace` and `process_vm_readv` with
/// EPERM, as a container's seccomp profile may.
fn under_seccomp_without_ptrace(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    const SYS_PTRACE: u32 = 101;
    const SYS_PROCESS_VM_READV: u32 = 310;
    let stmt = |code: u32, k: u32| libc::sock_filter { code: code as u16, jt: 0, jf: 0, k };
    let jeq = |k: u32, jt: u8| libc::sock_filter { code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16, jt, jf: 0, k };
    // The system call's number is the first word of `struct seccomp_data`.
    let filter = [
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        jeq(SYS_PTRACE, 2),
        jeq(SYS_PROCESS_VM_READV, 1),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ];
    // SAFETY: between fork and exec the closure only makes async-signal-safe system calls, on
    // a filter that lives as long as the closure (moved into it).
    unsafe {
        command.pre_exec(move || {
            let program = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut libc::sock_filter };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &program as *const libc::sock_fprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// What a container forbids is said with what to grant: a seccomp profile refusing
/// `process_vm_readv` and `ptrace`, and a dumper of another user without CAP_SYS_PTRACE. The
/// program is left running, untraced.
#[test]
fn a_refused_dump_says_what_to_grant() {
    if !namespaces_available() {
        return;
    }
    let program = sample_path("cache_leak");
    let dir = tempfile::tempdir().unwrap();
    let contained = start_contained(dir.path(), &[program], None);
    let never = dir.path().join("never.snap");
    let dump_args = ["dump".to_string(), "--pid".into(), contained.pid.to_string(), "-o".into(), never.display().to_string()];

    let out = under_seccomp_without_ptrace(&mut Command::new(heapsnap())).args(&dump_args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("cannot read the memory of process {}: EPERM", contained.pid)), "{err}");
    assert!(err.contains("seccomp") && err.contains("allows both"), "seccomp named, with what to allow: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(heapsnap())
        .args(&dump_args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("heapsnap as uid 65534 without CAP_SYS_PTRACE: run heapsnap as uid 0, or grant it CAP_SYS_PTRACE"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    assert!(!never.exists());
    assert_running_untraced(contained.pid, "after refused dumps");
}
