//! `heapsnap dump --core`: a `gcore` of a sample paused at READY gives the same snapshot as a
//! live dump at the same moment, object for object; bad cores get clear errors.

use crate::dump_support::*;
use heapsnap_format::{RegionKind, RootKind, Snapshot};
use std::path::Path;
use std::process::{Command, Output};

/// Pauses the std sample `name` at its first READY, takes a live dump and a gcore, dumps the
/// core, compares; then lets the sample finish and checks it was not disturbed.
fn check_sample(name: &str) {
    check_program(name, &sample_path(name), &manifest_args(name));
}

#[test]
fn cache_leak_core_matches_live_dump() {
    check_sample("cache_leak");
}

#[test]
fn closure_list_core_matches_live_dump() {
    check_sample("closure_list");
}

#[test]
fn effect_cont_core_matches_live_dump() {
    check_sample("effect_cont");
}

#[test]
fn systhread_stack_core_matches_live_dump() {
    check_sample("systhread_stack");
}

#[test]
fn domains_shared_core_matches_live_dump() {
    check_sample("domains_shared");
}

/// Weak-only data (reached only through a weak array and ephemerons) is in the core's snapshot
/// as in the live one, and is no garbage: checked strictly like every sample.
#[test]
fn weak_ephemeron_core_matches_live_dump() {
    check_sample("weak_ephemeron");
}

/// 10^6 list cells: the deep chain survives the core path as the live one.
#[test]
fn long_list_core_matches_live_dump() {
    check_sample("long_list");
}

/// About a million objects of five kinds, a closure per item and a 1 MB bucket array.
#[test]
fn large_heap_core_matches_live_dump() {
    check_sample("large_heap");
}

/// The samples without a test of their own above.
const OTHER_SAMPLES: [&str; 6] = ["bigarray_sample", "lazy_sample", "objects_sample", "large_array", "steady_state", "dynlink_plugin"];

#[test]
fn other_samples_cores_match_live_dumps() {
    for name in OTHER_SAMPLES {
        check_sample(name);
    }
}

/// Every std sample of the manifest has its core checked by one of the tests above: a sample
/// added to the manifest must be added here too.
#[test]
fn every_sample_of_the_manifest_is_checked_from_a_core() {
    let mut covered: Vec<&str> =
        vec!["cache_leak", "closure_list", "effect_cont", "systhread_stack", "domains_shared", "weak_ephemeron", "long_list", "large_heap"];
    covered.extend(OTHER_SAMPLES);
    covered.sort_unstable();
    let mut std_samples: Vec<String> = manifest_samples()
        .iter()
        .filter(|s| s["variants"].as_array().is_some_and(|v| v.iter().any(|v| v == "std")))
        .map(|s| s["name"].as_str().expect("name").to_string())
        .collect();
    std_samples.sort_unstable();
    assert_eq!(covered, std_samples, "samples of the manifest vs samples checked from a core");
}

/// With 16 reserved header bits (the rhb16 toolchain): the core's snapshot detects them and
/// keeps the values in them, as the live one does.
#[test]
fn reserved_bits_core_matches_live_dump() {
    let program = rhb16_samples_dir().join("reserved_bits");
    let snap = check_program("reserved_bits (rhb16)", &program, &manifest_args("reserved_bits"));
    assert_eq!(snap.metadata().reserved_header_bits, 16);
    // 100 + 50 + 10 + 5 blocks carry a value in their reserved bits (samples/reserved_bits.ml).
    let mut reserved = 0;
    for r in snap.regions().filter(|r| matches!(r.kind(), RegionKind::Pool | RegionKind::Large)) {
        let words = r.words();
        let stride = if r.kind() == RegionKind::Pool { r.header.block_wsize as usize } else { words.len() };
        let mut i = r.header.first_block as usize / 8;
        while i < words.len() {
            reserved += usize::from(words[i] >> 48 != 0);
            i += stride.max(1);
        }
    }
    assert_eq!(reserved, 165, "blocks with reserved header bits set");
}

