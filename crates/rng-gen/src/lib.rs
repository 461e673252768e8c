//! # rng-gen: ditto's random numbers
//!
//! ```text
//! tensor-core  Device, DType, Shape, Storage, Tensor, errors
//!      ^
//! kernels      the random CUDA sources + launchers
//!      ^
//! rng-gen      <- you are here: Philox engine, generators, the random-op pipeline
//!      ^
//! nn-mini      layers, losses, SGD, data loader, checkpoints
//! ```
//!
//! Every random op is a pure function of `(seed, offset, op, dtype, n, parameters,
//! element index)` (docs/contract.md §1). [`stream`] states that function; generators
//! hold `(seed, offset)` and reserve blocks of the stream for each op.
//!
//! ```
//! use rng_gen::{rand, Generator};
//! use tensor_core::{DType, Device};
//!
//! let g = Generator::new(Device::Cpu);
//! g.manual_seed(42);
//! let t = rand(&[10], DType::F32, Device::Cpu, Some(&g))?;
//! assert_eq!(t.to_vec::<f32>()?[0], 0.917_729_56);
//! assert_eq!(g.offset(), 3); // 10 words = 3 Philox blocks
//! # Ok::<(), rng_gen::RngError>(())
//! ```
//!
//! ## Modules (one concept per file)
//!
//! - [`stream`]: the contract itself: Philox4x32-10, keys and `fold_in` / `split`, the
//!   word-to-number conversions, ditto's own f32 `ln` / `sincospi` and f16 / bf16
//!   rounding, and how many blocks each built-in op consumes.
//! - `generator`: [`Generator`], a shared `(seed, offset)` handle whose
//!   [`reserve`](Generator::reserve) hands each op its stretch of the stream.
//! - [`state`]: the versioned state bytes of generators and [`PhiloxRng`].
//! - `registry`: the default generator per device and the CPU generator's state
//!   functions ([`get_rng_state`], ...); [`cuda`]: their `torch.cuda` counterparts;
//!   `seeding`: [`manual_seed`] and [`seed`], which reach every device.
//! - `fork`: [`fork_rng`], run code without disturbing the default generators (a
//!   thread-local fork, kept in `thread_forks`; [`fork_rng_all_threads`] is PyTorch's
//!   process-wide rewind).
//! - `philox_rng`: [`PhiloxRng`], the stream as a `rand_core` RNG.
//! - `ops`: the random tensor ops ([`rand`], [`randn`], [`uniform`], [`normal`],
//!   [`bernoulli`], [`randint`], [`randperm`], [`bits`], [`dropout`]) and their in-place
//!   forms ([`uniform_`], [`normal_`], [`bernoulli_`], [`random_`], [`bits_`],
//!   [`dropout_into`]), and [`dropout_rows`] for some rows of a batch reserved once, as
//!   data parallel ranks need. All of them run one pipeline (validate, take the output, reserve
//!   once, fill in parallel on the CPU or launch on CUDA), which a downstream crate's
//!   own op uses the same way: implement [`Sampler`] and call [`sample`] (see
//!   `docs/custom-random-op.md`).
//! - `simd`: which vector instructions the CPU fill is compiled for, picked at run time.
//! - `error`: [`RngError`], the crate's one error type.

#![warn(missing_docs)]

pub mod cuda;
mod error;
mod fork;
mod generator;
pub mod graph;
mod ops;
mod philox_rng;
mod registry;
mod seeding;
mod simd;
pub mod state;
pub mod stream;
mod thread_forks;

pub use error::RngError;
pub use fork::{fork_rng, fork_rng_all_threads};
pub use generator::{Generator, DEFAULT_SEED};
pub use ops::{
    bernoulli, bernoulli_, bits, bits_, dropout, dropout_backward, dropout_into, dropout_rows,
    dropout_with_mask, normal, normal_, rand, randint, randn, random_, randperm, sample, sample_,
    sample_at, uniform, uniform_, DropoutState, Layout, PackedMask, PerWordSampler, Sampler,
    BATCH_WORDS,
};
pub use ops::{
    causal_attention, causal_attention_backward, causal_attention_unfused, AttentionDropout,
    AttentionSaved,
};
pub use philox_rng::PhiloxRng;
pub use registry::{default_generator, get_rng_state, initial_seed, set_rng_state};
pub use seeding::{manual_seed, seed};
pub use stream::increment::{increment_for, words_for, words_per_element, RandomOp};
pub use stream::key::{fold_in, split, Key};
pub use stream::philox::philox4x32_10;

/// The `rand_core` version whose `RngCore` / `SeedableRng` [`PhiloxRng`] implements, so
/// downstream code names the same traits without a version to keep in step.
pub use rand_core;

/// What a CUDA body of a [`Sampler`] returns: the kernel and its arguments (from the
/// `kernels` crate, re-exported so a downstream op needs no other import).
#[cfg(feature = "cuda")]
pub use kernels::{Arg as KernelArg, KernelCall};
