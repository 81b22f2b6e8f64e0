//! Where the runtime's variables are (link-time addresses). Exported ones are symbols
//! (`.dynsym` has them even in a stripped executable). File-static ones are found, in order,
//! through DWARF, through `.symtab`'s local symbols, or through the code that uses them
//! ([`super::locate`], with the release's tables).

use super::tables::Tables;
use crate::dwarf::TypeIndex;
use crate::elf::Executable;
use crate::error::{DumpError, Result};

/// The runtime's file-static variables the dumper reads, with the file defining each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statics {
    pub stw_domains: u64,
    /// Nonzero while a stop-the-world section runs.
    pub stw_leader: u64,
    pub all_domains_lock: u64,
    pub pool_freelist: u64,
    /// shared_heap.c's `atoms` (the zero-sized blocks `caml_atom` returns) and its size.
    pub atoms: Option<(u64, u64)>,
    pub roots_mutex: u64,
    pub dyn_globals: Option<u64>,
    pub orph_structs: u64,
    pub orphaned_lock: u64,
    /// Native code's frame tables (a bytecode runtime has none).
    pub current_frame_descrs: Option<u64>,
    /// memprof.c's orphaned entry tables and their lock (5.3).
    pub memprof_orphans: Option<(u64, u64)>,
    /// systhreads' table, when the threads library is linked in.
    pub thread_table: Option<u64>,
    pub custom_ops_table: u64,
}

/// Whether the systhreads library is linked in (its exported entry point is there).
pub fn threads_linked(exe: &Executable) -> bool {
    exe.symbol("caml_thread_initialize").is_some()
}

struct Finder<'a> {
    exe: &'a Executable,
    types: Option<&'a TypeIndex>,
    tables: Option<&'a Tables>,
}

impl Finder<'_> {
    /// The version the tables were made from, for messages.
    fn tables_version(&self) -> &str {
        self.tables.map_or("?", |t| t.version.as_str())
    }

    /// The variable's address and size, if it can be found.
    fn find(&self, name: &str, file: &str) -> Result<Option<(u64, u64)>> {
        if let Some(t) = self.types {
            return Ok(t.variable(name, file).ok().map(|v| (v.address, t.variable_type(v).and_then(|ty| t.size_of(ty)).unwrap_or(0))));
        }
        let locals: Vec<_> = self.exe.symbols.iter().filter(|s| s.name == name && !s.is_global && !s.is_function).collect();
        if let Some(s) = locals.iter().find(|s| s.file.as_deref().is_some_and(|f| f.ends_with(file))).or(locals.first()) {
            return Ok(Some((s.address, s.size)));
        }
        let Some(entry) = self.tables.and_then(|t| t.statics.get(name)) else { return Ok(None) };
        let found: Vec<u64> = entry.locators.iter().filter_map(|l| super::locate::resolve(self.exe, l)).collect();
        // The answer most locators give, if more than half of those that resolved give it.
        let best = found.iter().max_by_key(|&&a| found.iter().filter(|&&b| b == a).count());
        match best {
            None => Ok(None),
            Some(&a) if 2 * found.iter().filter(|&&b| b == a).count() > found.len() => Ok(Some((a, entry.size))),
            Some(_) => Err(DumpError::VersionMismatch(format!(
                "the code that uses the runtime's variable {name} ({file}) is not laid out as in OCaml {}: its locators disagree ({})",
                self.tables_version(),
                found.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    fn required(&self, name: &str, file: &str) -> Result<u64> {
        self.find(name, file)?.map(|(a, _)| a).ok_or_else(|| self.missing(name, file))
    }

    fn missing(&self, name: &str, file: &str) -> DumpError {
        let how = if self.types.is_some() {
            "the executable's DWARF does not have it".to_string()
        } else {
            format!(
                "the executable has no debug info and no .symtab, and the code that uses it does not match OCaml {}'s",
                self.tables_version()
            )
        };
        DumpError::MissingStatic { name: format!("{name} ({file})"), how }
    }
}

impl Statics {
    /// Finds every variable. `types` is the DWARF, when there is some; `tables` the release's
    /// tables, used only without DWARF and `.symtab`; `memprof` whether statmemprof keeps
    /// entry tables.
    pub fn find(exe: &Executable, types: Option<&TypeIndex>, tables: Option<&Tables>, memprof: bool) -> Result<Statics> {
        let f = Finder { exe, types, tables };
        let threads = match types {
            Some(t) => t.variable("thread_table", "st_stubs.c").is_ok(),
            None => threads_linked(exe),
        };
        let memprof_orphans = match memprof {
            true => Some((f.required("orphans", "memprof.c")?, f.required("orphans_lock", "memprof.c")?)),
            false => None,
        };
        Ok(Statics {
            stw_domains: f.required("stw_domains", "domain.c")?,
            stw_leader: f.required("stw_leader", "domain.c")?,
            all_domains_lock: f.required("all_domains_lock", "domain.c")?,
            pool_freelist: f.required("pool_freelist", "shared_heap.c")?,
            atoms: f.find("atoms", "shared_heap.c")?.filter(|&(_, size)| size > 0),
            roots_mutex: f.required("roots_mutex", "globroots.c")?,
            dyn_globals: f.find("caml_dyn_globals", "globroots.c")?.map(|(a, _)| a),
            orph_structs: f.required("orph_structs", "major_gc.c")?,
            orphaned_lock: f.required("orphaned_lock", "major_gc.c")?,
            current_frame_descrs: f.find("current_frame_descrs", "frame_descriptors.c")?.map(|(a, _)| a),
            memprof_orphans,
            thread_table: if threads { Some(f.required("thread_table", "st_stubs.c")?) } else { None },
            custom_ops_table: f.required("custom_ops_table", "custom.c")?,
        })
    }
}
