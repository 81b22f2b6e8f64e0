//! Natdynlinked plugins: the static data of a `.cmxs` loaded with `Dynlink` (module block,
//! structured constants, constant closures) is captured as a static region, from a live
//! process and from a core, so that the heap's pointers into it are edges to snapshot nodes,
//! not external pointers. OCaml 5.3 registers a plugin's roots (`caml_dyn_globals`) but not
//! its data segment. Sample: samples/dynlink_plugin.ml loading plugin_data.cmxs
//! (samples/plugin_data.ml); its numbers are in samples/manifest.json.

use crate::dump_support::*;
use heapsnap_format::{RegionKind, RootKind, Snapshot};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn manifest_sample() -> Value {
    heapsnap_testkit::samples::manifest_sample("dynlink_plugin").clone()
}

/// The manifest's object count for the plugin's root `ident` and object description prefix.
fn manifest_count(sample: &Value, ident: &str, desc: &str) -> usize {
    let root = sample["roots"].as_array().unwrap().iter().find(|r| r["ident"] == ident).expect("root in the manifest");
    let o = root["objects"].as_array().unwrap().iter().find(|o| o["desc"].as_str().unwrap().starts_with(desc)).expect("object");
    o["count_by_step"][0].as_u64().unwrap() as usize
}

fn wosize(header: u64) -> u64 {
    header >> 10
}

fn word(snap: &Snapshot, address: u64) -> u64 {
    snap.region_of(address).and_then(|r| r.word_at(address)).unwrap_or_else(|| panic!("no word at {address:#x} in the snapshot"))
}

/// The kind of the region holding `address`, if any.
fn kind_at(snap: &Snapshot, address: u64) -> Option<RegionKind> {
    snap.region_of(address).map(|r| r.kind())
}

/// Everything the plugin's data must look like in a snapshot; returns the static region
/// holding the plugin's module block, as (base, end).
fn check_plugin_data(snap: &Snapshot, what: &str) -> (u64, u64) {
    let sample = manifest_sample();
    // The plugin's module block: its fields are the dynlinked globals' roots.
    let mut dyn_roots: Vec<_> = snap.roots().iter().filter(|r| r.root_kind() == RootKind::DynGlobal).collect();
    dyn_roots.sort_by_key(|r| r.origin);
    assert_eq!(dyn_roots.len(), 2, "{what}: the plugin's two globals (palette, items): {dyn_roots:?}");
    let block = dyn_roots[0].slot;
    assert_eq!(dyn_roots[1].slot, block + 8, "{what}: the fields of one module block");
    let region = snap.region_of(block).unwrap_or_else(|| panic!("{what}: the plugin's module block {block:#x} is in no region"));
    assert_eq!(region.kind(), RegionKind::Static, "{what}: the plugin's module block is static data");
    let (base, end) = (region.base(), region.end());
    assert!(base <= block - 8, "{what}: the module block's header is in the region");
    let header = word(snap, block - 8);
    assert_eq!((header as u8, wosize(header)), (0, 2), "{what}: module block header {header:#x}");
    let inside = |v: u64| (base..end).contains(&v);

    // Field 0, palette: a constant list of 3 records, all in the plugin's static data.
    let mut palette = Vec::new();
    let mut cell = dyn_roots[0].value;
    while cell & 1 == 0 {
        assert!(inside(cell), "{what}: palette cons {cell:#x} outside the plugin's data {base:#x}..{end:#x}");
        let record = word(snap, cell);
        assert!(inside(record), "{what}: palette record {record:#x} outside the plugin's data");
        let h = word(snap, record - 8);
        assert_eq!((h as u8, wosize(h)), (0, 2), "{what}: palette record header {h:#x}");
        let name = word(snap, record);
        assert!(inside(name) && word(snap, name - 8) as u8 == 252, "{what}: palette name string");
        palette.push(record);
        cell = word(snap, cell + 8);
    }
    assert_eq!(palette.len(), 3, "{what}: palette");

    // Field 1, items: a heap ref to a heap list of heap records, each pointing at a palette
    // record (heap -> plugin static data).
    let items_ref = dyn_roots[1].value;
    assert_eq!(kind_at(snap, items_ref), Some(RegionKind::Pool), "{what}: the items ref is on the heap");
    let mut cell = word(snap, items_ref);
    let mut count = 0;
    while cell & 1 == 0 {
        assert!(matches!(kind_at(snap, cell), Some(RegionKind::Pool)), "{what}: items cons {cell:#x}");
        let record = word(snap, cell);
        let h = word(snap, record - 8);
        assert_eq!((h as u8, wosize(h)), (0, 3), "{what}: item record header {h:#x}");
        let colour = word(snap, record + 8);
        assert!(palette.contains(&colour), "{what}: item {count}'s colour {colour:#x} is not a palette record");
        count += 1;
        cell = word(snap, cell + 8);
    }
    assert_eq!(count, manifest_count(&sample, "items", "item record"), "{what}: items");
    (base, end)
}

