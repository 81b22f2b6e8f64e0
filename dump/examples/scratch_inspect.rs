fn main() {
    let args: Vec<String> = std::env::args().collect();
    let snap = heapsnap_format::Snapshot::open(&args[1]).unwrap();
    for a in &args[2..] {
        let addr = u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap();
        let r = snap.region_of(addr);
        println!("{addr:#x}: region {:?}", r.map(|r| (r.kind(), r.base(), r.header.domain)));
        if let Some(r) = r {
            let hd = r.word_at(addr - 8).unwrap_or(0);
            println!("  header {hd:#x} tag {} wosize {} colour {}", hd as u8, hd >> 10, (hd >> 8) & 3);
            for i in 0..6 { println!("  [{i}] {:#x?}", r.word_at(addr + 8 * i)); }
        }
        let refs: Vec<_> = snap.roots().iter().filter(|r| r.value == addr).collect();
        println!("  roots: {refs:?}");
    }
    let r = oracle::reachability(&snap); println!("missed {} {:x?} dangling {:x?}", r.missed.len(), &r.missed[..r.missed.len().min(5)], r.dangling);
    println!("ephemerons {:x?}", &snap.ephemerons()[..4.min(snap.ephemerons().len())]);
}
#[path = "../../tests/dump_support/oracle.rs"]
mod oracle;
