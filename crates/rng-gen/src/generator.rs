//! `Generator`: a shared `(seed, offset)` that hands out disjoint stretches of the stream.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::stream::increment::{increment_for, RandomOp};
use tensor_core::{DType, Device};

use crate::state::{self, StateKind};
use crate::stream::key::Key;
use crate::RngError;

/// The seed of a generator nobody has seeded: PyTorch's `default_rng_seed_val`, so an
/// unseeded ditto program starts from the same seed as an unseeded PyTorch one.
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// The state behind a generator handle.
#[derive(Debug)]
struct Inner {
    seed: u64,
    offset: u64,
    /// Its part in CUDA graphs (`crate::graph`): capture in progress, device words.
    graph: crate::graph::GeneratorGraphState,
}

impl Inner {
    fn at(seed: u64, offset: u64) -> Self {
        Inner {
            seed,
            offset,
            graph: Default::default(),
        }
    }
}

/// A random-number generator: a handle to a shared `(seed, offset)` pair, like
/// `torch.Generator`.
///
/// Why a handle? Layers, data loaders and the default-generator registry all hold the
/// same generator and must advance one stream, so clones share state (`Arc<Mutex<..>>`)
/// and cloning is cheap. Why `(seed, offset)` and no buffered numbers? Philox is
/// counter-based: every op [reserves](Generator::reserve) a run of blocks under the lock
/// and computes them on its own (any thread count, any device), so the generator's whole
/// state is one [`Key`].
///
/// A generator belongs to a [`Device`] only in the sense that ops on that device use it
/// (an op on another device refuses it, as PyTorch does); its state is device-free and
/// can be moved between devices with [`get_state`](Generator::get_state) /
/// [`set_state`](Generator::set_state).
#[derive(Clone)]
pub struct Generator {
    inner: Arc<Mutex<Inner>>,
    device: Device,
}

impl Default for Generator {
    /// A CPU generator seeded with [`DEFAULT_SEED`].
    fn default() -> Self {
        Generator::new(Device::Cpu)
    }
}

impl fmt::Debug for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = self.key();
        f.debug_struct("Generator")
            .field("device", &self.device)
            .field("seed", &key.seed)
            .field("offset", &key.offset)
            .finish()
    }
}

impl Generator {
    /// A new generator for `device`, seeded with [`DEFAULT_SEED`] at offset 0. It does
    /// not check that a CUDA device exists: ops on it do.
    #[must_use]
    pub fn new(device: Device) -> Self {
        Generator {
            inner: Arc::new(Mutex::new(Inner::at(DEFAULT_SEED, 0))),
            device,
        }
    }

    /// A new generator for `device` at `key` (a seed and a position in its stream).
    #[must_use]
    pub fn from_key(device: Device, key: Key) -> Self {
        let generator = Generator::new(device);
        generator.set_key(key);
        generator
    }

    /// The lock, recovered if a panic poisoned it: the state is two integers written
    /// together, so it is always consistent.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the generator's CUDA graph state, under its lock (with the seed and
    /// offset it goes with).
    #[cfg(feature = "cuda")]
    pub(crate) fn with_graph_state<R>(
        &self,
        f: impl FnOnce(&mut crate::graph::GeneratorGraphState, &mut u64, u64) -> R,
    ) -> R {
        let mut inner = self.lock();
        let Inner {
            seed,
            offset,
            graph,
        } = &mut *inner;
        f(graph, offset, *seed)
    }

    /// Whether two handles share one generator.
    #[cfg(feature = "cuda")]
    pub(crate) fn same_as(&self, other: &Generator) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Sets `(seed, offset)` unless a CUDA graph capture draws from this generator: then
    /// the state is left alone and the capture fails (`op` is named in its error), as
    /// a replay could not honour it.
    fn set_unless_captured(&self, op: &'static str, seed: u64, offset: u64) {
        let mut inner = self.lock();
        if !inner.graph.note_misuse(op) {
            inner.seed = seed;
            inner.offset = offset;
        }
    }

    /// Restarts the stream from `seed` at offset 0, so the ops that follow repeat
    /// exactly. Returns `self` so calls can be chained. During a CUDA graph capture that
    /// draws from this generator it changes nothing and makes the capture fail
    /// ([`try_manual_seed`](Self::try_manual_seed) returns the error at once).
    pub fn manual_seed(&self, seed: u64) -> &Self {
        self.set_unless_captured("manual_seed", seed, 0);
        self
    }

    /// [`manual_seed`](Self::manual_seed), or [`RngError::Capture`] (nothing changed)
    /// during a CUDA graph capture that draws from this generator.
    pub fn try_manual_seed(&self, seed: u64) -> Result<&Self, RngError> {
        self.lock().graph.refuse_if_captured("manual_seed")?;
        Ok(self.manual_seed(seed))
    }

