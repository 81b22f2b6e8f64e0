use heapsnap_dump::source::{ProcessMemory, MemorySource, ReadExt};
fn main() {
    let pid: u32 = std::env::args().nth(1).unwrap().parse().unwrap();
    let m = ProcessMemory::new(pid).unwrap();
    let exe = heapsnap_dump::elf::Executable::open(&m.executable_path()).unwrap();
    let bias = exe.load_bias(&m.mappings().unwrap(), &m.executable_path()).unwrap();
    let block = bias + exe.require("camlStdlib__Sys").unwrap();
    let hd = m.read_u64(block - 8).unwrap();
    println!("header {hd:#x}");
    for i in 0..((hd >> 10) & 0x3fffff) { let v = m.read_u64(block + 8*i).unwrap(); println!("[{i}] {v:#x} {}", if v & 1 == 1 { format!("int {}", v >> 1) } else { String::new() }); }
    println!("{:?}", heapsnap_dump::runtime::detect_reserved_bits(&exe, bias, &m));
}
