//! Launching a random kernel: one [`KernelCall`] describes which kernel runs and with
//! which arguments; [`KernelCall::launch`] queues it on an output buffer.
//!
//! Every random kernel, ditto's own (`cuda/random.cu`) and a downstream crate's, has the
//! signature `(u64 seed, u64 offset, u64 n, args..., T* out)` and is a grid-stride loop
//! over *work items* of `elements_per_item` consecutive elements (one Philox block's
//! worth, usually), each computed from its own words. So the grid only sets how many
//! threads share the work, never a value. Reserving `(seed, offset)` is the generator's
//! job (rng-gen); a launch never touches generator state. Work is queued on the output
//! buffer's stream (the device's default stream), so it is ordered after earlier ditto
//! work without extra synchronisation; the call returns once the kernel is queued.
//!
//! The `*_call` functions in `fill` and `dropout` state each built-in op's kernel and
//! arguments once; rng-gen's samplers and the launchers below (used by tests and
//! benches with forced geometries) both go through them.

mod attention;
mod dropout;
mod fill;

pub use attention::{
    attention_backward, attention_forward, AttentionBackwardInputs, AttentionGradients,
    AttentionOutputs, AttentionProblem, AttentionStream, HeadOperand, HeadStrides,
    ATTENTION_MAX_HEAD_WIDTH,
};
pub use dropout::{dropout, dropout_backward, dropout_backward_call, dropout_call, KeepSource};
pub use fill::{
    bernoulli, bernoulli_call, bits, bits_call, normal, normal_call, randint, randint_call,
    uniform, uniform_call,
};

use cuda_runtime::{module_cache, CudaSource};
use cudarc::driver::{CudaView, CudaViewMut, DriverError, LaunchConfig, PushKernelArg};
use tensor_core::cuda::CudaStorage;
use tensor_core::{DType, Device, TensorError};

use crate::error::{KernelError, Result};
use crate::grid::Launch;

/// One argument of a random kernel, between `(seed, offset, n)` and the output pointer.
#[derive(Debug)]
pub enum Arg<'a> {
    /// A `float`.
    F32(f32),
    /// A `double`.
    F64(f64),
    /// An `int64_t`.
    I64(i64),
    /// A `uint64_t`.
    U64(u64),
    /// A `uint32_t`.
    U32(u32),
    /// A `const T*` to elements `offset..` of a buffer the kernel reads.
    Input(&'a CudaStorage, usize),
    /// A `T*` to elements `offset..` of a second buffer the kernel writes (e.g. dropout's
    /// packed mask).
    Output(&'a mut CudaStorage, usize),
    /// A null pointer (an optional buffer left out).
    Null,
}

/// A random kernel and its arguments: what a sampler hands the pipeline to run on CUDA.
#[derive(Debug)]
pub struct KernelCall<'a> {
    /// The translation unit holding the kernel (compiled once per device by NVRTC).
    pub source: &'static CudaSource,
    /// The `extern "C" __global__` function's name.
    pub kernel: String,
    /// Arguments after `(seed, offset, n)` and before the output pointer, in order.
    pub args: Vec<Arg<'a>>,
    /// Consecutive elements one loop iteration of the kernel computes (4 for one word
    /// per element, 2 for two). Sizes the grid only.
    pub elements_per_item: u64,
}

/// Where a random kernel's `(seed, offset)` come from.
#[derive(Clone, Copy, Debug)]
pub enum Philox<'a> {
    /// Values the generator reserved on the host: an eager launch.
    Values {
        /// The stream's seed.
        seed: u64,
        /// The first block of the reservation.
        offset: u64,
    },
    /// A launch captured into a CUDA graph: the kernel's `_graphed` twin reads the
    /// generator's device words `{seed, base offset}` (two u64, as an i64 buffer) and
    /// adds `intra_offset`, its reservation's place within the graph (rng-gen's
    /// `graph` module). Only kernels with a twin ([`graphed_twin`]) can be captured;
    /// the fused attention's kernels read the same words ([`AttentionStream`]).
    Graphed {
        /// The generator's `{seed, base offset}` on the launch's device.
        words: &'a CudaStorage,
        /// Blocks between the graph's base offset and this launch's first block.
        intra_offset: u64,
    },
}

/// The name of `kernel`'s twin for CUDA graphs (`random.cu`), if it has one: dropout's
/// forward kernels, the random op of a training step.
#[must_use]
pub fn graphed_twin(kernel: &str) -> Option<String> {
    let rest = kernel.strip_prefix("ditto_dropout_")?;
    let dtype = rest.strip_suffix("_kernel")?;
    ["f32", "f16", "bf16", "f64"]
        .contains(&dtype)
        .then(|| format!("ditto_dropout_graphed_{dtype}_kernel"))
}