/// A core the kernel writes when the process crashes (`core_pattern` = `core`, when the
/// machine has it so: systemd-coredump or apport take cores elsewhere) gives the snapshot of a
/// live dump just before the crash.
#[test]
fn kernel_core_after_a_crash_matches_live_dump() {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    if pattern.trim() != "core" {
        not_covered(&format!("a core the kernel writes: kernel.core_pattern is {:?}, not \"core\"", pattern.trim()));
        return;
    }
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let program = sample_path("closure_list");
    // The core is written in the crashed process's directory, if its size limit allows.
    let script = format!("cd '{}' && ulimit -c unlimited && exec \"$0\" \"$@\"", dir.path().display());
    let mut sample = Sample::start(Path::new("/bin/sh"), &["-c", &script, program.to_str().expect("utf-8 path")]);
    sample.wait_ready(1);
    let live_path = dir.path().join("live.snap");
    dump_ok(sample.pid(), &live_path, &[]);
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(sample.pid(), libc::SIGSEGV) }, 0);
    let _ = sample.child.wait();
    let core = dir.path().join("core");
    assert!(core.exists(), "the kernel wrote no core in {}", dir.path().display());
    let core_path = dir.path().join("core.snap");
    let report = dump_core_ok(&core, &core_path);
    // The kernel leaves out only what the process could not read: nothing is lost.
    assert!(report["warnings"].as_array().is_none_or(|w| w.is_empty()), "{report}");
    let live = Snapshot::open(&live_path).expect("live snapshot validates");
    let snap = Snapshot::open(&core_path).expect("core snapshot validates");
    assert_same_world("closure_list (kernel core)", &live, &snap);
    assert_eq!(verify(&core_path, true)["ok"], true);
}