/// The snapshot is exact (every pointer leads to a block of a region), `verify --strict`
/// passes, no pointer is external, and the plugin's root retains what the manifest says.
fn check_snapshot(path: &Path, what: &str) -> Snapshot {
    let snap = Snapshot::open(path).unwrap_or_else(|e| panic!("{what}: snapshot does not validate: {e}"));
    reachability(&snap).assert_exact(what);
    let v = verify(path, true);
    assert_eq!(v["ok"], true, "{what}: heapsnap verify --strict: {v}");
    assert_eq!(v["external_pointers"], 0, "{what}: pointers into the plugin's data must be edges: {v}");
    check_plugin_data(&snap, what);
    let out = Command::new(heapsnap()).args(["top", "--by", "root", "--limit", "0", "--json"]).arg(path).output().unwrap();
    assert!(out.status.success(), "{what}: heapsnap top failed");
    let top: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Named from the plugin's own symbol table: the unit's module block, field 1.
    let groups = top["groups"].as_array().unwrap();
    let group = groups.iter().find(|g| g["name"] == "Plugin_data.1").unwrap_or_else(|| {
        let first: Vec<&Value> = groups.iter().take(3).map(|g| &g["name"]).collect();
        panic!("{what}: no group for the plugin's global Plugin_data.1; the biggest are {first:?}")
    });
    let retained = group["retained"].as_u64().unwrap();
    let expect = &manifest_sample()["roots"][0]["retained_bytes"][0];
    assert_eq!(manifest_sample()["roots"][0]["ident"], "items");
    let (min, max) = (expect["min"].as_u64().unwrap(), expect["max"].as_u64().unwrap());
    assert!((min..=max).contains(&retained), "{what}: the plugin's globals retain {retained}, expected {min}..={max}");
    let names: Vec<&str> =
        snap.roots().iter().filter(|r| r.root_kind() == RootKind::DynGlobal).map(|r| snap.string(r.name).unwrap_or("")).collect();
    assert_eq!(names, ["camlPlugin_data", "camlPlugin_data"], "{what}: names of the plugin's global roots");
    // The plugin's constant closure (given to debug_root) is named by the plugin's function and
    // source line: its symbols and line tables are in the snapshot.
    let out = Command::new(heapsnap()).args(["top", "--by", "closure", "--limit", "0", "--json"]).arg(path).output().unwrap();
    assert!(out.status.success(), "{what}: heapsnap top --by closure failed");
    let top: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plugin_closures: Vec<&str> = top["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .filter(|n| n.starts_with("closure camlPlugin_data."))
        .collect();
    let line = std::fs::read_to_string(repo().join("samples/plugin_data.ml"))
        .unwrap()
        .lines()
        .position(|l| l.contains("debug_root \"plugin_items\" (fun () ->"))
        .expect("the closure's line in plugin_data.ml")
        + 1;
    assert!(
        plugin_closures.len() == 1
            && plugin_closures[0].starts_with("closure camlPlugin_data.fun_")
            && plugin_closures[0].ends_with(&format!(" (plugin_data.ml:{line})")),
        "{what}: the plugin's closure by its function and line {line}: {plugin_closures:?}"
    );
    snap
}

/// The region `(base, end)` lies in a mapping of `file` in process `pid`.
fn mapped_from(pid: i32, file: &Path, (base, end): (u64, u64)) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("read maps");
    maps.lines().any(|l| {
        let (range, rest) = l.split_once(' ').unwrap();
        let (s, e) = range.split_once('-').unwrap();
        let (s, e) = (u64::from_str_radix(s, 16).unwrap(), u64::from_str_radix(e, 16).unwrap());
        // " (deleted)" follows the path of a file removed since it was mapped.
        rest.contains(&*file.to_string_lossy()) && s <= base && end <= e
    })
}

/// At each READY point: the plugin's static data is a region of the snapshot, mapped from
/// plugin_data.cmxs, and the sample goes on as if nothing happened.
#[test]
fn plugin_static_data_is_captured_at_every_step() {
    let program = sample_path("dynlink_plugin");
    let plugin = program.with_file_name("plugin_data.cmxs");
    assert!(plugin.exists(), "samples/build.sh builds {}", plugin.display());
    let (expected, expected_status) = reference_output(&program, &[]);
    assert!(expected_status.success(), "dynlink_plugin failed on its own: {expected:?}");
    let dir = tempfile::tempdir().unwrap();
    let mut sample = Sample::start(&program, &[]);
    let steps = manifest_sample()["steps"].as_u64().unwrap() as u32;
    for step in 1..=steps {
        sample.wait_ready(step);
        let path = dir.path().join(format!("step-{step}.snap"));
        let report = dump_ok(sample.pid(), &path, &[]);
        assert_eq!(report["consistent"], true, "{report}");
        assert_eq!(report["warnings"].as_array().map_or(0, Vec::len), 0, "step {step}: {report}");
        let snap = check_snapshot(&path, &format!("step {step}"));
        let region = check_plugin_data(&snap, &format!("step {step}"));
        assert!(mapped_from(sample.pid(), &plugin, region), "step {step}: region {region:x?} is not plugin_data.cmxs's data");
        sample.release();
    }
    let (lines, status) = sample.finish();
    assert_eq!(lines, expected, "output changed by the dumps");
    assert_eq!(status.code(), expected_status.code(), "exit status changed");
}

