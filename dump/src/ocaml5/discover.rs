//! Finding an OCaml 5 target's [`Runtime`] before stopping it: what its executable says
//! ([`Runtime::from_executable`]), then the probe's last fact, read in the running heap's pool
//! lists, and the probe's verdict: a known release's facts checked, an unknown one's taken.
//! Apart from the runtime's own module because it reads the heap as the capture does.

use super::capture;
use super::probe::{self, SizeClassTables};
use super::safety;
use super::{probe_refusal, PendingProbe, Runtime};
use crate::common::program::{open_program, DiscoverOptions, Program};
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};

/// Reads what the dump needs to know about an OCaml 5 target before stopping it. `source`
/// need not be stopped: only static data and a few pools are read.
pub fn discover(source: &dyn MemorySource, options: &DiscoverOptions) -> Result<Runtime> {
    from_program(source, open_program(source, options)?, options)
}

/// [`discover`], from the program already opened.
pub fn from_program(source: &dyn MemorySource, program: Program, options: &DiscoverOptions) -> Result<Runtime> {
    let (mut rt, pending) = Runtime::from_executable(source, program, options)?;
    if let Some(pending) = pending {
        finish_probe(&mut rt, pending, source, options.force)?;
    }
    Ok(rt)
}

/// The probe's last fact, where a pool's wasted words lie, read from pools of the running
/// heap; then the probe checks a known release's facts, or gives an unknown one's.
fn finish_probe(rt: &mut Runtime, pending: PendingProbe, source: &dyn MemorySource, force: bool) -> Result<()> {
    let PendingProbe { mut found, took, known } = pending;
    let sampling = std::time::Instant::now();
    found.waste_first = found.size_classes.as_ref().ok().map(|tables| {
        let sampled = sample_pools(rt, source, tables);
        probe::waste_first(source, tables, rt.layout.heap.pool_sz, &sampled)
    });
    rt.probe_ns = (took + sampling.elapsed()).as_nanos() as u64;
    if known {
        if let Some((fact, probed, says)) = found.disagreement(&rt.facts) {
            return Err(DumpError::ProbeDisagrees { version: rt.version.clone(), fact, probed, release: rt.release.series, says });
        }
        return Ok(());
    }
    let (facts, guessed) = found.facts(force).map_err(|u| probe_refusal(&rt.version, u))?;
    rt.facts = facts;
    rt.guessed = guessed;
    rt.probe = Some(found);
    Ok(())
}

/// A few pools of each size class that wastes words, read from the heap lists while the
/// target runs (racily: the probe only counts what reads as headers).
fn sample_pools(rt: &Runtime, source: &dyn MemorySource, tables: &SizeClassTables) -> Vec<u64> {
    const PER_LIST: usize = 2;
    let Ok(states) = safety::domain_states(rt, source) else { return Vec::new() };
    let mut out = Vec::new();
    for (_, head, sz) in capture::pool_list_heads(rt, source, &states) {
        if tables.wastage.get(sz as usize).is_none_or(|&w| w == 0) {
            continue;
        }
        let mut pool = source.read_u64(head).unwrap_or(0);
        for _ in 0..PER_LIST {
            if pool == 0 {
                break;
            }
            out.push(pool);
            pool = source.read_u64(pool + rt.layout.heap.pool_next).unwrap_or(0);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}
