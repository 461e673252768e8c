//! The one loop behind every CPU sampler: fill an output slice from the words of a
//! reserved key, in parallel, with a result that does not depend on the thread count.
//!
//! The output is cut into chunks of whole batches ([`CHUNK_WORDS`] words). Each chunk
//! computes its own blocks from `(seed, offset + first block of the chunk)`,
//! [`BATCH_BLOCKS`] blocks at a time, and hands each batch of words to the sampler's
//! batch body, so which thread runs which chunk, and how many threads there are, cannot
//! change a single bit. A chunk runs compiled for the widest vector instructions the CPU
//! has (`crate::simd`), the Philox rounds and the body inlined together. Outputs shorter
//! than [`PAR_MIN_ELEMS`] or fitting in one chunk, and every output when the pool has one
//! thread, run on the calling thread. Large outputs are written with streaming stores (staged a few batches at a
//! time), so filling memory that is not in cache does not read it first.

use rayon::prelude::*;

use super::sampler::{Sampler, BATCH_WORDS};
use crate::simd::{stream_copy, streaming_fence, with_simd, SimdLevel};
use crate::stream::key::Key;
use crate::stream::philox_batch::{batch_words_inline, BATCH_BLOCKS};

/// Words per chunk: 4096 blocks, a multiple of [`BATCH_WORDS`], so chunks start on a
/// batch boundary and no group straddles two chunks.
pub(crate) const CHUNK_WORDS: usize = 16_384;
const _: () = assert!(CHUNK_WORDS.is_multiple_of(BATCH_WORDS));

/// Outputs of at least this many bytes are written with streaming stores: far larger
/// than a core's L2 (2 MiB on the Xeon these were measured on), so they would not stay in
/// cache for the next op anyway.
pub(crate) const STREAMING_BYTES: usize = 8 << 20;
/// Bytes staged before a streaming copy: a few batches, small enough to stay in L1.
const STAGE_BYTES: usize = 2048;

/// Fills `out` (the op's elements `0..out.len()`) from the stream at `key`, with the
/// widest instruction set the CPU has (or the one `DITTO_SIMD` names: [`SimdLevel::chosen`]).
pub(crate) fn fill<S: Sampler>(op: &S, out: &mut [S::Elem], key: Key) {
    fill_at_level(op, out, key, SimdLevel::chosen());
}

/// [`fill`] compiled for `level`, with streaming stores or without (tests compare every
/// combination with the scalar reference).
pub(crate) fn fill_at_level<S: Sampler>(op: &S, out: &mut [S::Elem], key: Key, level: SimdLevel) {
    let streaming = std::mem::size_of_val(out) >= STREAMING_BYTES;
    fill_with(op, out, key, level, streaming, PAR_MIN_ELEMS);
}

/// [`fill_at_level`] with the choice of stores and the fan-out floor made by the caller
/// (tests pass a floor of 0, so that a few chunks already run on several threads).
pub(crate) fn fill_with<S: Sampler>(
    op: &S,
    out: &mut [S::Elem],
    key: Key,
    level: SimdLevel,
    streaming: bool,
    par_min: usize,
) {
    let layout = op.layout();
    debug_assert!(layout.is_valid());
    let chunk_elems = CHUNK_WORDS / BATCH_WORDS * layout.elements_per_batch();
    for_each_chunk(out, chunk_elems, par_min, |chunk_index, chunk| {
        let first_batch = chunk_index * (CHUNK_WORDS / BATCH_WORDS);
        with_simd(
            level,
            #[inline(always)]
            || fill_chunk(op, chunk, key, first_batch, streaming),
        );
    });
}

/// One chunk: batches `first_batch ..` of the op, into `chunk`.
#[inline(always)]
fn fill_chunk<S: Sampler>(
    op: &S,
    chunk: &mut [S::Elem],
    key: Key,
    first_batch: usize,
    streaming: bool,
) {
    let layout = op.layout();
    let batch_elems = layout.elements_per_batch();
    let groups_per_batch = layout.groups_per_batch() as u64;
    let mut words = [0u32; BATCH_WORDS];
    let mut run_batch = |batch: usize, out: &mut [S::Elem]| {
        let first_block = key.offset.wrapping_add((batch * BATCH_BLOCKS) as u64);
        batch_words_inline(key.seed, first_block, &mut words);
        op.fill_batch(batch as u64 * groups_per_batch, &words, out);
    };
    if !streaming {
        for (i, out) in chunk.chunks_mut(batch_elems).enumerate() {
            run_batch(first_batch + i, out);
        }
        return;
    }
    let elem_bytes = std::mem::size_of::<S::Elem>().max(1);
    let stage_batches = (STAGE_BYTES / (batch_elems * elem_bytes)).max(1);
    let stage_elems = stage_batches * batch_elems;
    let Some(&zero) = chunk.first() else {
        return;
    };
    let mut stage = vec![zero; stage_elems.min(chunk.len())];
    for (s, part) in chunk.chunks_mut(stage_elems).enumerate() {
        let staged = &mut stage[..part.len()];
        for (i, out) in staged.chunks_mut(batch_elems).enumerate() {
            run_batch(first_batch + s * stage_batches + i, out);
        }
        stream_copy(part, staged);
    }
    streaming_fence();
}

/// Outputs shorter than this many elements are filled on the calling thread. Waking the
/// pool, and the idle worker's spinning afterwards, cost more than a second thread gives
/// below it: dropout's fill and mask pass at 32,768 elements (the demo MLP's activations)
/// made the demo's step slower on 2 threads than on 1 (benches/RESULTS.md, issue 29).
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 18;

/// True when the `len` elements, in chunks of `chunk_elems`, should stay on the calling
/// thread: fewer than `par_min` (in ditto's ops [`PAR_MIN_ELEMS`]), one chunk, or a pool of
/// one thread, which would only add a hand-off to its worker and back (futex wake-ups;
/// tens of microseconds per op in the one-thread training step of
/// `benches/train_step.rs`) and run them in the same order. Which thread runs a chunk
/// never changes a value, so this only affects speed.
pub(crate) fn run_inline(len: usize, chunk_elems: usize, par_min: usize) -> bool {
    len < par_min || len <= chunk_elems || rayon::current_num_threads() == 1
}

/// Runs `run(chunk_index, chunk)` on the `chunk_elems`-element chunks of `out`: on the
/// calling thread when [`run_inline`] says so, else in parallel.
pub(crate) fn for_each_chunk<T, F>(out: &mut [T], chunk_elems: usize, par_min: usize, run: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync,
{
    if run_inline(out.len(), chunk_elems, par_min) {
        for (i, chunk) in out.chunks_mut(chunk_elems).enumerate() {
            run(i, chunk);
        }
    } else {
        out.par_chunks_mut(chunk_elems)
            .enumerate()
            .for_each(|(i, chunk)| run(i, chunk));
    }
}
