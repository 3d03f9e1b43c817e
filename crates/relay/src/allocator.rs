//! The relay's global allocator: mimalloc for ordinary allocations, the system allocator
//! for big ones.
//!
//! The relay allocates and frees a few dozen small buffers per event (row values, the
//! record, its headers, delivery bookkeeping), often freeing on another thread than the
//! one that allocated; with glibc's malloc, malloc and free were about a fifth of its
//! instructions, and mimalloc cuts the relay's CPU per event by about a fifth
//! (docs/benchmarks.md). But mimalloc keeps freed big blocks for reuse, and a relay
//! passing 64 MiB rows then holds several of them resident; glibc hands a block that big
//! (above its mmap threshold) back to the kernel at once. So allocations of
//! [`BIG_ALLOCATION_BYTES`] and more go to the system allocator.
//!
//! Which allocator owns a block follows from its size alone, which `dealloc` and `realloc`
//! are given, so no block is ever freed by the other allocator.

use std::alloc::{GlobalAlloc, Layout, System};

use mimalloc::MiMalloc;

/// Allocations at least this big come from the system allocator.
pub const BIG_ALLOCATION_BYTES: usize = 1 << 20;

/// mimalloc below [`BIG_ALLOCATION_BYTES`], the system allocator from there on. Declare it
/// with `#[global_allocator]` in a binary.
pub struct RelayAllocator;

fn is_big(size: usize) -> bool {
    size >= BIG_ALLOCATION_BYTES
}

// SAFETY: every method forwards to one of two sound allocators, chosen by the block's
// size; a block's size is the same when it is allocated and when it is freed or
// reallocated (the `GlobalAlloc` contract), so each block goes back to the allocator that
// made it. A realloc that crosses the threshold allocates in the other allocator, copies
// the smaller of the two sizes, and frees the old block in its own.
unsafe impl GlobalAlloc for RelayAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size), passed on as is.
        unsafe {
            if is_big(layout.size()) {
                System.alloc(layout)
            } else {
                MiMalloc.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe {
            if is_big(layout.size()) {
                System.alloc_zeroed(layout)
            } else {
                MiMalloc.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator with `layout`, so by the allocator
        // its size chooses.
        unsafe {
            if is_big(layout.size()) {
                System.dealloc(ptr, layout)
            } else {
                MiMalloc.dealloc(ptr, layout)
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (was_big, will_be_big) = (is_big(layout.size()), is_big(new_size));
        // SAFETY: `ptr` was allocated with `layout` by the allocator its size chooses; the
        // caller guarantees `new_size` is valid for `layout.align()`.
        unsafe {
            match (was_big, will_be_big) {
                (true, true) => System.realloc(ptr, layout, new_size),
                (false, false) => MiMalloc.realloc(ptr, layout, new_size),
                _ => {
                    let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                    let new_ptr = self.alloc(new_layout);
                    if !new_ptr.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    new_ptr
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks on both sides of the threshold, grown and shrunk across it, keep their bytes
    /// and are freed by their own allocator (a mismatch crashes the test process).
    #[test]
    fn blocks_keep_their_contents_across_the_threshold() {
        let allocator = RelayAllocator;
        for (from, to) in [
            (64, BIG_ALLOCATION_BYTES * 2),
            (BIG_ALLOCATION_BYTES * 2, 100),
            (BIG_ALLOCATION_BYTES - 1, BIG_ALLOCATION_BYTES),
            (BIG_ALLOCATION_BYTES, BIG_ALLOCATION_BYTES * 3),
            (10, 4000),
        ] {
            let layout = Layout::from_size_align(from, 16).expect("a valid layout");
            // SAFETY: non-zero sizes; each block is written within its size, reallocated
            // with its own layout, and freed once with the layout of its current size.
            unsafe {
                let block = allocator.alloc(layout);
                assert!(!block.is_null());
                for index in 0..from {
                    *block.add(index) = (index % 251) as u8;
                }
                let grown = allocator.realloc(block, layout, to);
                assert!(!grown.is_null());
                assert_eq!(grown as usize % 16, 0, "alignment kept");
                for index in 0..from.min(to) {
                    assert_eq!(*grown.add(index), (index % 251) as u8, "byte {index}");
                }
                allocator.dealloc(grown, Layout::from_size_align(to, 16).expect("valid"));
            }
        }
        // SAFETY: a zeroed block of a valid layout, read within its size and freed once.
        unsafe {
            let layout = Layout::from_size_align(BIG_ALLOCATION_BYTES, 8).expect("valid");
            let zeroed = allocator.alloc_zeroed(layout);
            assert!(!zeroed.is_null());
            assert!((0..layout.size())
                .step_by(4096)
                .all(|index| *zeroed.add(index) == 0));
            allocator.dealloc(zeroed, layout);
        }
    }
}
