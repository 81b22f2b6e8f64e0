//! Bad input gets the error that names its problem, at the right offset.

use crate::common::synthetic;
use heapsnap_memtrace::{Error, Problem, Trace};

/// Offsets of the packets of a well-formed trace.
fn packets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        offsets.push(at);
        at += u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize / 8;
    }
    offsets
}

fn sample() -> Vec<u8> {
    synthetic::trace(20_000, 5)
}

/// Reads every event; the first error.
fn read_all(bytes: &[u8]) -> Result<(usize, usize), Error> {
    let trace = Trace::from_bytes(bytes)?;
    let mut events = trace.events();
    let mut count = 0;
    while events.next_event()?.is_some() {
        count += 1;
    }
    Ok((count, events.skipped_packets()))
}

#[test]
fn the_sample_is_well_formed() {
    let bytes = sample();
    assert!(packets(&bytes).len() > 5);
    assert!(read_all(&bytes).unwrap().0 >= 20_000);
}

#[test]
fn not_a_trace() {
    assert!(matches!(Trace::from_bytes(b""), Err(Error::NotMemtrace { .. })));
    assert!(matches!(Trace::from_bytes(b"(* an OCaml file *)\nlet x = 1\n"), Err(Error::NotMemtrace { .. })));
    assert!(matches!(Trace::from_bytes(&[0xc1]), Err(Error::NotMemtrace { .. })));
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.ctf");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(Trace::open(&empty), Err(Error::NotMemtrace { .. })));
    assert!(matches!(Trace::open(dir.path().join("missing.ctf")), Err(Error::Io { .. })));
    let message = Trace::from_bytes(b"\x7fELF....").err().unwrap().to_string();
    assert!(message.starts_with("not a memtrace trace"), "{message}");
}

#[test]
fn truncated() {
    let bytes = sample();
    let offsets = packets(&bytes);
    // Inside the first packet's header, and inside its content.
    assert!(matches!(Trace::from_bytes(&bytes[..20]), Err(Error::Truncated { packet: 0, .. })));
    assert!(matches!(Trace::from_bytes(&bytes[..offsets[1] - 3]), Err(Error::Truncated { packet: 0, .. })));
    // In the middle of a later packet: the header reads, the events stop with the error.
    let cut = offsets[4] + 100;
    let error = read_all(&bytes[..cut]).unwrap_err();
    assert!(matches!(error, Error::Truncated { packet, needed, available: 100 } if packet == offsets[4] && needed > 100), "{error}");
    // At a packet boundary, a shorter trace is a valid one.
    assert!(read_all(&bytes[..offsets[4]]).is_ok());
}

#[test]
fn unknown_version() {
    let bytes = sample();
    let offsets = packets(&bytes);
    let mut first = bytes.clone();
    first[28] = 4;
    assert!(matches!(Trace::from_bytes(&first), Err(Error::UnsupportedVersion { packet: 0, version: 4 })));
    let mut later = bytes.clone();
    later[offsets[2] + 28] = 9;
    assert!(matches!(read_all(&later), Err(Error::UnsupportedVersion { version: 9, .. })));
    let mut older = bytes;
    older[offsets[2] + 28] = 2;
    assert!(matches!(read_all(&older), Err(Error::CorruptPacket { problem: Problem::VersionChanged { first: 3, this: 2 }, .. })));
}

