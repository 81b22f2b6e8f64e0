//! The allocator a program that analyses should install: small blocks from mimalloc, big
//! arrays from the C library's heap.
//!
//! An analysis allocates two kinds of memory. Its arrays, a few bytes per object each, are
//! big and few: glibc's heap serves them, tuned by [`crate::tune_allocator`] into one arena
//! whose freed arrays the next ones reuse, whichever thread made them (the peak memory of a
//! first look depends on it). Its names and types (the OCaml names' JSON, type trees, labels,
//! hash tables) are millions of small blocks, made and freed on several threads at once. In
//! that one arena every small `malloc` and `free` takes the arena's lock: the typing, on one
//! thread, waited on it in the kernel while the roots' reach allocated on the other. mimalloc
//! gives each thread a heap of its own for small blocks, with no lock between them.
//!
//! Which allocator serves a block follows from its size alone, which the caller passes back
//! to `dealloc` and `realloc`: no table, and a block always returns to the allocator it came
//! from.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks smaller than this come from mimalloc; the others from the C library's heap.
pub const SMALL_BLOCK: usize = 4096;

/// A global allocator that serves blocks under [`SMALL_BLOCK`] bytes from mimalloc and the
/// others from the system allocator:
///
/// ```ignore
/// #[global_allocator]
/// static ALLOCATOR: heapsnap_analyze::SplitAllocator = heapsnap_analyze::SplitAllocator;
/// ```
pub struct SplitAllocator;

fn is_small(size: usize) -> bool {
    size < SMALL_BLOCK
}

// SAFETY: every block is allocated and freed by the same allocator, chosen by the size in its
// layout (the same at allocation and at deallocation, as `GlobalAlloc` requires); a reallocation
// that changes allocator moves the contents to a new block of the other one.
unsafe impl GlobalAlloc for SplitAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            match is_small(layout.size()) {
                true => mimalloc::MiMalloc.alloc(layout),
                false => System.alloc(layout),
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            match is_small(layout.size()) {
                true => mimalloc::MiMalloc.alloc_zeroed(layout),
                false => System.alloc_zeroed(layout),
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the allocator its layout's size chooses.
        unsafe {
            match is_small(layout.size()) {
                true => mimalloc::MiMalloc.dealloc(ptr, layout),
                false => System.dealloc(ptr, layout),
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same allocator: forwarded with the caller's guarantees. Across allocators:
        // the new layout is valid (the caller guarantees `new_size` with this alignment does
        // not overflow), both blocks hold at least the bytes copied, and the old block is
        // freed by the allocator it came from.
        unsafe {
            match (is_small(layout.size()), is_small(new_size)) {
                (true, true) => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
                (false, false) => System.realloc(ptr, layout, new_size),
                _ => {
                    let moved = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
                    if !moved.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    moved
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether mimalloc made the block at `ptr`.
    fn from_mimalloc(ptr: *mut u8) -> bool {
        // SAFETY: only asks whether an address lies in mimalloc's memory.
        unsafe { libmimalloc_sys::mi_is_in_heap_region(ptr.cast()) }
    }

    fn filled(size: usize, align: usize, zeroed: bool) -> (*mut u8, Layout) {
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: non-zero size; the block is written within its size.
        let ptr = unsafe {
            let ptr = if zeroed { SplitAllocator.alloc_zeroed(layout) } else { SplitAllocator.alloc(layout) };
            assert!(!ptr.is_null());
            assert_eq!(ptr as usize % align, 0, "{size} bytes aligned to {align}");
            if zeroed {
                assert!(std::slice::from_raw_parts(ptr, size).iter().all(|&b| b == 0), "{size} bytes zeroed");
            }
            for i in 0..size {
                ptr.add(i).write(i as u8);
            }
            ptr
        };
        (ptr, layout)
    }

    #[test]
    fn small_blocks_come_from_mimalloc_and_big_ones_from_the_system() {
        for (size, small) in [(1, true), (24, true), (SMALL_BLOCK - 1, true), (SMALL_BLOCK, false), (1 << 20, false)] {
            for align in [8, 64, 4096] {
                for zeroed in [false, true] {
                    let (ptr, layout) = filled(size, align, zeroed);
                    assert_eq!(from_mimalloc(ptr), small, "{size} bytes aligned to {align}");
                    // SAFETY: allocated above with this layout.
                    unsafe { SplitAllocator.dealloc(ptr, layout) };
                }
            }
        }
    }

    #[test]
    fn reallocation_keeps_the_contents_within_and_across_the_allocators() {
        let sizes = [16, SMALL_BLOCK - 8, SMALL_BLOCK, 3 * SMALL_BLOCK, 1 << 20];
        for from in sizes {
            for to in sizes {
                for align in [8, 64] {
                    let (ptr, layout) = filled(from, align, false);
                    // SAFETY: `ptr` was allocated with `layout`; the new size is non-zero.
                    unsafe {
                        let moved = SplitAllocator.realloc(ptr, layout, to);
                        assert!(!moved.is_null());
                        assert_eq!(moved as usize % align, 0);
                        assert_eq!(from_mimalloc(moved), is_small(to), "{from} -> {to} bytes");
                        let kept = std::slice::from_raw_parts(moved, from.min(to));
                        assert!(kept.iter().enumerate().all(|(i, &b)| b == i as u8), "{from} -> {to} bytes");
                        SplitAllocator.dealloc(moved, Layout::from_size_align(to, align).unwrap());
                    }
                }
            }
        }
    }
}
