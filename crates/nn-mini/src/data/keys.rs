//! The key derivation tree of the data loader (see the module docs of [`crate::data`]).

use rng_gen::{fold_in, Key};

/// Domain of the epoch's shuffle order under the epoch key.
pub const ORDER_DOMAIN: u64 = 0;
/// Domain of the per-sample keys under the epoch key.
pub const SAMPLE_DOMAIN: u64 = 1;

/// `fold_in(loader, epoch)`: the root of everything random in one epoch.
#[must_use]
pub fn epoch_key(loader: Key, epoch: u64) -> Key {
    fold_in(loader, epoch)
}

/// `fold_in(epoch_key, ORDER_DOMAIN)`: the key of epoch `epoch`'s permutation.
#[must_use]
pub fn order_key(loader: Key, epoch: u64) -> Key {
    fold_in(epoch_key(loader, epoch), ORDER_DOMAIN)
}

/// `fold_in(fold_in(epoch_key, SAMPLE_DOMAIN), index)`: the key of sample `index`'s
/// [`SampleRng`](super::SampleRng) in epoch `epoch`.
#[must_use]
pub fn sample_key(loader: Key, epoch: u64, index: u64) -> Key {
    fold_in(fold_in(epoch_key(loader, epoch), SAMPLE_DOMAIN), index)
}
