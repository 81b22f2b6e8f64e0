//! Pause benchmark: how long `heapsnap dump` keeps a process with a ~100 MB and a ~1 GB heap
//! stopped, captured by copy (`--capture copy`) and by fork (`--capture fork`), against a plain
//! `process_vm_readv` copy of the same bytes (the target stopped the same way; one thread, into
//! memory faulted in beforehand) and against gdb's `gcore` of the same process (its whole run:
//! the process is stopped throughout). Goals: copy/plain at most 1.5x and gcore/copy at least
//! 5x (issue #3); fork/copy at most 0.3x at 1 GB and 0.15x at 4 GB, and the fork pause growing
//! by at most 40 ms per GB (issue #30: the last line gives the slope). Each dump's pause phases
//! go to stderr, and each fork's cost: the memory only its child held when it was killed (the
//! pages the target wrote meanwhile, and the child's page tables) and how long it lived.
//!
//!     cargo bench -p heapsnap-dump --bench pause            # 100 MB and 1 GB
//!     HEAPSNAP_BENCH_SIZES_MB=100,1000,4000 cargo bench -p heapsnap-dump --bench pause
//!     HEAPSNAP_BENCH_TOOLCHAIN=4.14.0 cargo bench -p heapsnap-dump --bench pause  # another release
//!     HEAPSNAP_BENCH_GCORE=0 ...                            # without the gcore column
//!     HEAPSNAP_BENCH_BYTECODE=1 ...                          # the same program as bytecode (ocamlc -g, run by ocamlrun)
//!
//! Plain copies, copy dumps and fork dumps alternate (ROUNDS of each, medians; the fastest of
//! each is shown too); gcore runs once per size.
//!
//! Needs the OCaml toolchain (scripts/ocaml-toolchain.sh; `HEAPSNAP_BENCH_TOOLCHAIN`, default
//! 5.3.0) and, for the gcore column, gdb.

