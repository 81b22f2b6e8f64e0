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

/// Faults in memory that is about to be written, on another thread, so that a single-threaded
/// pass that fills a big array (the dominators' DFS) does not stop at every fresh page: the
/// kernel's page faults, and on a virtual machine the host's first touch of the memory behind
/// them, run on the otherwise idle core. Only page tables change (`MADV_POPULATE_WRITE` never
/// writes data), so the memory may be in use meanwhile; huge pages are asked for first
/// (`MADV_HUGEPAGE`: 512 times fewer faults). Best effort: a kernel without these (Linux < 5.14)
/// or another OS just leaves the faults to the writes. Dropping it stops the thread.
pub struct Prefault {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Chunk the background thread faults in at a time (it checks for a stop between chunks).
const PREFAULT_CHUNK: usize = 8 << 20;

/// Ranges smaller than this are left to the writes: not worth a thread.
const PREFAULT_MIN: usize = 16 << 20;

impl Prefault {
    /// Starts faulting in address ranges `(start, bytes)`, in order (see [`spare_capacity`]).
    pub fn start(ranges: Vec<(usize, usize)>) -> Prefault {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let pages: Vec<(usize, usize)> =
            ranges.into_iter().filter(|&(_, len)| len >= PREFAULT_MIN).filter_map(|(start, len)| whole_pages(start, len)).collect();
        if pages.is_empty() {
            return Prefault { stop, thread: None };
        }
        let thread = std::thread::Builder::new()
            .name("heapsnap-prefault".into())
            .spawn(move || {
                for (start, end) in pages {
                    let _ = advise(start, end - start, MADVISE_HUGEPAGE);
                    for chunk in (start..end).step_by(PREFAULT_CHUNK) {
                        if flag.load(std::sync::atomic::Ordering::Relaxed) {
                            return;
                        }
                        let _ = advise(chunk, PREFAULT_CHUNK.min(end - chunk), MADVISE_POPULATE_WRITE);
                    }
                }
            })
            .ok();
        Prefault { stop, thread }
    }

    /// Waits until every range is faulted in (dropping it stops at the next chunk instead).
    pub fn finish(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Prefault {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A pointer shared by threads that write distinct indices.
#[derive(Clone, Copy)]
pub(crate) struct Scatter<T>(pub(crate) *mut T);
unsafe impl<T> Send for Scatter<T> {}
unsafe impl<T> Sync for Scatter<T> {}
impl<T> Scatter<T> {
    /// # Safety
    /// `i` is in bounds and no other thread writes it.
    pub(crate) unsafe fn write(&self, i: usize, v: T) {
        unsafe { self.0.add(i).write(v) }
    }
}

/// The address range of a vector's spare capacity, for [`Prefault::start`].
pub fn spare_capacity<T>(v: &mut Vec<T>) -> (usize, usize) {
    let spare = v.spare_capacity_mut();
    (spare.as_mut_ptr() as usize, std::mem::size_of_val(spare))
}

/// The whole pages inside `[start, start + len)`, if any.
fn whole_pages(start: usize, len: usize) -> Option<(usize, usize)> {
    const PAGE: usize = 4096;
    let first = start.checked_add(PAGE - 1)? & !(PAGE - 1);
    let end = start.checked_add(len)? & !(PAGE - 1);
    (first < end).then_some((first, end))
}

#[cfg(target_os = "linux")]
const MADVISE_HUGEPAGE: i32 = libc::MADV_HUGEPAGE;
#[cfg(target_os = "linux")]
const MADVISE_POPULATE_WRITE: i32 = libc::MADV_POPULATE_WRITE;
#[cfg(not(target_os = "linux"))]
const MADVISE_HUGEPAGE: i32 = 0;
#[cfg(not(target_os = "linux"))]
const MADVISE_POPULATE_WRITE: i32 = 0;

/// A memory hint on whole pages: whether the kernel took it. Callers ignore failures (an old
/// kernel, memory unmapped meanwhile): the hints only save time.
fn advise(start: usize, len: usize, advice: i32) -> bool {
    #[cfg(target_os = "linux")]
    // SAFETY: neither advice changes the contents of memory; on an unmapped range madvise fails
    // with ENOMEM.
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, advice) == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (start, len, advice);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_pages_inside_a_range() {
        assert_eq!(whole_pages(4096, 8192), Some((4096, 12288)));
        assert_eq!(whole_pages(4097, 8192), Some((8192, 12288)));
        assert_eq!(whole_pages(4097, 4095), None);
        assert_eq!(whole_pages(usize::MAX - 10, 100), None);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn prefault_keeps_contents_and_makes_pages_resident() {
        let mut v: Vec<u64> = Vec::with_capacity(6 << 20); // 48 MiB
        v.extend(0..1000);
        let (start, len) = spare_capacity(&mut v);
        let populated = advise(whole_pages(start, len).unwrap().0, 4096, MADVISE_POPULATE_WRITE);
        Prefault::start(vec![(start, len)]).finish();
        assert!(v.iter().copied().eq(0..1000));
        if populated {
            // Every whole page of the spare capacity is now in memory.
            let (first, end) = whole_pages(start, len).unwrap();
            let mut resident = vec![0u8; (end - first) / 4096];
            // SAFETY: the range is mapped (the vector's buffer) and `resident` has a byte per page.
            let rc = unsafe { libc::mincore(first as *mut libc::c_void, end - first, resident.as_mut_ptr()) };
            assert_eq!(rc, 0);
            assert!(resident.iter().all(|&r| r & 1 == 1), "{} of {} pages resident", resident.iter().filter(|&&r| r & 1 == 1).count(), resident.len());
        }
        v.extend(0..1000);
        assert_eq!(v.len(), 2000);
    }
}
