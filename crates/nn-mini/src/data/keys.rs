//! The key derivation tree of the data loader (see the module docs of [`crate::data`]).

use rng_gen::{fold_in, Generator, Key};
use tensor_core::Device;

use crate::Result;

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

/// The order in which epoch `epoch` visits the dataset: `randperm(len)` drawn by a
/// generator placed at [`order_key`] when shuffling, `0..len` otherwise.
pub fn epoch_order(loader: Key, epoch: u64, len: usize, shuffle: bool) -> Result<Vec<usize>> {
    if !shuffle {
        return Ok((0..len).collect());
    }
    let generator = Generator::from_key(Device::Cpu, order_key(loader, epoch));
    let perm = rng_gen::randperm(len, Device::Cpu, Some(&generator))?;
    Ok(perm
        .to_vec::<i64>()?
        .into_iter()
        .map(|i| i as usize)
        .collect())
}
