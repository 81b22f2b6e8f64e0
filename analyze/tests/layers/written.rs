//! A synthetic heap written to a temporary snapshot file and opened (the file lives as long as
//! the value).

use heapsnap_format::Snapshot;
use heapsnap_testkit::synth::SynthHeap;

pub struct Written {
    _dir: tempfile::TempDir,
    pub snap: Snapshot,
}

pub fn write(h: &SynthHeap) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.heapsnap");
    h.write(&path).unwrap();
    Written { snap: Snapshot::open(&path).unwrap(), _dir: dir }
}
