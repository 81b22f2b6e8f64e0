fn main() {
    let path = std::env::args().nth(1).unwrap();
    let exe = heapsnap_dump::elf::Executable::open(std::path::Path::new(&path)).unwrap();
    let t0 = std::time::Instant::now();
    let types = heapsnap_dump::dwarf::TypeIndex::load(&exe).unwrap();
    eprintln!("dwarf {:?}", t0.elapsed());
    let layout = heapsnap_dump::runtime::layout::Layout::load(&types);
    match layout { Ok(l) => println!("{:#?}", l), Err(e) => println!("ERR {e}") }
}
