//! The process's memory allocator: mimalloc (feature `mimalloc`, default),
//! or the system's when `SUTRA_ALLOCATOR=system` is set in the environment.
//!
//! Why mimalloc: a step is built on a tokio worker and freed on SQLite's
//! writer thread, and glibc's malloc took about a fifth of the CPU of an
//! instance burst (benches/README "Session 8"). Its v2 allocator with
//! transparent huge pages off: v3 and huge pages zeroed fresh memory on
//! every burst.
//!
//! Why the switch: mimalloc reserves address space in 32 MiB segments (and a
//! 1 GiB arena up front), so a process under a tight `RLIMIT_AS` cannot even
//! start its threads. The compile worker (`sutra __compile`) runs under such
//! a limit, so the server spawns it with `SUTRA_ALLOCATOR=system`.
//!
//! Invariants:
//! - the choice is made once, at the process's first allocation (before
//!   `main`, with one thread), from the environment read with `getenv` (it
//!   allocates nothing), and never changes: every block is freed by the
//!   allocator that gave it;
//! - blocks of [`LARGE_BLOCK`] bytes or more come from the system allocator
//!   under either choice (by size, so a block is freed where it came from);
//! - [`release_free_memory`] gives memory freed since back to the operating
//!   system; call it after a large one-off request (a deploy's upload), never
//!   on a hot path.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// The environment variable, and the value that selects the system allocator.
pub const ALLOCATOR_ENV: &str = "SUTRA_ALLOCATOR";
pub const SYSTEM: &str = "system";
const ALLOCATOR_ENV_C: &std::ffi::CStr = c"SUTRA_ALLOCATOR";

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM_ALLOC: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

#[inline]
fn choice() -> u8 {
    match CHOICE.load(Ordering::Relaxed) {
        UNDECIDED => decide(),
        c => c,
    }
}

/// Reads the environment once. Deciding twice (two threads at the very
/// start) gives the same answer, so a plain store is enough.
#[cold]
fn decide() -> u8 {
    // SAFETY: `getenv` reads the environment the C runtime set up before any
    // Rust code ran; the name is a NUL-terminated literal; nothing calls
    // `setenv` this early.
    let value = unsafe { libc::getenv(ALLOCATOR_ENV_C.as_ptr()) };
    let system = !value.is_null()
        // SAFETY: a non-null `getenv` result is a NUL-terminated string.
        && unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes() == SYSTEM.as_bytes();
    let c = if system || !cfg!(feature = "mimalloc") {
        SYSTEM_ALLOC
    } else {
        MIMALLOC
    };
    CHOICE.store(c, Ordering::Relaxed);
    c
}

/// Whether this process allocates with mimalloc.
pub fn is_mimalloc() -> bool {
    choice() == MIMALLOC
}

/// The global allocator of every binary built on this crate.
pub struct SutraAlloc;

#[cfg(feature = "mimalloc")]
static MI: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Blocks this large or larger come from the system allocator even under
/// mimalloc: glibc maps each one on its own and unmaps it when freed, so a
/// burst of big one-off buffers (a deploy's modules, a compiled artifact, a
/// large upload refused) does not stay resident, where mimalloc would keep
/// the pages for reuse until its delayed purge runs on that thread.
pub const LARGE_BLOCK: usize = 256 * 1024;

#[cfg(feature = "mimalloc")]
#[inline]
fn by_mimalloc(size: usize) -> bool {
    size < LARGE_BLOCK && choice() == MIMALLOC
}

// SAFETY: which allocator serves a block depends only on its size (the
// `Layout` passed to every call) and on the choice made once for the
// process (see `decide`), so a block is always freed and resized by the
// allocator that gave it; a resize across `LARGE_BLOCK` moves the block.
unsafe impl GlobalAlloc for SutraAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        #[cfg(feature = "mimalloc")]
        if by_mimalloc(layout.size()) {
            return unsafe { MI.alloc(layout) };
        }
        unsafe { System.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        #[cfg(feature = "mimalloc")]
        if by_mimalloc(layout.size()) {
            return unsafe { MI.alloc_zeroed(layout) };
        }
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        #[cfg(feature = "mimalloc")]
        if by_mimalloc(layout.size()) {
            return unsafe { MI.dealloc(ptr, layout) };
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        #[cfg(feature = "mimalloc")]
        {
            let (old_mi, new_mi) = (by_mimalloc(layout.size()), by_mimalloc(new_size));
            if old_mi && new_mi {
                return unsafe { MI.realloc(ptr, layout, new_size) };
            }
            if old_mi != new_mi {
                // SAFETY: `realloc`'s contract gives a non-zero `new_size`
                // that, rounded to `layout.align()`, does not overflow.
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    // SAFETY: both blocks are live, distinct and at least
                    // this long.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                return new;
            }
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Gives the memory freed since back to the operating system: mimalloc's
/// forced collection (its purges are otherwise delayed until the allocator
/// runs again on that thread) and glibc's `malloc_trim`.
pub fn release_free_memory() {
    #[cfg(feature = "mimalloc")]
    if is_mimalloc() {
        // SAFETY: `mi_collect` takes no pointers; it frees only free memory.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
    // The system allocator serves every block under the system choice, and
    // the large ones under mimalloc.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers; it releases only free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_read_is_the_one_documented() {
        assert_eq!(ALLOCATOR_ENV_C.to_str(), Ok(ALLOCATOR_ENV));
    }

    #[test]
    fn the_test_binary_allocates_with_the_default() {
        // The test harness runs without SUTRA_ALLOCATOR (CI does not set it).
        let expected = cfg!(feature = "mimalloc")
            && std::env::var(ALLOCATOR_ENV).ok().as_deref() != Some(SYSTEM);
        assert_eq!(is_mimalloc(), expected);
        release_free_memory();
    }
}

#[cfg(test)]
mod moves {
    use super::*;

    /// A block grown and shrunk across `LARGE_BLOCK` keeps its bytes.
    #[test]
    fn a_resize_across_the_large_block_size_keeps_the_contents() {
        let mut v: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        v.reserve_exact(LARGE_BLOCK * 2);
        assert!(v.capacity() >= LARGE_BLOCK);
        assert!(v.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        v.shrink_to_fit();
        assert_eq!(v.len(), 1000);
        assert!(v.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    }
}
