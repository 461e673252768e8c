//! The one loop behind every CPU sampler: fill an output slice from the words of a
//! reserved key, in parallel, with a result that does not depend on the thread count.
//!
//! The output is cut into chunks of whole Philox blocks ([`CHUNK_WORDS`] words). Each
//! chunk computes its own blocks from `(seed, base + first block of the chunk)` (one
//! Philox call per four words) and then its elements, so which thread runs which chunk,
//! and how many threads there are, cannot change a single bit.

use rayon::prelude::*;

use crate::stream::key::Key;
use crate::stream::philox::block_words;

/// Words per chunk: 4096 blocks. A multiple of 4 (chunks start on a block boundary) and
/// of every group's word count (1, 2 or 4), so no group straddles two chunks.
pub(crate) const CHUNK_WORDS: usize = 16_384;

/// How an op's elements sit on the stream: every `elems` consecutive elements (a
/// group) use `words` consecutive words. Group `g` uses words `g*words ..`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// Elements per group (2 for Box-Muller pairs, else 1).
    pub elems: usize,
    /// Words per group (1, 2 or 4).
    pub words: usize,
}

impl Layout {
    /// One element per `words` words.
    pub(crate) const fn per_element(words: usize) -> Self {
        Layout { elems: 1, words }
    }
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
    debug_assert!(layout.words > 0 && layout.elems > 0);
    debug_assert!(CHUNK_WORDS.is_multiple_of(layout.words));
    let groups_per_chunk = CHUNK_WORDS / layout.words;
    let chunk_elems = groups_per_chunk * layout.elems;
    let blocks_per_chunk = (CHUNK_WORDS / 4) as u64;
    let run = |chunk_index: usize, chunk: &mut [T]| {
        let groups = chunk.len().div_ceil(layout.elems);
        let blocks = (groups * layout.words).div_ceil(4);
        let first_block = key
            .offset
            .wrapping_add(chunk_index as u64 * blocks_per_chunk);
        let mut words = Vec::with_capacity(blocks * 4);
        for b in 0..blocks as u64 {
            words.extend_from_slice(&block_words(key.seed, first_block.wrapping_add(b)));
        }
        let first_group = (chunk_index * groups_per_chunk) as u64;
        for (g, (out_group, group_words)) in chunk
            .chunks_mut(layout.elems)
            .zip(words.chunks_exact(layout.words))
            .enumerate()
        {
            f(first_group + g as u64, group_words, out_group);
        }
    };
    if out.len() <= chunk_elems {
        if !out.is_empty() {
            run(0, out);
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