use heapsnap_dump::source::LiveProcess;
use heapsnap_dump::{dump_process, CaptureMode, DumpOptions};
use heapsnap_format::Snapshot;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Builds about SIZE_MB of mixed live data (records, strings, float arrays, lists, a few large
/// arrays), compacts, prints READY and waits for a line on stdin.
const HEAP_PROGRAM: &str = r#"
type item = { id : int; name : string; values : float array; tags : int list; mutable next : item option }
let () =
  let mb = int_of_string Sys.argv.(1) in
  let per_item = 8 * (6 + 6 + 9 + 12) in
  let n = mb * 1024 * 1024 / per_item in
  let items = Array.make n None in
  let prev = ref None in
  for i = 0 to n - 1 do
    let it = { id = i; name = Printf.sprintf "item-%09d-xxxxxxxxx" i; values = Array.make 8 (float i);
               tags = [i; i + 1; i + 2; i + 3]; next = !prev } in
    if i mod 16 = 0 then prev := Some it;
    items.(i) <- Some it
  done;
  Gc.compact ();
  print_endline "READY";
  ignore (input_line stdin);
  print_endline (string_of_int (Array.length items))
"#;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

fn compile(dir: &Path) -> PathBuf {
    let toolchain = std::env::var("HEAPSNAP_BENCH_TOOLCHAIN").unwrap_or_else(|_| "5.3.0".into());
    eprintln!("toolchain: OCaml {toolchain}");
    let prefix = Command::new("bash").arg(repo().join("scripts/ocaml-toolchain.sh")).arg(&toolchain).output().expect("toolchain");
    assert!(prefix.status.success(), "scripts/ocaml-toolchain.sh failed");
    let bytecode = std::env::var("HEAPSNAP_BENCH_BYTECODE").is_ok_and(|v| v == "1");
    let compiler = if bytecode { "bin/ocamlc" } else { "bin/ocamlopt" };
    eprintln!("compiled by {compiler}");
    let compiler = PathBuf::from(String::from_utf8(prefix.stdout).unwrap().trim()).join(compiler);
    std::fs::write(dir.join("bench_heap.ml"), HEAP_PROGRAM).unwrap();
    let out = Command::new(compiler).current_dir(dir).args(["-g", "bench_heap.ml", "-o", "bench_heap"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir.join("bench_heap")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The baseline: a plain copy of `ranges` out of the stopped process, by one thread into
/// buffers allocated and faulted in beforehand, one batched `process_vm_readv` per 1024 ranges,
/// adjacent ranges merged into one remote iovec as the dumper does (the dumper, by contrast,
/// copies with every core). Returns the time the target was stopped.
fn plain_copy(pid: i32, ranges: &[(u64, usize)]) -> Duration {
    let mut buffers: Vec<Vec<u8>> = ranges.iter().map(|&(_, len)| vec![1u8; len]).collect();
    let mut process = LiveProcess::attach(pid as u32).expect("attach");
    let stopped = Instant::now();
    // Batches of at most 1024 ranges and 1 GiB: `process_vm_readv` reads less than 2 GiB a call.
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &(_, len)) in ranges.iter().enumerate() {
        if i > start && (i - start == 1024 || bytes + len > 1 << 30) {
            batches.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    batches.push(start..ranges.len());
    let mut rest: &mut [Vec<u8>] = &mut buffers;
    for batch in batches {
        let (bufs, tail) = std::mem::take(&mut rest).split_at_mut(batch.len());
        rest = tail;
        let chunk = &ranges[batch];
        let mut remote: Vec<libc::iovec> = Vec::with_capacity(chunk.len());
        for &(address, len) in chunk {
            match remote.last_mut() {
                Some(last) if last.iov_base as u64 + last.iov_len as u64 == address => last.iov_len += len,
                _ => remote.push(libc::iovec { iov_base: address as *mut libc::c_void, iov_len: len }),
            }
        }
        let local: Vec<libc::iovec> = bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
        let wanted: usize = chunk.iter().map(|&(_, len)| len).sum();
        // SAFETY: every local iovec is a live buffer of its length.
        let n = unsafe { libc::process_vm_readv(pid, local.as_ptr(), local.len() as _, remote.as_ptr(), remote.len() as _, 0) };
        assert_eq!(n, wanted as isize, "plain copy: short read");
    }
    process.detach();
    let pause = stopped.elapsed();
    std::hint::black_box(&buffers);
    pause
}

fn gcore(pid: i32, dir: &Path) -> Option<Duration> {
    if std::env::var("HEAPSNAP_BENCH_GCORE").as_deref() == Ok("0") {
        return None;
    }
    let which = Command::new("sh").args(["-c", "command -v gcore"]).output().ok()?;
    if !which.status.success() {
        return None;
    }
    let core = dir.join("core");
    let start = Instant::now();
    let out = Command::new("gcore").arg("-o").arg(&core).arg(pid.to_string()).output().ok()?;
    let elapsed = start.elapsed();
    let _ = std::fs::remove_file(dir.join(format!("core.{pid}")));
    out.status.success().then_some(elapsed)
}

fn main() {
    // `cargo test --benches` runs this with --bench absent: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let sizes: Vec<usize> = std::env::var("HEAPSNAP_BENCH_SIZES_MB")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let rounds: usize = std::env::var("HEAPSNAP_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(5).max(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = compile(dir.path());
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10} {:>10} {:>9}",
        "heap", "copied", "copy", "fork", "plain", "gcore", "fork/copy", "fork cost", "child", "copy/plain"
    );
    let mut fork_pauses = Vec::new();
    for mb in sizes {
        let mut child = Command::new(&exe).arg(mb.to_string()).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "READY");
        let pid = child.id() as i32;
        let snap_path = dir.path().join("bench.snap");
        let dump_once = |capture: CaptureMode| {
            let options = DumpOptions { output: snap_path.clone(), include_dwarf: false, capture, ..DumpOptions::default() };
            let report = dump_process(pid, &options).expect("dump");
            let phases: Vec<String> = report.pause_phases.iter().map(|(n, t)| format!("{n} {:.1}", *t as f64 / 1e6)).collect();
            let how = report.capture.as_ref().expect("a live dump says how it captured");
            assert_eq!(how.method, capture, "{how:?}");
            eprintln!(
                "  {mb} MB: {capture} pause {:.1} ms ({}){}",
                ms(report.pause()),
                phases.join(", "),
                match capture {
                    CaptureMode::Fork => format!(
                        "; clone {:.1} ms, child lived {:.0} ms, cost {:.1} MB",
                        how.fork_ns as f64 / 1e6,
                        how.child_lived_ns as f64 / 1e6,
                        how.fork_extra_bytes as f64 / 1e6
                    ),
                    _ => String::new(),
                }
            );
            report
        };
        // A first dump (not counted) names the ranges of the plain copy.
        let copied = dump_once(CaptureMode::Copy).region_bytes;
        // In address order, as the dumper reads its candidate pools; in pieces of at most 1 GiB
        // (`process_vm_readv` reads less than 2 GiB a call: 4.14's chunks can be larger).
        let ranges: Vec<(u64, usize)> = {
            let snap = Snapshot::open(&snap_path).unwrap();
            let mut ranges: Vec<(u64, usize)> = snap
                .regions()
                .flat_map(|r| (0..r.bytes.len()).step_by(1 << 30).map(move |at| (r.base() + at as u64, (r.bytes.len() - at).min(1 << 30))))
                .collect();
            ranges.sort_unstable();
            ranges
        };
        // Alternating, so that a change of load on the machine weighs on all alike.
        let (mut copies, mut forks, mut plains, mut costs, mut lives) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let plain = plain_copy(pid, &ranges);
            eprintln!("  {mb} MB: plain copy {:.1} ms", ms(plain));
            plains.push(plain);
            copies.push(dump_once(CaptureMode::Copy).pause());
            let fork = dump_once(CaptureMode::Fork);
            forks.push(fork.pause());
            let how = fork.capture.expect("capture report");
            costs.push(how.fork_extra_bytes);
            lives.push(Duration::from_nanos(how.child_lived_ns));
        }
        std::fs::remove_file(&snap_path).unwrap();
        let (copy_min, fork_min, plain_min) = (*copies.iter().min().unwrap(), *forks.iter().min().unwrap(), *plains.iter().min().unwrap());
        let (copy, fork, plain, life) = (median(copies), median(forks), median(plains), median(lives));
        costs.sort_unstable();
        let cost = costs[costs.len() / 2];
        let core = gcore(pid, dir.path());
        child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        child.wait().unwrap();
        fork_pauses.push((copied, fork));
        println!(
            "{:>6}MB {:>8.1}MB {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>10} {:>9.3}x {:>8.1}MB {:>8.0}ms {:>9.2}x   (fastest: copy {:.1}ms, fork {:.1}ms, plain {:.1}ms{})",
            mb,
            copied as f64 / (1 << 20) as f64,
            ms(copy),
            ms(fork),
            ms(plain),
            core.map_or("-".into(), |c| format!("{:.1}ms", ms(c))),
            ms(fork) / ms(copy),
            cost as f64 / 1e6,
            ms(life),
            ms(copy) / ms(plain),
            ms(copy_min),
            ms(fork_min),
            ms(plain_min),
            core.map_or(String::new(), |c| format!(", gcore/copy {:.1}x", ms(c) / ms(copy))),
        );
    }
    if let (Some(&(small_bytes, small)), Some(&(large_bytes, large))) = (fork_pauses.first(), fork_pauses.last()) {
        if large_bytes > small_bytes {
            let gb = (large_bytes - small_bytes) as f64 / 1e9;
            println!("fork pause grows by {:.1} ms per GB copied (from the smallest heap to the largest)", (ms(large) - ms(small)) / gb);
        }
    }
}