/// Queues `ditto_philox_advance_kernel`: the generator's device base offset in `words`
/// (see [`Philox::Graphed`]) moves `increment` blocks on. Captured as the last node of a
/// graph that drew random numbers. The kernel writes `words` through a shared
/// reference: it is device memory the generator shares with every graph it is in.
pub fn philox_advance(words: &CudaStorage, increment: u64) -> Result<()> {
    const NAME: &str = "ditto_philox_advance_kernel";
    check_words(words)?;
    let ordinal = words.ordinal();
    let func = module_cache::function(ordinal, &crate::nvrtc::RANDOM_SOURCE, NAME)?;
    let stream = words.stream()?;
    let mut args = stream.launch_builder(&func);
    args.arg(words.bytes()).arg(&increment);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: matches `ditto_philox_advance_kernel(u64* philox, u64 increment)`; `words`
    // holds two u64 (checked), of which the kernel writes the second.
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, NAME))?;
    Ok(())
}

/// Errors unless `words` is a buffer of two 8-byte words (seed, offset).
fn check_words(words: &CudaStorage) -> Result<()> {
    if words.len() == 2 && words.dtype().size_in_bytes() == 8 {
        return Ok(());
    }
    Err(KernelError::InvalidArgument {
        op: "launch",
        message: format!(
            "the generator's device words must be 2 elements of 8 bytes, got {} of {}",
            words.len(),
            words.dtype()
        ),
    })
}

impl KernelCall<'_> {
    /// Queues the kernel to write elements `out_offset .. out_offset + n` of `out` from
    /// the stream at `(seed, offset)`. Errors (nothing queued) when a buffer is on
    /// another device or too short, or when the kernel cannot be compiled or launched.
    pub fn launch(
        self,
        seed: u64,
        offset: u64,
        n: u64,
        out: &mut CudaStorage,
        out_offset: usize,
        launch: Launch,
    ) -> Result<()> {
        self.launch_philox(Philox::Values { seed, offset }, n, out, out_offset, launch)
    }

    /// [`launch`](Self::launch) with the `(seed, offset)` from `philox`: values, or (for
    /// a launch being captured into a CUDA graph) the generator's device words, with
    /// the kernel's graph twin. Errors for a kernel without a twin.
    pub fn launch_philox(
        self,
        philox: Philox<'_>,
        n: u64,
        out: &mut CudaStorage,
        out_offset: usize,
        launch: Launch,
    ) -> Result<()> {
        let name = match philox {
            Philox::Values { .. } => self.kernel,
            Philox::Graphed { words, .. } => {
                check_words(words)?;
                same_device("random kernel launch", out, words)?;
                graphed_twin(&self.kernel).ok_or_else(|| KernelError::InvalidArgument {
                    op: "launch",
                    message: format!(
                        "{} has no CUDA-graph twin: it cannot be captured into a graph",
                        self.kernel
                    ),
                })?
            }
        };
        check_range(&name, "the output", out, out_offset, n)?;
        for arg in &self.args {
            match arg {
                Arg::Input(b, _) => same_device("random kernel launch", out, b)?,
                Arg::Output(b, _) => same_device("random kernel launch", out, b)?,
                _ => {}
            }
        }
        if n == 0 {
            return Ok(());
        }
        let ordinal = out.ordinal();
        let func = module_cache::function(ordinal, self.source, &name)?;
        let items = n.div_ceil(self.elements_per_item.max(1));
        let cfg = launch_config(ordinal, items, launch)?;
        let stream = out.stream()?;
        // Views first (in argument order): the builder borrows them until the launch.
        let mut prepared: Vec<Prepared<'_>> = self.args.into_iter().map(Prepared::from).collect();
        let start = out_offset * out.dtype().size_in_bytes();
        let mut out_view = out.bytes_mut().slice_mut(start..);
        let mut args = stream.launch_builder(&func);
        let (seed, offset) = match philox {
            Philox::Values { seed, offset } => (seed, offset),
            Philox::Graphed { intra_offset, .. } => (0, intra_offset),
        };
        match philox {
            Philox::Values { .. } => args.arg(&seed),
            Philox::Graphed { words, .. } => args.arg(words.bytes()),
        };
        args.arg(&offset).arg(&n);
        for p in &mut prepared {
            match p {
                Prepared::F32(v) => args.arg(&*v),
                Prepared::F64(v) => args.arg(&*v),
                Prepared::I64(v) => args.arg(&*v),
                Prepared::U64(v) => args.arg(&*v),
                Prepared::U32(v) => args.arg(&*v),
                Prepared::Input(v) => args.arg(&*v),
                Prepared::Output(v) => args.arg(v),
            };
        }
        args.arg(&mut out_view);
        // SAFETY: every random kernel takes (u64 seed, u64 offset, u64 n, args..., T* out),
        // its graph twin (const u64* philox, u64 intra_offset, n, args..., T* out)
        // with the argument types pushed above (the `*_call` functions and samplers state
        // them next to the kernel's signature), the output holds `n` elements from
        // `out_offset` (checked above) and writes nothing else; input buffers are the
        // caller's, checked by the caller for length.
        unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &name))?;
        Ok(())
    }
}

