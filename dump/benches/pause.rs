//! Pause benchmark: how long `heapsnap dump` keeps a process with a ~100 MB and a ~1 GB heap
//! stopped, against a plain `process_vm_readv` copy of the same bytes (the target stopped the
//! same way) and against gdb's `gcore` of the same process.
//!
//!     cargo bench -p heapsnap-dump --bench pause            # 100 MB and 1 GB
//!     HEAPSNAP_BENCH_SIZES_MB=100 cargo bench -p heapsnap-dump --bench pause
//!
//! Needs the OCaml toolchain (scripts/ocaml-toolchain.sh) and, for the gcore column, gdb.

use heapsnap_dump::source::{LiveProcess, MemorySource, ReadRequest};
use heapsnap_dump::{dump_process, DumpOptions};
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
    let prefix = Command::new("bash").arg(repo().join("scripts/ocaml-toolchain.sh")).output().expect("toolchain");
    assert!(prefix.status.success(), "scripts/ocaml-toolchain.sh failed");
    let ocamlopt = PathBuf::from(String::from_utf8(prefix.stdout).unwrap().trim()).join("bin/ocamlopt");
    std::fs::write(dir.join("bench_heap.ml"), HEAP_PROGRAM).unwrap();
    let out = Command::new(ocamlopt).current_dir(dir).args(["-g", "bench_heap.ml", "-o", "bench_heap"]).output().unwrap();
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

/// A plain copy of `ranges` out of the stopped process: buffers allocated and faulted in
/// beforehand, one batched `process_vm_readv` per 1024 ranges. Returns the time the target
/// was stopped.
fn plain_copy(pid: i32, ranges: &[(u64, usize)]) -> Duration {
    let mut buffers: Vec<Vec<u8>> = ranges.iter().map(|&(_, len)| vec![1u8; len]).collect();
    let mut process = LiveProcess::attach(pid as u32).expect("attach");
    let stopped = Instant::now();
    let mut requests: Vec<ReadRequest<'_>> =
        ranges.iter().zip(buffers.iter_mut()).map(|(&(address, _), buf)| ReadRequest { address, buf }).collect();
    process.read_many(&mut requests).expect("copy");
    process.detach();
    let pause = stopped.elapsed();
    std::hint::black_box(&buffers);
    pause
}

fn gcore(pid: i32, dir: &Path) -> Option<Duration> {
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
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = compile(dir.path());
    println!("{:>8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}", "heap", "copied", "dump", "plain", "gcore", "dump/plain", "gcore/dump");
    for mb in sizes {
        let mut child = Command::new(&exe).arg(mb.to_string()).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "READY");
        let pid = child.id() as i32;
        let snap_path = dir.path().join("bench.snap");
        let mut pauses = Vec::new();
        let mut copied = 0;
        for _ in 0..3 {
            let options = DumpOptions { output: snap_path.clone(), include_dwarf: false, ..DumpOptions::default() };
            let report = dump_process(pid, &options).expect("dump");
            pauses.push(report.pause());
            copied = report.region_bytes;
        }
        let ranges: Vec<(u64, usize)> = {
            let snap = Snapshot::open(&snap_path).unwrap();
            snap.regions().map(|r| (r.base(), r.bytes.len())).collect()
        };
        std::fs::remove_file(&snap_path).unwrap();
        let plain = median((0..3).map(|_| plain_copy(pid, &ranges)).collect());
        let dump = median(pauses);
        let core = gcore(pid, dir.path());
        child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        child.wait().unwrap();
        println!(
            "{:>6}MB {:>8.1}MB {:>8.1}ms {:>8.1}ms {:>10} {:>9.2}x {:>9}",
            mb,
            copied as f64 / (1 << 20) as f64,
            ms(dump),
            ms(plain),
            core.map_or("-".into(), |c| format!("{:.1}ms", ms(c))),
            ms(dump) / ms(plain),
            core.map_or("-".into(), |c| format!("{:.1}x", ms(c) / ms(dump))),
        );
    }
}
