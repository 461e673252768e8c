//! Keys and derived keys: how ditto makes independent substreams without seed arithmetic.

use super::philox::block_words;

/// A point in the random stream: the Philox key (`seed`) and the next unused block
/// (`offset`). A generator's state *is* a key; so is PyTorch's
/// `torch.func._random.key(seed)`, which is `Key { seed, offset: 0 }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The Philox key, as one 64-bit number.
    pub seed: u64,
    /// The next unused block of the stream.
    pub offset: u64,
}

impl Key {
    /// The key PyTorch's `key(seed)` returns: offset 0.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Key { seed, offset: 0 }
    }

    /// A new key derived from this one and `data`. See [`fold_in`].
    #[must_use]
    pub fn fold_in(self, data: u64) -> Key {
        fold_in(self, data)
    }

    /// `n` keys derived from this one. See [`split`].
    #[must_use]
    pub fn split(self, n: usize) -> Vec<Key> {
        split(self, n)
    }
}

/// Derives an independent key from `key` and `data` (a rank, a worker, a sample index,
/// an epoch): the four words of block `offset + data` become the new seed and offset.
///
/// Why not `seed + rank`? Because seed 1 on rank 0 and seed 0 on rank 1 would then share
/// a stream, silently. Derived keys are outputs of Philox, so distinct `(key, data)` give
/// unrelated streams. Bit-identical to `torch.func._random.fold_in`.
#[must_use]
pub fn fold_in(key: Key, data: u64) -> Key {
    let [w0, w1, w2, w3] = block_words(key.seed, key.offset.wrapping_add(data));
    Key {
        seed: u64::from(w0) | u64::from(w1) << 32,
        offset: u64::from(w2) | u64::from(w3) << 32,
    }
}

/// `n` independent keys: `split(key, n)[i] == fold_in(key, i)`, as in
/// `torch.func._random.split`.
#[must_use]
pub fn split(key: Key, n: usize) -> Vec<Key> {
    (0..n as u64).map(|i| fold_in(key, i)).collect()
}
