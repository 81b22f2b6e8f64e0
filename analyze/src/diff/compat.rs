//! Which snapshots can be compared. Group names and path signatures only mean the same thing in
//! two snapshots of the same build of a program, under the same runtime: closures are named
//! by symbols whose stamps change with each build, and blocks by a header layout that depends
//! on the OCaml version and its reserved header bits.

use heapsnap_format::Snapshot;

/// Why two snapshots cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incompatibility {
    #[error("they are snapshots of different programs ({first} and {other})")]
    DifferentProgram { first: String, other: String },
    #[error("they are snapshots of different builds of {executable} (build-id {first} and {other}); closures and symbols would not match (--allow-rebuilt compares them anyway)")]
    DifferentBuild { executable: String, first: String, other: String },
    #[error("one is a snapshot of {0}, the other of an unknown program (a synthetic snapshot?)")]
    UnknownProgram(String),
    #[error("they come from different OCaml versions ({first} and {other})")]
    DifferentOcaml { first: String, other: String },
    #[error("their headers have different reserved bits ({first} and {other})")]
    DifferentReservedBits { first: u8, other: u8 },
    #[error("their word sizes differ ({first} and {other})")]
    DifferentWordSize { first: u8, other: u8 },
    #[error("their format versions are incompatible ({first} and {other})")]
    DifferentFormat { first: String, other: String },
}

fn or_unknown(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "unknown".into())
}

/// Checks that `other` can be compared with `first`: the same build id (wherever the executable
/// was), or with `allow_rebuilt`, another build id of the same executable path (the same
/// program rebuilt, e.g. with a fix).
pub fn check_pair(first: &Snapshot, other: &Snapshot, allow_rebuilt: bool) -> Result<(), Incompatibility> {
    let (h1, h2) = (first.header(), other.header());
    if h1.version_major != h2.version_major {
        return Err(Incompatibility::DifferentFormat {
            first: format!("{}.{}", h1.version_major, h1.version_minor),
            other: format!("{}.{}", h2.version_major, h2.version_minor),
        });
    }
    let (m1, m2) = (first.metadata(), other.metadata());
    if m1.word_size != m2.word_size {
        return Err(Incompatibility::DifferentWordSize { first: m1.word_size, other: m2.word_size });
    }
    if m1.ocaml_version != m2.ocaml_version {
        return Err(Incompatibility::DifferentOcaml { first: m1.ocaml_version.clone(), other: m2.ocaml_version.clone() });
    }
    if m1.reserved_header_bits != m2.reserved_header_bits {
        return Err(Incompatibility::DifferentReservedBits { first: m1.reserved_header_bits, other: m2.reserved_header_bits });
    }
    // An executable is identified by its build id: a byte-identical copy at another path is
    // the same program. The path identifies it only when a build id is missing.
    let same_build = m1.build_id.is_some() && m1.build_id == m2.build_id;
    match (&m1.executable, &m2.executable) {
        (Some(a), Some(b)) if a != b && !same_build => {
            return Err(Incompatibility::DifferentProgram { first: a.clone(), other: b.clone() })
        }
        (Some(a), None) | (None, Some(a)) => return Err(Incompatibility::UnknownProgram(a.clone())),
        _ => {}
    }
    if m1.build_id != m2.build_id && !allow_rebuilt {
        return Err(Incompatibility::DifferentBuild {
            executable: or_unknown(&m1.executable),
            first: or_unknown(&m1.build_id),
            other: or_unknown(&m2.build_id),
        });
    }
    Ok(())
}

/// Things worth knowing about a compatible series (different processes, an order that does
/// not look oldest-first).
pub fn warnings(snaps: &[&Snapshot]) -> Vec<String> {
    let mut out = Vec::new();
    let pids: Vec<Option<u32>> = snaps.iter().map(|s| s.metadata().pid).collect();
    if pids.windows(2).any(|w| w[0] != w[1]) {
        out.push("the snapshots come from different processes: growth compares runs, not one run over time".into());
    }
    for (i, w) in snaps.windows(2).enumerate() {
        let (a, b) = (w[0].metadata(), w[1].metadata());
        let earlier = (a.time_unix_ns > 0 && b.time_unix_ns > 0 && b.time_unix_ns < a.time_unix_ns)
            || (a.pid == b.pid && matches!((a.compactions, b.compactions), (Some(x), Some(y)) if y < x));
        if earlier {
            out.push(format!("snapshot {} was taken before snapshot {}: give them oldest first", i + 2, i + 1));
        }
    }
    out
}
