//! The heap's freed memory: kept while the switch forwards, given back when it shrinks.
//!
//! The data plane allocates and frees a buffer per frame for now, and at 1500 B a heap that
//! shrinks and grows again at every burst (brk, page faults) costs about as much again as
//! forwarding (bench/live/RESULTS.md, "AF_XDP"); so glibc keeps up to 64 MiB of freed heap
//! instead of returning its top to the kernel past 128 KiB. A change that removes ports (a
//! domain's thousands of them at once, say) frees what they held all at once, which that
//! setting would then keep for good: after such a change the freed heap is given back, in
//! every arena, once.

/// Lets glibc keep up to 64 MiB of freed heap (see the module documentation). Called at start,
/// before the data plane's threads.
pub fn keep_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes the allocator's parameters; nothing else runs yet that could
    // allocate concurrently except threads glibc already serialises.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

/// Returns the heap's free pages to the kernel (`malloc_trim`), in every arena; the data
/// plane's next buffers fault in again. Takes a few milliseconds: call it off the data plane's
/// and the API's threads, once the memory to give back is free.
pub fn give_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases memory the allocator holds free; glibc locks each
    // arena while it walks it.
    unsafe {
        libc::malloc_trim(0);
    }
}