    /// Seeds from OS entropy (offset 0) and returns the seed, so a run that was not
    /// meant to be reproducible can still be replayed by logging the returned value.
    pub fn seed(&self) -> u64 {
        let seed = entropy_seed();
        self.manual_seed(seed);
        seed
    }

    /// The seed the stream started from (set by [`manual_seed`](Self::manual_seed),
    /// [`seed`](Self::seed) or [`set_state`](Self::set_state)).
    #[must_use]
    pub fn initial_seed(&self) -> u64 {
        self.lock().seed
    }

    /// Philox blocks consumed since the seed was set: the next op starts here.
    #[must_use]
    pub fn offset(&self) -> u64 {
        self.lock().offset
    }

    /// Moves to block `offset` of the same seed, e.g. to replay or skip ops.
    pub fn set_offset(&self, offset: u64) {
        let seed = self.lock().seed;
        self.set_unless_captured("set_offset", seed, offset);
    }

    /// The device whose ops this generator drives.
    #[must_use]
    pub fn device(&self) -> Device {
        self.device
    }

    /// The current `(seed, offset)`: the key the next op will start from.
    #[must_use]
    pub fn key(&self) -> Key {
        let inner = self.lock();
        Key {
            seed: inner.seed,
            offset: inner.offset,
        }
    }

    /// Sets seed and offset at once.
    pub fn set_key(&self, key: Key) {
        self.set_unless_captured("set_key", key.seed, key.offset);
    }

    /// Reserves the blocks one of ditto's ops `op` on `n` elements of `dtype` consumes
    /// ([`increment_for`](crate::stream::increment::increment_for): what the op
    /// reserves on any device) and returns the key of the first one. The generator moves
    /// past them (wrapping modulo 2^64), under the lock, so concurrent ops get disjoint
    /// stretches and the result does not depend on timing. For a caller that computes
    /// an op's stretch itself, e.g. every data-parallel rank reserving a whole batch's
    /// dropout before each computes its rows.
    pub fn reserve(&self, op: RandomOp, dtype: DType, n: u64) -> Key {
        self.reserve_blocks(increment_for(op, dtype, n))
    }

    /// Reserves `blocks` raw Philox blocks (4 words each) for a consumer that is not one
    /// of the ops, e.g. a data-loader shuffle or a [`PhiloxRng`](crate::PhiloxRng).
    ///
    /// During a CUDA graph capture that draws from this generator, a key reserved here
    /// would be frozen into the graph: the capture fails (random ops inside a capture
    /// reserve through `crate::graph` instead).
    pub fn reserve_blocks(&self, blocks: u64) -> Key {
        let mut inner = self.lock();
        inner.graph.note_misuse("reserve_blocks");
        let base = inner.offset;
        inner.offset = base.wrapping_add(blocks);
        Key {
            seed: inner.seed,
            offset: base,
        }
    }

    /// The state as versioned bytes ([`crate::state`]), for checkpoints. Device-free:
    /// it can be set on a generator of any device. During a CUDA graph capture that draws
    /// from this generator the state is not yet known (replays decide it): the capture
    /// fails ([`try_get_state`](Self::try_get_state) returns the error at once).
    #[must_use]
    pub fn get_state(&self) -> Vec<u8> {
        self.lock().graph.note_misuse("get_state");
        state::encode(StateKind::Generator, self.key(), None)
    }

    /// [`get_state`](Self::get_state), or [`RngError::Capture`] during a CUDA graph
    /// capture that draws from this generator.
    pub fn try_get_state(&self) -> Result<Vec<u8>, RngError> {
        self.lock().graph.refuse_if_captured("get_state")?;
        Ok(self.get_state())
    }

    /// Restores a state from [`get_state`](Self::get_state). On error (wrong length,
    /// magic, version, kind or checksum, or [`RngError::Capture`] during a CUDA graph
    /// capture that draws from this generator) the generator is unchanged.
    pub fn set_state(&self, bytes: &[u8]) -> Result<(), RngError> {
        self.lock().graph.refuse_if_captured("set_state")?;
        let (key, _) = state::decode(StateKind::Generator, bytes)?;
        self.set_key(key);
        Ok(())
    }
}

/// A seed from OS entropy. If the OS cannot provide any (practically never), falls back
/// to the clock and a per-process counter, like PyTorch's `/dev/urandom`-then-time seed.
pub(crate) fn entropy_seed() -> u64 {
    if let Ok(seed) = getrandom::u64() {
        return seed;
    }
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let words = crate::stream::philox::block_words(nanos, count);
    u64::from(words[0]) | u64::from(words[1]) << 32
}
