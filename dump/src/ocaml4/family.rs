//! OCaml 4.14 as a [`RuntimeFamily`]: each step of a dump, done by this family's modules.

use super::{capture, safety, Runtime4, SERIES};
use crate::common::copied_world::Capture;
use crate::common::copy::{SpareBuffers, TornMinorHeap};
use crate::common::custom_ops::CustomLayout;
use crate::common::family::{Copied, RuntimeFamily};
use crate::common::program::LayoutsFrom;
use crate::common::world_check::WorldCheck;
use crate::elf::Executable;
use crate::error::Result;
use crate::source::MemorySource;
use heapsnap_values::HeaderFormat;

impl RuntimeFamily for Runtime4 {
    fn exe(&self) -> &Executable {
        &self.exe
    }

    fn bias(&self) -> u64 {
        self.bias
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn read_as(&self) -> &'static str {
        SERIES
    }

    fn bytecode(&self) -> bool {
        self.bytecode.is_some()
    }

    fn notes(&self) -> &[String] {
        &self.notes
    }

    fn layouts_from(&self) -> LayoutsFrom {
        self.layouts_from
    }

    fn detected_reserved_bits(&self) -> Option<u8> {
        self.detected_reserved_bits
    }

    fn custom_layout(&self) -> &CustomLayout {
        &self.layout.custom
    }

    fn prepare(&self, source: &dyn MemorySource, _format: HeaderFormat) -> Result<SpareBuffers> {
        capture::prepare(self, source)
    }

    // 4.14 has no stop-the-world sections; its collections are short and detected: the
    // default `wait_quiet` returns at once.

    fn check_world(&self, source: &dyn MemorySource) -> Result<WorldCheck> {
        safety::check_world(self, source)
    }

    fn capture(
        &self,
        source: &dyn MemorySource,
        world: &WorldCheck,
        format: HeaderFormat,
        spare: &mut SpareBuffers,
        torn: TornMinorHeap,
    ) -> Result<Copied> {
        let (cap, gc) = capture::capture(self, source, world, format, spare, torn)?;
        Ok(Copied { cap, gc_state: Some(gc) })
    }

    fn add_interrupted_thread_roots(
        &self,
        _source: &dyn MemorySource,
        _world: &WorldCheck,
        _cap: &mut Capture,
        _format: HeaderFormat,
        warnings: &mut Vec<String>,
    ) -> Result<()> {
        warnings.push(
            "no conservative roots were added for the threads caught inside the OCaml 4.14 runtime: what only they hold may show as garbage".into(),
        );
        Ok(())
    }
}