/// `gcore PID` into `dir`; returns the core's path.
fn gcore(pid: i32, dir: &Path) -> std::path::PathBuf {
    let prefix = dir.join("core");
    let out = Command::new("gcore").arg("-o").arg(&prefix).arg(pid.to_string()).output().expect("run gcore (is gdb installed?)");
    assert!(out.status.success(), "gcore failed: {}", String::from_utf8_lossy(&out.stderr));
    prefix.with_file_name(format!("core.{pid}"))
}

fn dump_core(core: &Path, out: &Path) -> Value {
    let o = Command::new(heapsnap()).arg("dump").arg("--core").arg(core).arg("-o").arg(out).arg("--json").output().unwrap();
    assert!(o.status.success(), "heapsnap dump --core failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("dump --json prints JSON")
}

fn static_regions(snap: &Snapshot) -> Vec<(u64, u64)> {
    snap.regions().filter(|r| r.kind() == RegionKind::Static).map(|r| (r.base(), r.end())).collect()
}

/// From a core, the plugin's data is found through the core's NT_FILE mappings, as from the
/// live process. A plugin file gone by the time the core is read is a warning: the snapshot
/// is still written, with the pointers into the plugin's data external, as they were before
/// plugins' data was captured. A plugin file gone from a live process is read through
/// /proc/PID/map_files when that is allowed (CAP_SYS_ADMIN), else a warning.
#[test]
fn plugin_static_data_from_a_core_and_when_the_file_is_gone() {
    // A private copy of the host and its plugin: the plugin file is deleted below.
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("dynlink_plugin");
    let plugin = dir.path().join("plugin_data.cmxs");
    std::fs::copy(sample_path("dynlink_plugin"), &program).unwrap();
    std::fs::copy(sample_path("plugin_data.cmxs"), &plugin).unwrap();
    let mut sample = Sample::start(&program, &[]);
    sample.wait_ready(1);
    let live_path = dir.path().join("live.snap");
    dump_ok(sample.pid(), &live_path, &[]);
    let live = check_snapshot(&live_path, "live");
    let core = gcore(sample.pid(), dir.path());

    let core_path = dir.path().join("core.snap");
    let report = dump_core(&core, &core_path);
    assert_eq!(report["warnings"].as_array().map_or(0, Vec::len), 0, "{report}");
    let from_core = check_snapshot(&core_path, "core");
    assert_eq!(static_regions(&from_core), static_regions(&live), "static regions: core vs live");

    std::fs::remove_file(&plugin).unwrap();
    let gone_path = dir.path().join("gone.snap");
    let report = dump_core(&core, &gone_path);
    std::fs::remove_file(&core).unwrap();
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains(&*plugin.to_string_lossy()), "no warning names the missing plugin: {report}");
    let gone = Snapshot::open(&gone_path).expect("snapshot written without the plugin file");
    // Missing: the plugin's regions (its units and its startup unit), nothing else.
    let kept = static_regions(&gone);
    let missing: Vec<(u64, u64)> = static_regions(&live).into_iter().filter(|r| !kept.contains(r)).collect();
    assert!(missing.contains(&check_plugin_data(&live, "live")), "the plugin's region is still there: {missing:x?}");
    assert!(missing.iter().all(|&r| mapped_from(sample.pid(), &plugin, r)), "{missing:x?} are not all the plugin's");
    assert_eq!(kept.len() + missing.len(), static_regions(&live).len(), "regions that are not the live dump's");
    let v = verify(&gone_path, false);
    let external = v["external_pointers"].as_u64().unwrap();
    let into_plugin = manifest_sample()["heap_to_static_pointers"].as_u64().unwrap();
    assert!(external >= into_plugin, "{external} external pointers, at least the {into_plugin} into the plugin expected: {v}");

    // Live, the file gone: the kernel still has it mapped.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(|c| u64::from_str_radix(c.trim(), 16).unwrap()).unwrap();
    let cap_sys_admin = cap_eff & (1 << 21) != 0;
    let live_gone = dir.path().join("live-gone.snap");
    let report = dump_ok(sample.pid(), &live_gone, &[]);
    if cap_sys_admin {
        assert_eq!(report["warnings"].as_array().map_or(0, Vec::len), 0, "{report}");
        check_snapshot(&live_gone, "live, plugin file deleted");
    } else {
        assert!(report["warnings"].to_string().contains(&*plugin.to_string_lossy()), "{report}");
    }
    sample.release();
    let (_, status) = sample.finish();
    assert!(status.success(), "dynlink_plugin: {status:?}");
}
