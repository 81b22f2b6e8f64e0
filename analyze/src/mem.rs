//! Memory tuning for the analysis's allocation pattern.
//!
//! The analysis allocates and frees tens of arrays of 4-8 bytes per object, one after another.
//! By default glibc serves each big array with its own `mmap` and unmaps it on `free`, so every
//! array is faulted in again, page by page (zeroing included): at 10^7 objects that costs more
//! system time than the work done in the arrays. [`tune_allocator`] makes glibc keep freed
//! memory for reuse instead. It is process-wide: the `heapsnap` command and the benchmark call
//! it before analysing; a library user decides for their own process.

/// Serve big allocations from the heap and never give freed memory back to the kernel while the
/// process runs (glibc only; a no-op elsewhere). Peak memory is unchanged: what is freed is
/// reused for the next arrays.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before the big allocations.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}
