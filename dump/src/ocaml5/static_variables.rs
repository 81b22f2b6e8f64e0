//! The runtime's file-static variables the dumper reads, with the file defining each: the
//! list both [`super::statics`] (which finds them) and [`super::tables`] (which records how to
//! find them without debug info) work from.

/// (variable, defining file) of every file-static variable in `Statics`.
pub const STATIC_VARIABLES: &[(&str, &str)] = &[
    ("stw_domains", "domain.c"),
    ("stw_leader", "domain.c"),
    ("all_domains_lock", "domain.c"),
    ("pool_freelist", "shared_heap.c"),
    ("atoms", "shared_heap.c"),
    ("roots_mutex", "globroots.c"),
    ("caml_dyn_globals", "globroots.c"),
    ("orph_structs", "major_gc.c"),
    ("orphaned_lock", "major_gc.c"),
    ("current_frame_descrs", "frame_descriptors.c"),
    ("orphans", "memprof.c"),
    ("orphans_lock", "memprof.c"),
    ("thread_table", "st_stubs.c"),
    ("custom_ops_table", "custom.c"),
];
