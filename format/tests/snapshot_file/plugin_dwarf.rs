//! Plugins' DWARF sections (kind 10, FORMAT.md §3.10): written per plugin, read back in file
//! order; malformed ones are left out, never a failure.

use heapsnap_format::{PluginDwarf, Snapshot, SnapshotWriter, DWARF_NAME_LEN, SECTION_KIND_PLUGIN_DWARF};

/// Bytes before the section's own: the bias and the name.
const HEAD: usize = 8 + DWARF_NAME_LEN;

fn write(f: impl FnOnce(&mut SnapshotWriter)) -> Snapshot {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SnapshotWriter::create(dir.path().join("s.heapsnap")).unwrap();
    w.write_metadata(&crate::common::metadata()).unwrap();
    f(&mut w);
    let path = w.finish().unwrap();
    Snapshot::open(&path).unwrap()
}

#[test]
fn sections_of_two_plugins_round_trip() {
    let snap = write(|w| {
        w.write_plugin_dwarf(0x7f00_0000_0000, ".debug_line", b"lines of one").unwrap();
        w.write_plugin_dwarf(0x7f00_1000_0000, ".debug_line", b"lines of two").unwrap();
        w.write_plugin_dwarf(0x7f00_0000_0000, ".debug_info", b"").unwrap();
        assert!(w.write_plugin_dwarf(0x7f00_0000_0000, ".debug_line", b"again").is_err());
        assert!(w.write_plugin_dwarf(1, "", b"x").is_err());
        assert!(w.write_plugin_dwarf(1, &"n".repeat(DWARF_NAME_LEN + 1), b"x").is_err());
    });
    assert_eq!(
        snap.plugin_dwarf(),
        [
            PluginDwarf { load_bias: 0x7f00_0000_0000, name: ".debug_line", bytes: b"lines of one" },
            PluginDwarf { load_bias: 0x7f00_1000_0000, name: ".debug_line", bytes: b"lines of two" },
            PluginDwarf { load_bias: 0x7f00_0000_0000, name: ".debug_info", bytes: b"" },
        ]
    );
    // The executable's DWARF is another section kind.
    assert!(snap.dwarf_section(".debug_line").is_none());
}

#[test]
fn malformed_sections_are_left_out() {
    let snap = write(|w| {
        w.write_raw_section(SECTION_KIND_PLUGIN_DWARF, 0, &[0u8; HEAD - 1]).unwrap();
        let mut nameless = vec![0u8; HEAD + 4];
        nameless[0] = 1;
        w.write_raw_section(SECTION_KIND_PLUGIN_DWARF, 0, &nameless).unwrap();
        let mut bad_utf8 = vec![0u8; HEAD];
        bad_utf8[8] = 0xff;
        w.write_raw_section(SECTION_KIND_PLUGIN_DWARF, 0, &bad_utf8).unwrap();
        w.write_plugin_dwarf(2, ".debug_str", b"ok").unwrap();
    });
    assert_eq!(snap.plugin_dwarf(), [PluginDwarf { load_bias: 2, name: ".debug_str", bytes: b"ok" }]);
}
