//! Handing the heap's free pages back to the system after the server's large transient
//! host allocations: a weights update's checkpoint read and quantization, an adapter's
//! read, a wake's restore from host copies.
//!
//! glibc's malloc keeps freed memory in the arena of the thread that allocated it (up to
//! eight arenas per core), and the blocking pool runs successive updates on different
//! threads: without this the resident size climbs at each update, arena by arena, until
//! each holds a checkpoint's worth of free pages (hours of updates then look like a leak).
//! `malloc_trim(0)` returns the free pages of every arena. Other platforms' allocators
//! are left as they are.

/// Returns the heap's free pages to the system, where the allocator can (glibc).
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists, under its locks; it
    // takes no pointer from the caller.
    unsafe {
        libc::malloc_trim(0);
    }
}
