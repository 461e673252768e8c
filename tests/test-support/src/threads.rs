//! Running a closure on a rayon pool of a given size, as the thread-count invariance
//! tests do.

/// `f`'s result, run inside a fresh rayon pool of `threads` threads.
///
/// # Panics
/// When the pool cannot be built.
pub fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool")
        .install(f)
}
