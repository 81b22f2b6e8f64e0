//! Big arrays backed by transparent huge pages where the kernel offers them on request
//! (`madvise` mode): the analysis allocates tens of arrays of 4-8 bytes per object, and faulting
//! them in 4 KiB at a time (zeroing included) costs more than the work done in them.

/// Arrays smaller than this are left alone.
const HUGE_THRESHOLD: usize = 4 << 20;

/// Asks for huge pages for the untouched memory of `v`'s spare capacity.
fn advise<T>(v: &mut Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < HUGE_THRESHOLD {
        return;
    }
    let start = v.as_mut_ptr() as usize;
    let page = 4096;
    let aligned = start.div_ceil(page) * page;
    let len = (start + bytes).saturating_sub(aligned) / page * page;
    if len > 0 {
        // SAFETY: the range lies inside the vector's own allocation; MADV_HUGEPAGE changes no
        // contents, only how the kernel backs the pages. Failure (no THP) is harmless.
        unsafe {
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
    }
}

/// An empty vector with room for `capacity` elements, backed by huge pages when large.
pub fn with_capacity<T>(capacity: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(capacity);
    advise(&mut v);
    v
}

/// `vec![value; len]`, backed by huge pages when large.
pub fn filled<T: Copy + Send + Sync>(len: usize, value: T) -> Vec<T> {
    let mut v = with_capacity(len);
    v.resize(len, value);
    v
}
