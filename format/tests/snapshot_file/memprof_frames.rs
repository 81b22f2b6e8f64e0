//! The frames tracked blocks' call stacks name (kind 14, FORMAT.md §3.14): written in any
//! order, read back sorted by descriptor; absent means none.

use heapsnap_format::{FrameDescrRecord, Snapshot, SnapshotWriter};

fn write(f: impl FnOnce(&mut SnapshotWriter)) -> Snapshot {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SnapshotWriter::create(dir.path().join("s.heapsnap")).unwrap();
    w.write_metadata(&crate::common::metadata()).unwrap();
    f(&mut w);
    let path = w.finish().unwrap();
    Snapshot::open(&path).unwrap()
}

#[test]
fn frame_records_read_back_sorted() {
    let records = [
        FrameDescrRecord { descriptor: 0x30, return_address: 0x1003 },
        FrameDescrRecord { descriptor: 0x12, return_address: 0x2000 },
        FrameDescrRecord { descriptor: 0x30, return_address: 0x1003 },
    ];
    let snap = write(|w| w.write_memprof_frames(&records).unwrap());
    assert_eq!(snap.memprof_frames(), [records[1], records[0]]);
    assert!(write(|_| ()).memprof_frames().is_empty());
}