/// An [`Arg`] ready to push: device pointers as views from their offsets.
enum Prepared<'a> {
    F32(f32),
    F64(f64),
    I64(i64),
    U64(u64),
    U32(u32),
    Input(CudaView<'a, u8>),
    Output(CudaViewMut<'a, u8>),
}

impl<'a> From<Arg<'a>> for Prepared<'a> {
    fn from(arg: Arg<'a>) -> Self {
        match arg {
            Arg::F32(v) => Prepared::F32(v),
            Arg::F64(v) => Prepared::F64(v),
            Arg::I64(v) => Prepared::I64(v),
            Arg::U64(v) => Prepared::U64(v),
            Arg::U32(v) => Prepared::U32(v),
            // A null pointer is a 64-bit zero.
            Arg::Null => Prepared::U64(0),
            Arg::Input(b, at) => Prepared::Input(b.bytes().slice(at * b.dtype().size_in_bytes()..)),
            Arg::Output(b, at) => {
                let start = at * b.dtype().size_in_bytes();
                Prepared::Output(b.bytes_mut().slice_mut(start..))
            }
        }
    }
}

/// The kernel for `op` on `dtype` (`ditto_<op>_<suffix>_kernel`), or `UnsupportedDType`.
pub(crate) fn kernel_name(
    op: &'static str,
    dtype: DType,
    supported: &'static [DType],
    supported_text: &'static str,
) -> Result<String> {
    if !supported.contains(&dtype) {
        return Err(TensorError::UnsupportedDType {
            op,
            dtype,
            supported: supported_text,
        }
        .into());
    }
    Ok(format!("ditto_{op}_{}_kernel", dtype_suffix(dtype)))
}

/// The suffix of `dtype` in kernel names (bool is one byte, 0 or 1: the u8 kernels).
#[must_use]
pub fn dtype_suffix(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::U32 => "u32",
        DType::U8 | DType::Bool => "u8",
    }
}

/// The cudarc launch configuration for `work_items` items of kernel work.
fn launch_config(ordinal: usize, work_items: u64, launch: Launch) -> Result<LaunchConfig> {
    let sm_count = cuda_runtime::sm_count(ordinal)?;
    let grid = launch
        .grid(work_items, sm_count)
        .ok_or_else(|| KernelError::InvalidArgument {
            op: "launch",
            message: format!("{launch:?} is outside CUDA's limits (1..=1024 threads, >= 1 block)"),
        })?;
    Ok(LaunchConfig {
        grid_dim: (grid.blocks, 1, 1),
        block_dim: (grid.threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Maps a driver error from launching `kernel` on `ordinal`.
fn launch_failed(ordinal: usize, kernel: &str) -> impl FnOnce(DriverError) -> KernelError + '_ {
    move |e| KernelError::Launch {
        ordinal,
        kernel: kernel.to_string(),
        message: e.to_string(),
    }
}

/// Errors unless `other` lives on the same device as `first`.
fn same_device(op: &'static str, first: &CudaStorage, other: &CudaStorage) -> Result<()> {
    if first.ordinal() == other.ordinal() {
        Ok(())
    } else {
        Err(TensorError::DeviceMismatch {
            op,
            lhs: Device::Cuda(first.ordinal()),
            rhs: Device::Cuda(other.ordinal()),
        }
        .into())
    }
}

/// Errors unless `storage` holds elements `start .. start + n`.
fn check_range(op: &str, what: &str, storage: &CudaStorage, start: usize, n: u64) -> Result<()> {
    let fits = (start as u64)
        .checked_add(n)
        .is_some_and(|end| end <= storage.len() as u64);
    if fits {
        Ok(())
    } else {
        Err(KernelError::InvalidArgument {
            op: "launch",
            message: format!(
                "{op}: {what} has {} elements, needs {start} + {n}",
                storage.len()
            ),
        })
    }
}
