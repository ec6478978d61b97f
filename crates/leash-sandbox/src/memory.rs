//! Giving freed heap memory back to the system: the allocator keeps what a burst of connections freed for reuse, so
//! without this a proxy's RSS stays at its peak.

/// Return the heap's free pages to the system (glibc's `malloc_trim(0)`: every arena, not only the top of the heap),
/// so RSS falls after a burst. Walks the heap: a few milliseconds for hundreds of megabytes, so call it from a
/// blocking thread, after the burst. Does nothing where the allocator is not glibc's.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    trim();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim takes no pointer and only touches the allocator's own state, under its own locks; it is
    // safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn releasing_free_memory_leaves_the_heap_usable() {
        let spike: Vec<Vec<u8>> = (0..1_000).map(|i| vec![i as u8; 16 * 1024]).collect();
        drop(spike);
        super::release_free_memory();
        let again = vec![7u8; 1 << 20];
        assert_eq!(again.iter().map(|&b| u64::from(b)).sum::<u64>(), 7 << 20);
    }
}
