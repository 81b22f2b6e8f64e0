//! `heapsnap-names-oracle`: checks heapsnap's module-field names against the compiler's, unit by
//! unit (see `heapsnap_names::oracle`; run through `scripts/names-oracle.sh`).
//!
//!     heapsnap-names-oracle --ocaml PREFIX [--remap FROM=TO]... [-I DIR]... [--json] CMT_OR_DIR...
//!
//! Exit status: 0 when no field is named wrongly, 1 when one is, 2 on a usage or toolchain error.

use heapsnap_names::oracle::Oracle;
use heapsnap_names::reader::Toolchain;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn cmt_files(path: &Path, out: &mut Vec<PathBuf>, budget: &mut usize) {
    if path.is_file() {
        if path.extension().is_some_and(|e| e == "cmt") {
            out.push(path.to_path_buf());
        }
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else { return };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for e in entries {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        if !e.is_symlink() {
            cmt_files(&e, out, budget);
        }
    }
}

fn main() -> ExitCode {
    let usage = "usage: heapsnap-names-oracle --ocaml PREFIX [--remap FROM=TO]... [-I DIR]... [--jobs N] [--json] CMT_OR_DIR...";
    let (mut ocaml, mut remaps, mut includes, mut json, mut jobs, mut paths) = (None, Vec::new(), Vec::new(), false, 2, Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ocaml" => ocaml = args.next().map(PathBuf::from),
            "--remap" => match args.next().as_deref().and_then(|r| r.split_once('=')) {
                Some((from, to)) => remaps.push((PathBuf::from(from), PathBuf::from(to))),
                None => {
                    eprintln!("{usage}");
                    return ExitCode::from(2);
                }
            },
            "-I" => includes.extend(args.next().map(PathBuf::from)),
            "--jobs" => jobs = args.next().and_then(|n| n.parse().ok()).unwrap_or(2),
            "--json" => json = true,
            _ if a.starts_with('-') => {
                eprintln!("{usage}");
                return ExitCode::from(2);
            }
            _ => paths.push(PathBuf::from(a)),
        }
    }
    let mut files = Vec::new();
    let mut budget = 200_000;
    for p in &paths {
        cmt_files(p, &mut files, &mut budget);
    }
    if files.is_empty() {
        eprintln!("heapsnap-names-oracle: no .cmt file in {paths:?}\n{usage}");
        return ExitCode::from(2);
    }
    let oracle = match Toolchain::find(ocaml.as_deref()).and_then(|tc| Oracle::new(tc, remaps, includes, &|m| eprintln!("{m}"))) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("heapsnap-names-oracle: {e}");
            return ExitCode::from(2);
        }
    };
    eprintln!("heapsnap-names-oracle: compiling {} units again", files.len());
    let checks = match oracle.check(&files, jobs) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("heapsnap-names-oracle: {e}");
            return ExitCode::from(2);
        }
    };
    let compared = checks.iter().filter(|c| c.not_compared.is_none()).count();
    let agreed: usize = checks.iter().map(|c| c.agreed).sum();
    let wrong: usize = checks.iter().map(|c| c.wrong.len()).sum();
    let unnamed = checks.iter().filter(|c| c.unnamed).count();
    let skipped = checks.len() - compared - unnamed;
    if json {
        let doc = serde_json::json!({
            "units": checks.len(), "compared": compared, "unnamed": unnamed, "not_compared": skipped,
            "fields_agreed": agreed, "fields_wrong": wrong, "checks": checks,
        });
        println!("{doc}");
    } else {
        for c in &checks {
            for w in &c.wrong {
                println!("WRONG {} ({}): {w}", c.unit, c.file);
            }
            if let Some(why) = &c.not_compared {
                println!("{} {} ({}): {why}", if c.unnamed { "UNNAMED" } else { "NOT COMPARED" }, c.unit, c.file);
            }
        }
        println!(
            "{} units: {compared} compared ({agreed} fields agreed, {wrong} named wrongly), {unnamed} left unnamed by heapsnap, {skipped} not compared",
            checks.len()
        );
    }
    if wrong > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