#[test]
fn corrupt_packets() {
    let bytes = sample();
    let offsets = packets(&bytes);
    let corrupt = |at: usize, value: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + value.len()].copy_from_slice(value);
        match read_all(&b) {
            Err(Error::CorruptPacket { packet, problem }) => (packet, problem),
            other => panic!("{other:?}"),
        }
    };
    let p = offsets[3];
    assert_eq!(corrupt(p, &[0; 4]), (p, Problem::BadMagic(0)));
    assert!(matches!(corrupt(p + 4, &13u32.to_le_bytes()), (_, Problem::BadPacketSize { bits: 13, .. })));
    assert!(matches!(corrupt(p + 4, &(40_000u32 * 8).to_le_bytes()), (_, Problem::PacketTooLarge { bytes: 40_000 })));
    assert!(matches!(corrupt(p + 8, &u64::MAX.to_le_bytes()), (_, Problem::ReversedTimestamps { .. })));
    assert!(matches!(corrupt(p + 52, &u64::MAX.to_le_bytes()), (_, Problem::ReversedAllocIds { .. })));
    // The cache check of an events packet (slot at 40, its prediction, its code at 44).
    let events_packet = *offsets.iter().skip(2).find(|&&o| u16::from_le_bytes([bytes[o + 40], bytes[o + 41]]) != 0xffff).unwrap();
    let code = u64::from_le_bytes(bytes[events_packet + 44..events_packet + 52].try_into().unwrap());
    assert!(matches!(corrupt(events_packet + 44, &(code ^ 1).to_le_bytes()), (_, Problem::CacheVerification { .. })));
    // One allocation more than the header says.
    let end = u64::from_le_bytes(bytes[events_packet + 60..events_packet + 68].try_into().unwrap());
    assert!(matches!(corrupt(events_packet + 60, &(end + 1).to_le_bytes()), (_, Problem::AllocIdMismatch { .. })));
}

#[test]
fn corrupt_events() {
    let bytes = sample();
    let offsets = packets(&bytes);
    let p = offsets[3];
    let first_event = p + 68;
    let header = u32::from_le_bytes(bytes[first_event..first_event + 4].try_into().unwrap());
    let with_header = |value: u32| {
        let mut b = bytes.clone();
        b[first_event..first_event + 4].copy_from_slice(&value.to_le_bytes());
        read_all(&b)
    };
    let unknown = with_header(header & 0x1ff_ffff | 50 << 25);
    assert!(
        matches!(unknown, Err(Error::CorruptEvent { packet, offset, problem: Problem::UnknownEvent(50) }) if packet == p && offset == first_event)
    );
    let info = with_header(header & 0x1ff_ffff);
    assert!(matches!(info, Err(Error::CorruptEvent { problem: Problem::SecondTraceInfo, .. })));
    let time = with_header(header & !0x1ff_ffff | (header.wrapping_sub(1) & 0x1ff_ffff));
    assert!(
        matches!(time, Err(Error::CorruptEvent { problem: Problem::TimeOutsidePacket { .. } | Problem::TimeGoesBack { .. }, .. })),
        "{time:?}"
    );
    // A packet whose content ends inside an event: shrink the size of the last packet.
    let last = *offsets.last().unwrap();
    let mut b = bytes.clone();
    let size = u32::from_le_bytes(b[last + 4..last + 8].try_into().unwrap());
    b[last + 4..last + 8].copy_from_slice(&(size - 8).to_le_bytes());
    b.pop();
    let short = read_all(&b);
    assert!(matches!(short, Err(Error::CorruptEvent { problem: Problem::PastEnd, .. }) | Err(Error::CorruptPacket { .. })), "{short:?}");
}

#[test]
fn packets_of_another_process_are_skipped() {
    let bytes = sample();
    let offsets = packets(&bytes);
    let (events, skipped) = read_all(&bytes).unwrap();
    assert_eq!(skipped, 0);
    // A forked child's packet (its pid differs) in the middle of the trace is skipped whole.
    let mut forked = bytes[..offsets[3]].to_vec();
    let mut child = bytes[offsets[3]..offsets[4]].to_vec();
    child[30..38].copy_from_slice(&999u64.to_le_bytes());
    forked.extend(&child);
    forked.extend(&bytes[offsets[3]..]);
    assert_eq!(read_all(&forked).unwrap(), (events, 1));
}

#[test]
fn errors_stop_the_reader() {
    let bytes = sample();
    let offsets = packets(&bytes);
    let mut b = bytes.clone();
    b[offsets[3]] = 0;
    let trace = Trace::from_bytes(&b).unwrap();
    let mut events = trace.events();
    let error = loop {
        match events.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("no error"),
            Err(error) => break error,
        }
    };
    assert!(error.to_string().contains(&format!("corrupt packet at byte {}", offsets[3])), "{error}");
    assert!(events.next_event().unwrap().is_none());
    assert!(trace.index().is_err());
}
