//! The metrics binary's global allocator: `System`, plus a count of the
//! allocations (and bytes asked for) made on threads that opted in with
//! [`count_this_thread`]. Only the service's own thread opts in, so the test
//! client, the test runtime and the other tests of this binary are not
//! counted.
//!
//! The only `unsafe` in the project: a `GlobalAlloc` cannot be implemented
//! without it. Every call is passed to `System` unchanged.
//!
//! To find where allocations come from, [`trace_from`] prints a backtrace
//! of every counted allocation of at least that many bytes (0: all) to
//! stderr; the tracer's own allocations are not counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// `System`, counted on opted-in threads.
pub struct Counting;

#[global_allocator]
static GLOBAL: Counting = Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Allocations of at least this size are traced (`usize::MAX`: none).
static TRACE_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

thread_local! {
    // `const` and without a destructor: reading them never allocates, so
    // the allocator may read them.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

fn note(size: usize) {
    if !COUNTED.try_with(Cell::get).unwrap_or(false) || TRACING.with(Cell::get) {
        return;
    }
    ALLOCATIONS.fetch_add(1, Relaxed);
    BYTES.fetch_add(size as u64, Relaxed);
    if size >= TRACE_FROM.load(Relaxed) {
        TRACING.with(|t| t.set(true));
        let trace = std::backtrace::Backtrace::force_capture();
        eprintln!("allocation of {size} bytes\n{trace}");
        TRACING.with(|t| t.set(false));
    }
}

// SAFETY: each method hands its arguments unchanged to `System`, which meets
// `GlobalAlloc`'s contract; the counting touches only atomics and a
// const-initialised thread-local, so it neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A grown buffer costs an allocator call like a new one does.
        note(new_size);
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// From now on, allocations made on the calling thread are counted.
pub fn count_this_thread() {
    COUNTED.with(|c| c.set(true));
}

/// From now on, counted allocations of at least `bytes` print a backtrace.
pub fn trace_from(bytes: usize) {
    TRACE_FROM.store(bytes, Relaxed);
}

/// The counts so far, over every opted-in thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Calls to `alloc`, `alloc_zeroed` and `realloc`.
    pub allocations: u64,
    /// Bytes those calls asked for (a `realloc` its new size).
    pub bytes: u64,
}

impl Counts {
    pub fn now() -> Counts {
        Counts {
            allocations: ALLOCATIONS.load(Relaxed),
            bytes: BYTES.load(Relaxed),
        }
    }

    pub fn plus(self, other: Counts) -> Counts {
        Counts {
            allocations: self.allocations + other.allocations,
            bytes: self.bytes + other.bytes,
        }
    }

    pub fn since(self, before: Counts) -> Counts {
        Counts {
            allocations: self.allocations - before.allocations,
            bytes: self.bytes - before.bytes,
        }
    }
}
