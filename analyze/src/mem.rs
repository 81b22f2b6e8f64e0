//! Memory tuning for the analysis's allocation pattern.
//!
//! The analysis allocates and frees tens of arrays of 4-8 bytes per object, one after another.
//! By default glibc serves each big array with its own `mmap` and unmaps it on `free`, so every
//! array is faulted in again, page by page (zeroing included): at 10^7 objects that costs more
//! system time than the work done in the arrays. [`tune_allocator`] makes glibc keep freed
//! memory for reuse instead. It is process-wide: the `heapsnap` command and the benchmark call
//! it before analysing; a library user decides for their own process.

/// What an object costs the analysis at the least, in bytes: the graph's offset and at least one
/// edge to it, the dominators' arrays. A lower bound, so that a heap refused for want of memory
/// could never have been analysed with it.
pub const LEAST_BYTES_PER_OBJECT: u64 = 24;

/// Refuses a heap of `objects` objects that cannot fit in the memory this process may still
/// have ([`heapsnap_cgroup::own_room`]), before the analysis allocates for it. Where the room
/// cannot be read, or `HEAPSNAP_MEMORY_CHECK=off`, nothing is refused.
pub fn check_room(objects: u64) -> Result<(), crate::AnalyzeError> {
    if std::env::var_os("HEAPSNAP_MEMORY_CHECK").is_some_and(|v| v == "off") {
        return Ok(());
    }
    let Some(room) = test_room().or_else(heapsnap_cgroup::own_room) else { return Ok(()) };
    let needs = objects.saturating_mul(LEAST_BYTES_PER_OBJECT);
    if needs <= room.bytes {
        return Ok(());
    }
    Err(crate::AnalyzeError::NotEnoughMemory { objects, needs, room: room.bytes, of: room.of })
}

/// The room the tests pretend this process has (`HEAPSNAP_TEST_MEMORY_ROOM`, bytes), with the
/// `test-hooks` feature only.
fn test_room() -> Option<heapsnap_cgroup::Room> {
    if !cfg!(feature = "test-hooks") {
        return None;
    }
    let bytes = std::env::var("HEAPSNAP_TEST_MEMORY_ROOM").ok()?.parse().ok()?;
    Some(heapsnap_cgroup::Room { bytes, of: "HEAPSNAP_TEST_MEMORY_ROOM".into() })
}