/// long_list with a million steps, running flat out: it spends nearly all its time compacting
/// its 10^6 cells.
fn busy_long_list() -> KillOnDrop {
    let child = Command::new(sample_path("long_list"))
        .args(["--steps", "1000000"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .dies_with_test()
        .spawn()
        .expect("start long_list");
    let busy = KillOnDrop(child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    busy
}

/// Cores of a program that allocates without pause catch it anywhere, often inside a
/// collection: a snapshot is still written (the moment said in its metadata and on stderr) and
/// it validates; or, when a block header was being written, a clear error and no file.
#[test]
fn cores_of_a_busy_program_give_a_snapshot_or_a_clear_error() {
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let busy = busy_long_list();
    for i in 0..3 {
        let sub = dir.path().join(i.to_string());
        std::fs::create_dir(&sub).expect("mkdir");
        let core = gcore(busy.0.id() as i32, &sub);
        let out = sub.join("busy.snap");
        let o = dump_core(&core, &out, &[]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        std::fs::remove_file(&core).expect("remove core");
        if !o.status.success() {
            assert!(err.contains("inconsistent") && !err.contains("panicked"), "core {i}: {err}");
            assert!(!out.exists(), "core {i}: a snapshot was written despite the error");
            continue;
        }
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
        let snap = Snapshot::open(&out).unwrap_or_else(|e| panic!("core {i}: snapshot does not validate: {e}"));
        let warned = snap.metadata().warnings.iter().any(|w| w.contains("inconsistent moment"));
        assert_eq!(warned, report["consistent"] == false, "core {i}: {report}");
        assert_eq!(warned, err.contains("inconsistent moment"), "core {i}: stderr: {err}");
        let v = verify(&out, false);
        assert_eq!(v["ok"], true, "core {i}: {v}");
    }
}

/// A core caught inside a collection: the thread doing the collection holds pointers into
/// the heap in its registers and C stack, which become roots flagged CONSERVATIVE, as many as
/// the snapshot's metadata says; the snapshot still verifies. long_list with a million steps
/// spends nearly all its time compacting its 10^6 cells, so nearly every core catches it in a
/// collection; a few cores are taken until one holds such pointers (a sweep of free slots may
/// hold none).
#[test]
fn cores_caught_in_a_collection_get_conservative_roots() {
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let busy = busy_long_list();
    let mut in_collection = 0;
    for i in 0..10 {
        let sub = dir.path().join(i.to_string());
        std::fs::create_dir(&sub).expect("mkdir");
        let core = gcore(busy.0.id() as i32, &sub);
        let out = sub.join("busy.snap");
        let o = dump_core(&core, &out, &[]);
        std::fs::remove_file(&core).expect("remove core");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        if !o.status.success() {
            assert!(err.contains("inconsistent") && !err.contains("panicked"), "core {i}: {err}");
            continue;
        }
        let snap = Snapshot::open(&out).unwrap_or_else(|e| panic!("core {i}: snapshot does not validate: {e}"));
        let warnings = &snap.metadata().warnings;
        if !warnings.iter().any(|w| w.contains("inconsistent moment")) {
            continue; // caught between two compactions
        }
        in_collection += 1;
        let said = warnings
            .iter()
            .find_map(|w| w.split_once(" conservative roots added for the threads caught inside the runtime"))
            .map(|(n, _)| n.parse::<usize>().expect("a count"))
            .unwrap_or_else(|| panic!("core {i}: no conservative-roots warning in {warnings:?}"));
        assert!(err.contains("conservative roots added"), "core {i}: not said on stderr: {err}");
        let conservative: Vec<_> = snap.roots().iter().filter(|r| r.is_conservative()).collect();
        assert_eq!(conservative.len(), said, "core {i}: conservative roots in the snapshot vs the metadata");
        for r in &conservative {
            match r.root_kind() {
                RootKind::Register => assert!(r.origin <= 16 && r.slot == 0, "core {i}: {r:?}"),
                RootKind::Other => {
                    assert_ne!(r.slot, 0, "core {i}: {r:?}");
                    let name = snap.string(r.name).unwrap_or("");
                    assert!(name.starts_with("C stack of thread"), "core {i}: {name}");
                }
                k => panic!("core {i}: a conservative root of kind {k:?}"),
            }
            // Each names a heap block (an interior pointer counts for its block).
            let region = snap.region_of(r.value).unwrap_or_else(|| panic!("core {i}: root {:#x} in no region", r.value));
            let heap = matches!(region.kind(), RegionKind::MinorHeap | RegionKind::Pool | RegionKind::Large);
            assert!(heap, "core {i}: a conservative root into a {:?} region", region.kind());
        }
        let v = verify(&out, false);
        assert_eq!(v["ok"], true, "core {i}: {v}");
        if said > 0 {
            let noted = v["warnings"].as_array().expect("warnings").iter().any(|w| w.as_str().unwrap_or("").contains("conservative scan"));
            assert!(noted, "core {i}: verify does not mention the conservative roots: {v}");
            return;
        }
    }
    panic!("none of 10 cores of a program compacting without pause gave conservative roots ({in_collection} caught it in a collection)");
}

/// A core that catches a domain mid-allocation: its allocation pointer bumped over words that
/// hold no header yet. Made from a gcore of a paused sample by lowering that domain's
/// `young_ptr` (in its `caml_domain_state`, found through the dumper's own runtime discovery)
/// by three words and zeroing them. The snapshot is written, says on stderr and in its
/// metadata what it skipped, and holds exactly the minor-heap blocks of a live dump.
#[test]
fn a_block_caught_mid_allocation_in_a_core_is_skipped() {
    const TORN_WORDS: u64 = 3;
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sample = Sample::start(&sample_path("closure_list"), &[]);
    sample.wait_ready(1);
    let live_path = dir.path().join("live.snap");
    dump_ok(sample.pid(), &live_path, &[]);
    let core = gcore(sample.pid(), dir.path());
    drop(sample);

    // Where domain 0's young_ptr is, by the dumper's DWARF layouts, read through the core.
    let young_ptr_field = {
        let source = heapsnap_dump::source::CoreFile::open(&core, None).expect("open core");
        let rt = heapsnap_dump::ocaml5::discover::discover(&source, &Default::default()).expect("runtime of the core");
        let states = heapsnap_dump::ocaml5::safety::domain_states(&rt, &source).expect("domain states");
        assert_eq!(states.len(), 1, "closure_list runs one domain");
        states[0] + rt.layout.domain_state.young_ptr
    };
    let mut bytes = std::fs::read(&core).expect("read core");
    let at = core_file_offset(&bytes, young_ptr_field).expect("young_ptr in the core");
    let young_ptr = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let live = Snapshot::open(&live_path).expect("live snapshot validates");
    assert_eq!(live.metadata().domains[0].young_ptr, young_ptr, "the live dump and the core agree on young_ptr");
    let torn = young_ptr - 8 * TORN_WORDS;
    assert!(torn >= live.metadata().domains[0].minor_start, "room below young_ptr");
    bytes[at..at + 8].copy_from_slice(&torn.to_le_bytes());
    let words = core_file_offset(&bytes, torn).expect("the minor heap in the core");
    bytes[words..words + 8 * TORN_WORDS as usize].fill(0);
    let patched = dir.path().join("torn.core");
    std::fs::write(&patched, &bytes).expect("write patched core");
    drop(bytes);
    std::fs::remove_file(&core).expect("remove core");

    let out = dir.path().join("torn.snap");
    let o = dump_core(&patched, &out, &[]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "heapsnap dump --core on a torn minor heap failed: {err}");
    let said = format!("domain 0: the minor heap was caught mid-allocation; {} bytes at {torn:#x} were skipped", 8 * TORN_WORDS);
    assert!(err.contains(&said), "stderr does not say {said:?}: {err}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert!(report["warnings"].as_array().expect("warnings").iter().any(|w| w.as_str() == Some(said.as_str())), "{report}");

    let snap = Snapshot::open(&out).unwrap_or_else(|e| panic!("snapshot of a torn minor heap does not validate: {e}"));
    assert!(snap.metadata().warnings.contains(&said), "metadata warnings: {:?}", snap.metadata().warnings);
    assert_eq!(snap.metadata().domains[0].young_ptr, torn);
    // The skipped words aside, the minor heap is the live dump's, block for block.
    let minor = |s: &Snapshot| {
        let r = s.regions().find(|r| r.kind() == RegionKind::MinorHeap)?;
        Some((r.base() + r.header.first_block as u64, r.end()))
    };
    let (start, end) = minor(&snap).expect("a minor heap region");
    assert_eq!(start, young_ptr, "the walk starts after the torn block");
    assert_eq!(Some((start, end)), minor(&live), "minor heap extent");
    let copy = |s: &Snapshot| {
        let r = s.regions().find(|r| r.kind() == RegionKind::MinorHeap).expect("minor heap");
        r.words()[(r.header.first_block / 8) as usize..].to_vec()
    };
    assert!(copy(&snap) == copy(&live), "the minor heap's blocks differ from the live dump's");
    assert_eq!(roots(&snap), roots(&live), "roots");
    reachability(&snap).assert_exact("closure_list with a torn minor heap");
    let v = verify(&out, true);
    assert_eq!(v["ok"], true, "heapsnap verify --strict: {v}");
}

/// A C allocation in the runtime lowers `young_ptr` and then writes the new block's header; a
/// stop between the two leaves stale words at the minor heap's start that may even parse as
/// blocks, so a thread caught in the code of such an allocator is not at rest. gdb stops a
/// program at the entry of two of them (a string allocator that is safe while it waits for a
/// callee, and `caml_copy_double`, which allocates inline) and writes a core there: the dumper
/// must call that moment inconsistent, name the function, and still give a valid snapshot
/// (refusing it with `--require-consistent`).
#[test]
fn a_core_stopped_in_a_c_allocator_is_inconsistent() {
    const PROGRAM: &str = r#"
let () =
  print_endline "READY";
  let n = ref (Array.length Sys.argv) in
  while true do
    n := !n + String.length (string_of_int !n) + int_of_float (float_of_string "1.5")
  done
"#;
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = compile_ocaml(dir.path(), "c_alloc", PROGRAM, &[]);
    for (function, file) in [("caml_alloc_string", "alloc.c"), ("caml_copy_double", "floats.c")] {
        let program = start_until_ready(&exe);
        let core = dir.path().join(format!("{function}.core"));
        let gdb = Command::new("gdb")
            .args(["-nx", "-batch", "-p", &program.0.id().to_string()])
            .args(["-ex", &format!("break {function}"), "-ex", "continue", "-ex", &format!("gcore {}", core.display()), "-ex", "kill"])
            .output()
            .expect("run gdb");
        assert!(core.exists(), "gdb wrote no core at {function}: {}", String::from_utf8_lossy(&gdb.stderr));
        drop(program);

        let said = format!("is in {function} ({file})");
        let out = dir.path().join(format!("{function}.snap"));
        let o = dump_core(&core, &out, &["--require-consistent"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("inconsistent") && err.contains(&said), "--require-consistent at {function}: {err}");
        assert!(!out.exists(), "--require-consistent at {function} wrote a snapshot");
        let report = dump_core_ok(&core, &out);
        assert_eq!(report["consistent"], false, "at {function}: {report}");
        assert!(report["warnings"].to_string().contains(&said), "at {function}: warnings do not say {said:?}: {report}");
        let v = verify(&out, false);
        assert_eq!(v["ok"], true, "at {function}: {v}");
        std::fs::remove_file(&core).expect("remove core");
    }
}

/// A core of C code holding a block it allocated but has not initialised: its fields are stale
/// words of an earlier minor cycle, pointers into the middle of the block itself. A core cannot
/// be taken again, so those fields are recorded as `()`, with a warning each, and the snapshot
/// passes `heapsnap verify`.
#[test]
fn a_core_with_a_block_that_c_code_has_not_initialised() {
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = compile_uninitialised_block_program(dir.path());
    let program = start_until_ready(&exe);
    let core = gcore(program.0.id() as i32, dir.path());
    drop(program);
    let out = dir.path().join("stale.snap");
    let report = dump_core_ok(&core, &out);
    let warnings: Vec<String> =
        report["warnings"].as_array().expect("warnings").iter().map(|w| w.as_str().unwrap_or("").to_string()).collect();
    let stale = warnings.iter().filter(|w| w.contains("has not initialised its fields yet; recorded as ()")).count();
    assert!(stale >= 1, "no warning about the uninitialised block: {warnings:?}");
    let v = verify(&out, false);
    assert_eq!(v["ok"], true, "heapsnap verify: {v}");
}

/// The file offset of target address `address` in an ELF64 core: the `PT_LOAD` segment whose
/// bytes in the file hold it.
fn core_file_offset(bytes: &[u8], address: u64) -> Option<usize> {
    let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    (0..phnum).map(|i| phoff + i * phentsize).find_map(|h| {
        let is_load = u32::from_le_bytes(bytes[h..h + 4].try_into().unwrap()) == 1;
        let (offset, vaddr, filesz) = (u64_at(h + 8), u64_at(h + 16), u64_at(h + 32));
        (is_load && vaddr <= address && address + 8 <= vaddr + filesz).then(|| (offset + (address - vaddr)) as usize)
    })
}

/// A truncated core, a core of another executable, and a file that is no core: each a clear
/// error, no snapshot.
#[test]
fn bad_cores_are_clear_errors() {
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sample = Sample::start(&sample_path("closure_list"), &[]);
    sample.wait_ready(1);
    let core = gcore(sample.pid(), dir.path());
    drop(sample);
    let out = dir.path().join("out.snap");
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    // Another executable: the build ids differ.
    let other = sample_path("cache_leak");
    let o = dump_core(&core, &out, &["--exe", other.to_str().expect("utf-8 path")]);
    assert!(!o.status.success(), "a core of another executable was accepted");
    assert!(stderr(&o).contains("build id") && stderr(&o).contains("not taken from this executable"), "{}", stderr(&o));
    assert!(!out.exists(), "a snapshot was written");

    // The right executable given explicitly is accepted.
    let right = sample_path("closure_list");
    let o = dump_core(&core, &out, &["--exe", right.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_file(&out).expect("remove");

    // A core cut in the middle: its notes (at the end of a gcore) or its memory are gone.
    let len = std::fs::metadata(&core).expect("core").len();
    let cut = dir.path().join("cut.core");
    std::fs::copy(&core, &cut).expect("copy core");
    std::fs::OpenOptions::new().write(true).open(&cut).expect("open copy").set_len(len / 2).expect("truncate");
    let o = dump_core(&cut, &out, &[]);
    assert!(!o.status.success(), "a core truncated to {} of {len} bytes was accepted", len / 2);
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(!out.exists(), "a snapshot was written");

    // A core that lost only its last bytes (gcore's section table; no memory): a snapshot,
    // with a warning that says so.
    std::fs::copy(&core, &cut).expect("copy core");
    std::fs::OpenOptions::new().write(true).open(&cut).expect("open copy").set_len(len - 100).expect("truncate");
    let o = dump_core(&cut, &out, &[]);
    if o.status.success() {
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
        let warned = report["warnings"].as_array().expect("warnings").iter().any(|w| w.as_str().unwrap_or("").contains("truncated"));
        assert!(warned, "no truncation warning: {report}");
        std::fs::remove_file(&out).expect("remove");
    } else {
        assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    }

    // The heap left out of the core (as coredump_filter would): the error names the region.
    let filtered = dir.path().join("filtered.core");
    std::fs::copy(&core, &filtered).expect("copy core");
    let (start, end) = drop_largest_writable_segment(&filtered);
    let o = dump_core(&filtered, &out, &[]);
    assert!(!o.status.success(), "a core without its heap was accepted");
    let region = format!("{start:#x}..{end:#x} ({} bytes", end - start);
    assert!(stderr(&o).contains(&region) && stderr(&o).contains("left out of the core"), "{}", stderr(&o));
    assert!(!out.exists(), "a snapshot was written");

    // Not a core at all.
    let o = dump_core(&right, &out, &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a core file"), "{}", stderr(&o));
}

/// Sets `p_filesz` to 0 in the largest writable `PT_LOAD` of an ELF64 core, as a core dumped
/// without that memory says; returns the segment's address range.
fn drop_largest_writable_segment(core: &Path) -> (u64, u64) {
    let mut bytes = std::fs::read(core).expect("read core");
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(&bytes, 0x20) as usize, u16_at(&bytes, 0x36), u16_at(&bytes, 0x38));
    let (at, vaddr, memsz) = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&h| u32::from_le_bytes(bytes[h..h + 4].try_into().unwrap()) == 1) // PT_LOAD
        .filter(|&h| u32::from_le_bytes(bytes[h + 4..h + 8].try_into().unwrap()) & 2 != 0) // PF_W
        .map(|h| (h, u64_at(&bytes, h + 16), u64_at(&bytes, h + 40)))
        .max_by_key(|&(_, _, memsz)| memsz)
        .expect("a writable segment");
    bytes[at + 32..at + 40].copy_from_slice(&0u64.to_le_bytes());
    std::fs::write(core, bytes).expect("write core");
    (vaddr, vaddr + memsz)
}
