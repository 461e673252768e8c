//! The one loop behind every CPU sampler: fill an output slice from the words of a
//! reserved key, in parallel, with a result that does not depend on the thread count.
//!
//! The output is cut into chunks of whole Philox blocks ([`CHUNK_WORDS`] words). Each
//! chunk computes its own blocks from `(seed, base + first block of the chunk)`,
//! [`BATCH_BLOCKS`] blocks at a time with the batched engine
//! ([`crate::stream::philox_batch`], bit-identical to the scalar one), and then its
//! elements, so which thread runs which chunk, and how many threads there are, cannot
//! change a single bit. Outputs that fit in one chunk run on the calling thread.

use rayon::prelude::*;

use crate::stream::key::Key;
use crate::stream::philox_batch::{batch_words, BATCH_BLOCKS, BATCH_WORDS};

/// Words per chunk: 4096 blocks. A multiple of 4 (chunks start on a block boundary), of
/// [`BATCH_WORDS`] (batches never straddle chunks) and of every group's word count
/// (1, 2, 4 or 32), so no group straddles two chunks or two batches.
pub(crate) const CHUNK_WORDS: usize = 16_384;

const _: () = assert!(CHUNK_WORDS.is_multiple_of(BATCH_WORDS) && BATCH_WORDS.is_multiple_of(32));

/// How an op's elements sit on the stream: every `elems` consecutive elements (a
/// group) use `words` consecutive words. Group `g` uses words `g*words ..`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// Elements per group (2 for Box-Muller pairs, else 1).
    pub elems: usize,
    /// Words per group (1, 2, 4 or 32).
    pub words: usize,
}

impl Layout {
    /// One element per `words` words.
    pub(crate) const fn per_element(words: usize) -> Self {
        Layout { elems: 1, words }
    }
}

/// Calls `f(batch, batch_words, out_part)` for consecutive parts of `out`, where
/// `out_part` holds the elements whose words are `batch_words` (words
/// `batch * BATCH_WORDS ..` of the stream at `key`): `BATCH_WORDS / layout.words *
/// layout.elems` elements, fewer in the last part (whose batch still has all its words).
/// Chunks of [`CHUNK_WORDS`] words run in parallel; `f` must not depend on which.
pub(crate) fn fill_batches<T, F>(out: &mut [T], key: Key, layout: Layout, f: F)
where
    T: Send,
    F: Fn(u64, &[u32; BATCH_WORDS], &mut [T]) + Sync,
{
    debug_assert!(layout.words > 0 && layout.elems > 0);
    debug_assert!(BATCH_WORDS.is_multiple_of(layout.words));
    let batch_elems = BATCH_WORDS / layout.words * layout.elems;
    let chunk_elems = CHUNK_WORDS / BATCH_WORDS * batch_elems;
    for_each_chunk(out, chunk_elems, |chunk_index, chunk| {
        let mut words = [0u32; BATCH_WORDS];
        let first_block = key
            .offset
            .wrapping_add((chunk_index * (CHUNK_WORDS / 4)) as u64);
        for (b, part) in chunk.chunks_mut(batch_elems).enumerate() {
            batch_words(
                key.seed,
                first_block.wrapping_add((b * BATCH_BLOCKS) as u64),
                &mut words,
            );
            let batch = chunk_index * (CHUNK_WORDS / BATCH_WORDS) + b;
            f(batch as u64, &words, part);
        }
    });
}

/// Element-wise fill for one word per element: `out[i] = f(word i)`.
pub(crate) fn fill_map<T, F>(out: &mut [T], key: Key, f: F)
where
    T: Send,
    F: Fn(u32) -> T + Sync,
{
    fill_batches(out, key, Layout::per_element(1), |_, words, part| {
        for (o, &w) in part.iter_mut().zip(words) {
            *o = f(w);
        }
    });
}

/// Fills `out` group by group: `f(group_index, words, out_group)` gets the group's words
/// and its output elements (the last group may be shorter than `layout.elems`, e.g. the
/// last normal of an odd count, but still gets all its words). Group `g`'s words are
/// words `g*layout.words ..` of the stream at `key` (DESIGN.md §1).
pub(crate) fn fill<T, F>(out: &mut [T], key: Key, layout: Layout, f: F)
where
    T: Send,
    F: Fn(u64, &[u32], &mut [T]) + Sync,
{
    let groups_per_batch = (BATCH_WORDS / layout.words) as u64;
    fill_batches(out, key, layout, |batch, words, part| {
        let first_group = batch * groups_per_batch;
        for (g, (out_group, group_words)) in part
            .chunks_mut(layout.elems)
            .zip(words.chunks_exact(layout.words))
            .enumerate()
        {
            f(first_group + g as u64, group_words, out_group);
        }
    });
}

/// True when chunks should stay on the calling thread: a pool of one thread would only
/// add a hand-off to its worker and back (futex wake-ups; tens of microseconds per op in
/// the one-thread training step of `benches/train_step.rs`) and run them in the same
/// order. Which thread runs a chunk never changes a value, so this only affects speed.
pub(crate) fn run_inline(chunks: usize) -> bool {
    chunks <= 1 || rayon::current_num_threads() == 1
}

/// Runs `run(chunk_index, chunk)` on the `chunk_elems`-element chunks of `out`: on the
/// calling thread when there is only one chunk or one thread, else in parallel.
pub(crate) fn for_each_chunk<T, F>(out: &mut [T], chunk_elems: usize, run: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync,
{
    if run_inline(out.len().div_ceil(chunk_elems)) {
        for (i, chunk) in out.chunks_mut(chunk_elems).enumerate() {
            run(i, chunk);
        }
    } else {
        out.par_chunks_mut(chunk_elems)
            .enumerate()
            .for_each(|(i, chunk)| run(i, chunk));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::philox::word_at;

    #[test]
    fn groups_get_their_words_across_chunks() {
        let key = Key {
            seed: 7,
            offset: u64::MAX - 5, // wraps inside the fill
        };
        for layout in [
            Layout::per_element(1),
            Layout::per_element(2),
            Layout { elems: 2, words: 4 },
        ] {
            let n = 3 * CHUNK_WORDS + 5;
            let mut out = vec![0u32; n];
            fill(&mut out, key, layout, |g, words, out| {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = words[j % layout.words] ^ g as u32;
                }
            });
            for i in (0..n).step_by(997).chain([n - 1]) {
                let g = (i / layout.elems) as u64;
                let w = g * layout.words as u64 + (i % layout.elems % layout.words) as u64;
                assert_eq!(
                    out[i],
                    word_at(key.seed, key.offset, w) ^ g as u32,
                    "{layout:?} {i}"
                );
            }
        }
    }
}