/// Serve big allocations from the heap and never give freed memory back to the kernel while the
/// process runs (glibc only; a no-op elsewhere). Peak memory is unchanged: what is freed is
/// reused for the next arrays.
///
/// One arena for every thread: by default glibc gives each thread that allocates an arena of
/// its own, and an array made on another thread (the summary's breadth-first search, the
/// parts of a parallel pass) could not reuse what the main thread's arrays freed, nor the main
/// thread what theirs freed: each arena's freed memory stayed resident beside the others'.
/// Threads wait for that one arena's lock at every allocation: a program that installs
/// [`crate::SplitAllocator`] leaves it only the big arrays, which are few.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before the big allocations.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Gives the pages of freed memory back to the kernel (glibc only; a no-op elsewhere), where
/// the next big arrays would not reuse them at once: [`tune_allocator`] keeps freed memory for
/// reuse, but what a thread frees while another allocates stays resident beside the new
/// arrays, and a first look's peak is the sum of what is resident then. The pages given back
/// are faulted in again when reused.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's heap to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Asks the CPU to start loading `slice[i]` (nothing when `i` is out of bounds, or off x86-64):
/// the passes that follow edges to scattered nodes load them ahead of use.
#[inline(always)]
pub(crate) fn prefetch<T>(slice: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(x) = slice.get(i) {
        // SAFETY: a prefetch is a hint; it never faults, and the address is in bounds anyway.
        unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>((x as *const T).cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slice, i);
}

/// Faults in memory that is about to be written, on another thread, so that a single-threaded
/// pass that fills a big array (the dominators' DFS) does not stop at every fresh page: the
/// kernel's page faults, and on a virtual machine the host's first touch of the memory behind
/// them, run on the otherwise idle core. Only page tables change (`MADV_POPULATE_WRITE` never
/// writes data), so the memory may be in use meanwhile. Best effort: a kernel without it
/// (Linux < 5.14) or another OS just leaves the faults to the writes. Dropping it stops the
/// thread.
///
/// No huge pages are asked for, here or for the heap: a fresh huge page is two megabytes the
/// kernel must find whole, compacting memory at the fault if need be, and on a virtual machine
/// whose host takes free memory back (free page reporting) it is faulted in by the host four
/// kilobytes at a time. A first look runs for a second or two in a process of its own, often
/// after the machine has been idle: where it was measured, the fewer faults of huge pages did
/// not pay for that (the benchmarks' notes have the figures).
///
/// It keeps at most [`PREFAULT_LEAD`] bytes ahead of what the writer says it has written
/// ([`Prefault::written`]): an array sized for the worst case (one slot per node, when only
/// the reachable ones are written) is not made resident beyond what is used.
pub struct Prefault {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Bytes written so far at the start of each range, as the writer reports them.
    written: std::sync::Arc<Vec<std::sync::atomic::AtomicUsize>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Chunk the background thread faults in at a time (it checks for a stop between chunks).
const PREFAULT_CHUNK: usize = 8 << 20;

/// How far ahead of the writer the thread may fault memory in.
pub const PREFAULT_LEAD: usize = 32 << 20;

/// Ranges smaller than this are left to the writes: not worth a thread.
const PREFAULT_MIN: usize = 16 << 20;

impl Prefault {
    /// Starts faulting in address ranges `(start, bytes)` (see [`spare_capacity`]), each as its
    /// writer progresses: range `i` up to [`PREFAULT_LEAD`] bytes past what
    /// `written(i, ..)` last reported.
    pub fn start(ranges: Vec<(usize, usize)>) -> Prefault {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let written: std::sync::Arc<Vec<AtomicUsize>> = std::sync::Arc::new(ranges.iter().map(|_| AtomicUsize::new(0)).collect());
        // (range start, first whole page, end of the whole pages, faulted in up to).
        let mut pages: Vec<(usize, usize, usize, usize)> = ranges
            .iter()
            .map(|&(start, len)| match whole_pages(start, len).filter(|_| len >= PREFAULT_MIN) {
                Some((first, end)) => (start, first, end, first),
                None => (start, 0, 0, 0),
            })
            .collect();
        if pages.iter().all(|p| p.1 == p.2) {
            return Prefault { stop, written, thread: None };
        }
        let (flag, progress) = (stop.clone(), written.clone());
        let thread = std::thread::Builder::new()
            .name("heapsnap-prefault".into())
            .spawn(move || {
                while !flag.load(Relaxed) {
                    let mut waiting = false;
                    for (i, (start, _, end, done)) in pages.iter_mut().enumerate() {
                        let allowed = start.saturating_add(progress[i].load(Relaxed)).saturating_add(PREFAULT_LEAD).min(*end);
                        if *done < allowed {
                            let len = PREFAULT_CHUNK.min(*end - *done);
                            let _ = advise(*done, len, MADVISE_POPULATE_WRITE);
                            *done += len;
                        } else if *done < *end {
                            waiting = true;
                        }
                    }
                    if pages.iter().all(|p| p.3 >= p.2) {
                        return;
                    }
                    if waiting {
                        // Ahead of every writer: give them time.
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                }
            })
            .ok();
        Prefault { stop, written, thread }
    }

    /// The writer of range `i` has written its first `bytes` bytes (call it every few MiB).
    #[inline]
    pub fn written(&self, i: usize, bytes: usize) {
        if let Some(w) = self.written.get(i) {
            w.store(bytes, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Says every range is written whole, and waits until the thread has faulted all of them in
    /// (dropping it stops at the next chunk instead, as the analysis does: only the tests wait).
    #[cfg(test)]
    pub fn finish(mut self) {
        for w in self.written.iter() {
            w.store(usize::MAX / 2, std::sync::atomic::Ordering::Relaxed);
        }
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

/// A buffer shared by threads that each write (and read back) their own distinct indices, like
/// a slice split into disjoint `&mut` parts without the splitting.
#[derive(Clone, Copy)]
pub(crate) struct Scatter<T>(pub(crate) *mut T);
// SAFETY: a Scatter moves values of T into (and out of) slots other threads allocated, which is
// sound when T may move between threads; that each slot has one thread is `write`'s and `read`'s
// contract.
unsafe impl<T: Send> Send for Scatter<T> {}
// SAFETY: as for Send: sharing a Scatter only lets threads move T values in and out.
unsafe impl<T: Send> Sync for Scatter<T> {}
impl<T> Scatter<T> {
    /// # Safety
    /// `i` is in bounds of the buffer, and no other thread accesses slot `i`.
    #[inline]
    pub(crate) unsafe fn write(&self, i: usize, v: T) {
        // SAFETY: in bounds and unshared, by the caller's contract.
        unsafe { self.0.add(i).write(v) }
    }
}
impl<T: Copy> Scatter<T> {
    /// # Safety
    /// `i` is in bounds of the buffer and initialised, and no other thread writes slot `i`.
    #[inline]
    pub(crate) unsafe fn read(&self, i: usize) -> T {
        // SAFETY: in bounds, initialised and not written concurrently, by the caller's contract.
        unsafe { self.0.add(i).read() }
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
const MADVISE_POPULATE_WRITE: i32 = libc::MADV_POPULATE_WRITE;
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
            assert!(
                resident.iter().all(|&r| r & 1 == 1),
                "{} of {} pages resident",
                resident.iter().filter(|&&r| r & 1 == 1).count(),
                resident.len()
            );
        }
        v.extend(0..1000);
        assert_eq!(v.len(), 2000);
    }

    /// Pages resident in `[first, end)` (whole pages).
    #[cfg(target_os = "linux")]
    fn resident_pages(first: usize, end: usize) -> usize {
        let mut resident = vec![0u8; (end - first) / 4096];
        // SAFETY: the range is mapped (a vector's buffer) and `resident` has a byte per page.
        let rc = unsafe { libc::mincore(first as *mut libc::c_void, end - first, resident.as_mut_ptr()) };
        assert_eq!(rc, 0);
        resident.iter().filter(|&&r| r & 1 == 1).count()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn prefault_stays_a_bounded_distance_ahead_of_the_writer() {
        let mut v: Vec<u64> = Vec::with_capacity(16 << 20); // 128 MiB, never written
        let (start, len) = spare_capacity(&mut v);
        let (first, end) = whole_pages(start, len).unwrap();
        let prefault = Prefault::start(vec![(start, len)]);
        let bound = PREFAULT_LEAD + PREFAULT_CHUNK;
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(resident_pages(first, end) * 4096 <= bound, "faulted in beyond the lead with nothing written");
        // The writer moves on: the limit moves with it.
        prefault.written(0, 64 << 20);
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(resident_pages(first, end) * 4096 <= (64 << 20) + bound);
        drop(prefault);
        drop(v);
    }
}
