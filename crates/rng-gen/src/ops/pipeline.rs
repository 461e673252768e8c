//! The one pipeline every random op runs, ditto's own and a downstream crate's:
//!
//! 1. **validate**: the output's shape, dtype and layout, the device (it must exist),
//!    the generator (it must belong to the device) and the sampler's layout. The op
//!    checked its own parameters before building its sampler. A rejected call touches no
//!    generator, and CPU and CUDA give the same error.
//! 2. **take the output**: a new buffer (on the CPU a zeroed allocation whose pages the
//!    parallel fill touches first; on CUDA a device buffer), or an existing contiguous
//!    tensor's elements (made unique first if shared: copy-on-write).
//! 3. **reserve** `ceil(words / 4)` blocks, once, in [`reserve`], after everything that
//!    can fail for a reason other than the device itself has succeeded (allocation, the
//!    sampler's kernel description), so a failed op consumes nothing. Replays
//!    ([`Stream::At`]) reserve nothing and use the key given.
//! 4. **fill** on the CPU (`cpu_fill`, parallel and bit-identical for any thread count)
//!    or **launch** the sampler's kernel on CUDA; a sampler without a CUDA body is
//!    filled on the host and copied to the device.
//!
//! [`run`] is that sequence, in one function. Each op file only states its op: its
//! parameters' checks, its [`Sampler`] (layout and body), and which sampler a dtype gets.

use tensor_core::audit::{OpRecorder, RngRecord};
#[cfg(feature = "cuda")]
use tensor_core::Storage;
use tensor_core::{Device, Element, Shape, Tensor, TensorError};

use super::args::{elem_count, generator_for};
use super::cpu_fill;
use super::sampler::Sampler;
use crate::graph::Reserved;
use crate::registry::check_device;
use crate::stream::key::Key;
use crate::{Generator, RngError};

/// Where an op writes.
pub(crate) enum Target<'t> {
    /// A new contiguous tensor of `dims` on `device`.
    New { dims: &'t [usize], device: Device },
    /// An existing tensor, overwritten in place (contiguous, of the sampler's dtype).
    Existing(&'t mut Tensor),
    /// A new CPU tensor of `dims`, for an op on `device` (whose generator it draws
    /// from): for ops that finish their work on the host, like `randperm`.
    HostFor { dims: &'t [usize], device: Device },
}

/// Where an op's words come from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stream<'g> {
    /// Reserve them from this generator (or the device's default): the normal case.
    Reserve(Option<&'g Generator>),
    /// Use the stretch starting at this key, reserving nothing: replays (dropout's
    /// backward regenerating its mask) and stretches a caller reserved itself.
    At(Key),
}

/// What [`run`] produced: the new tensor (for [`Target::New`]) and the key the op's words
/// started at.
pub(crate) struct Ran {
    pub(crate) tensor: Option<Tensor>,
    pub(crate) key: Key,
}

/// Blocks an op of `layout` on `n` elements reserves: `ceil(words / 4)`, or an error if
/// that does not fit the 64-bit counter (only a custom op with very many words per
/// element on an absurd `n` could ask for that).
pub(crate) fn blocks_for(op: &'static str, words: u128) -> Result<u64, RngError> {
    u64::try_from(words.div_ceil(4)).map_err(|_| {
        RngError::Tensor(TensorError::InvalidArgument {
            op,
            message: format!("{words} words exceed the 2^64 blocks of a stream"),
        })
    })
}

/// Runs `op` into `target` with words from `stream`: steps 1 to 4 above, recorded in the
/// audit (tensor-core's `audit`) when a trace is open.
#[track_caller]
pub(crate) fn run<S: Sampler>(
    op: S,
    target: Target<'_>,
    stream: Stream<'_>,
) -> Result<Ran, RngError> {
    run_recorded(op, target, stream, &[])
}

/// [`run`] for an op whose output also depends on tensors (`inputs`: dropout's `x`).
/// With a trace open, the op records its call site (through `#[track_caller]` up to the
/// public op), its inputs, its output and its reservation: the device, the key's seed and
/// offset, and the blocks the op's words span (for a replay at a given key, the stretch
/// it reads). Closed, this costs the audit's one relaxed load.
#[track_caller]
pub(crate) fn run_recorded<S: Sampler>(
    op: S,
    target: Target<'_>,
    stream: Stream<'_>,
    inputs: &[&Tensor],
) -> Result<Ran, RngError> {
    let mut recorder = OpRecorder::begin(op.name(), inputs);
    if !recorder.is_recording() {
        return run_unrecorded(op, target, stream);
    }
    let (name, layout) = (op.name(), op.layout());
    let (n, device) = match &target {
        Target::New { dims, device } | Target::HostFor { dims, device } => {
            (dims.iter().product::<usize>(), *device)
        }
        Target::Existing(t) => (t.elem_count(), t.device()),
    };
    let blocks = blocks_for(name, layout.words_for(n as u64))?;
    let record = |key: Key| RngRecord {
        device,
        seed: key.seed,
        offset: key.offset,
        blocks,
    };
    match target {
        Target::Existing(t) => {
            let ran = run_unrecorded(op, Target::Existing(&mut *t), stream)?;
            recorder.rng(record(ran.key));
            recorder.finish(t);
            Ok(ran)
        }
        target => {
            let ran = run_unrecorded(op, target, stream)?;
            recorder.rng(record(ran.key));
            if let Some(t) = &ran.tensor {
                recorder.finish(t);
            }
            Ok(ran)
        }
    }
}

/// Steps 1 to 4, unrecorded.
fn run_unrecorded<S: Sampler>(
    op: S,
    target: Target<'_>,
    stream: Stream<'_>,
) -> Result<Ran, RngError> {
    let name = op.name();
    // 1. validate
    let layout = op.layout();
    if !layout.is_valid() {
        return Err(RngError::Tensor(TensorError::InvalidArgument {
            op: name,
            message: format!(
                "layout {layout:?}: expected at least one element and a word count dividing {}",
                super::sampler::BATCH_WORDS
            ),
        }));
    }
    let (n, device) = match &target {
        Target::New { dims, device } | Target::HostFor { dims, device } => {
            (Shape::new(dims)?.elem_count(), *device)
        }
        Target::Existing(t) => {
            check_existing::<S::Elem>(name, t)?;
            (t.elem_count(), t.device())
        }
    };
    let generator = match stream {
        Stream::Reserve(g) => Some(generator_for(name, device, g)?),
        Stream::At(_) => {
            check_device(device)?;
            None
        }
    };
    let blocks = blocks_for(name, layout.words_for(n as u64))?;
    let draw = |op: &'static str| match (&generator, stream) {
        (Some(g), _) => crate::graph::reserve(op, g, blocks),
        (None, Stream::At(key)) => {
            crate::graph::refuse_replay_in_capture(op, device)?;
            Ok(Reserved::eager(key))
        }
        (None, Stream::Reserve(_)) => unreachable!("a generator was resolved above"),
    };
    match (device, target) {
        (Device::Cuda(ordinal), target @ (Target::New { .. } | Target::Existing(_))) => {
            run_cuda(op, target, n, ordinal, draw)
        }
        (_, target) => run_cpu(&op, target, n, draw),
    }
}

/// Errors unless `t` can be written in place by a sampler of `T`: its dtype, and
/// contiguous (a strided view gets `NotContiguous`; fill a contiguous tensor and
/// `copy_from_` it into the view instead).
fn check_existing<T: Element>(op: &'static str, t: &Tensor) -> Result<(), RngError> {
    if t.dtype() != T::DTYPE {
        return Err(TensorError::DTypeMismatch {
            op,
            expected: T::DTYPE,
            got: t.dtype(),
        }
        .into());
    }
    if !t.is_contiguous() {
        return Err(TensorError::NotContiguous {
            op,
            dims: t.dims().to_vec(),
            strides: t.strides().to_vec(),
        }
        .into());
    }
    Ok(())
}

/// Steps 2 to 4 on the CPU.
fn run_cpu<S: Sampler>(
    op: &S,
    target: Target<'_>,
    n: usize,
    draw: impl FnOnce(&'static str) -> Result<Reserved, RngError>,
) -> Result<Ran, RngError> {
    match target {
        Target::New { dims, .. } | Target::HostFor { dims, .. } => {
            let mut values = tensor_core::try_zeroed_vec::<S::Elem>(n)?;
            let key = draw(op.name())?.key;
            cpu_fill::fill(op, &mut values, key);
            let tensor = Tensor::from_vec(values, dims, Device::Cpu)?;
            Ok(Ran {
                tensor: Some(tensor),
                key,
            })
        }
        Target::Existing(t) => {
            let values = t.as_mut_slice::<S::Elem>()?;
            let key = draw(op.name())?.key;
            cpu_fill::fill(op, values, key);
            Ok(Ran { tensor: None, key })
        }
    }
}

/// Steps 2 to 4 on CUDA device `ordinal`.
#[cfg(feature = "cuda")]
fn run_cuda<S: Sampler>(
    mut op: S,
    target: Target<'_>,
    n: usize,
    ordinal: usize,
    draw: impl FnOnce(&'static str) -> Result<Reserved, RngError>,
) -> Result<Ran, RngError> {
    use kernels::launch::Philox;
    use kernels::Launch;
    use tensor_core::cuda::CudaStorage;

    let name = op.name();
    let kernel_error = |e: kernels::KernelError| RngError::Tensor(e.into_tensor_error(ordinal));
    let (mut new, dims, mut existing) = match target {
        Target::New { dims, .. } => {
            // Every random kernel writes all `n` elements: no zero fill first.
            let storage = CudaStorage::alloc_uninit(ordinal, <S::Elem as Element>::DTYPE, n)?;
            (Some(storage), Some(dims), None)
        }
        Target::Existing(t) => (None, None, Some(t)),
        Target::HostFor { .. } => unreachable!("host targets are filled on the CPU"),
    };
    let mut draw = Some(draw);
    let mut draw_once = |name| (draw.take().expect("one reservation per op"))(name);
    let launched = match op.cuda_kernel().map_err(kernel_error)? {
        Some(call) => {
            let (storage, at) = match (&mut new, &mut existing) {
                (Some(s), _) => (s, 0),
                (None, Some(t)) => cuda_storage_mut(name, t)?,
                (None, None) => unreachable!("a target is new or existing"),
            };
            crate::graph::refuse_uncapturable(name, ordinal, &call.kernel)?;
            let reserved = draw_once(name)?;
            let key = reserved.key;
            let philox = match &reserved.words {
                Some(words) => Philox::Graphed {
                    words,
                    intra_offset: key.offset,
                },
                None => Philox::Values {
                    seed: key.seed,
                    offset: key.offset,
                },
            };
            call.launch_philox(philox, n as u64, storage, at, Launch::Auto)
                .map_err(kernel_error)?;
            Some(key)
        }
        None => None,
    };
    if let Some(key) = launched {
        let tensor = match (new, dims) {
            (Some(s), Some(dims)) => Some(Tensor::from_storage(Storage::Cuda(s), dims)?),
            _ => None,
        };
        return Ok(Ran { tensor, key });
    }
    // No CUDA body: the CPU body on the host, then a copy to the device.
    let mut host = tensor_core::try_zeroed_vec::<S::Elem>(n)?;
    let key = draw_once(name)?.key;
    cpu_fill::fill(&op, &mut host, key);
    let uploaded = Tensor::from_vec(host, &[n], Device::Cpu)?.to_device(Device::Cuda(ordinal))?;
    match (dims, existing) {
        (Some(dims), _) => Ok(Ran {
            tensor: Some(uploaded.reshape(dims)?),
            key,
        }),
        (None, Some(t)) => {
            t.copy_from_(&uploaded.reshape(t.dims())?)?;
            Ok(Ran { tensor: None, key })
        }
        (None, None) => unreachable!("a target is new or existing"),
    }
}

/// The device buffer of a contiguous CUDA tensor and the element its view starts at.
#[cfg(feature = "cuda")]
fn cuda_storage_mut<'t>(
    op: &'static str,
    t: &'t mut Tensor,
) -> Result<(&'t mut tensor_core::cuda::CudaStorage, usize), RngError> {
    let at = t.storage_offset();
    let device = t.device();
    match t.storage_mut()? {
        Storage::Cuda(s) => Ok((s, at)),
        _ => Err(TensorError::WrongDevice {
            op,
            expected: device,
            got: Device::Cpu,
        }
        .into()),
    }
}

/// Without the `cuda` feature no CUDA device exists, so validation has already refused.
#[cfg(not(feature = "cuda"))]
fn run_cuda<S: Sampler>(
    op: S,
    _target: Target<'_>,
    _n: usize,
    ordinal: usize,
    _draw: impl FnOnce(&'static str) -> Result<Reserved, RngError>,
) -> Result<Ran, RngError> {
    Err(RngError::Tensor(TensorError::NotImplementedOnDevice {
        op: op.name(),
        device: Device::Cuda(ordinal),
    }))
}

/// Runs samplers of any element type. An op picks its sampler by dtype in one function
/// generic over this, and the allocating and in-place forms pass [`NewTensor`] or
/// [`IntoTensor`].
pub(crate) trait RunSampler {
    /// What the op returns.
    type Out;
    /// Runs `op` through the pipeline.
    #[track_caller]
    fn run<S: Sampler>(self, op: S) -> Result<Self::Out, RngError>;
}

/// Into a new tensor: the allocating form.
pub(crate) struct NewTensor<'a> {
    pub(crate) dims: &'a [usize],
    pub(crate) device: Device,
    pub(crate) stream: Stream<'a>,
}

impl<'a> NewTensor<'a> {
    /// The allocating form of an op drawing from `generator` (or `device`'s default):
    /// the shape's element count is checked first, before any reservation.
    pub(crate) fn reserving(
        dims: &'a [usize],
        device: Device,
        generator: Option<&'a Generator>,
    ) -> Result<Self, RngError> {
        elem_count(dims)?;
        Ok(NewTensor {
            dims,
            device,
            stream: Stream::Reserve(generator),
        })
    }
}

impl RunSampler for NewTensor<'_> {
    type Out = Tensor;
    #[track_caller]
    fn run<S: Sampler>(self, op: S) -> Result<Tensor, RngError> {
        let target = Target::New {
            dims: self.dims,
            device: self.device,
        };
        let ran = run(op, target, self.stream)?;
        Ok(ran.tensor.expect("a new target gives a tensor"))
    }
}

/// Into an existing tensor: the in-place form. Gives the key the op drew from.
pub(crate) struct IntoTensor<'a> {
    pub(crate) out: &'a mut Tensor,
    pub(crate) stream: Stream<'a>,
}

impl<'a> IntoTensor<'a> {
    /// The in-place form of an op drawing from `generator` (or the tensor's device's
    /// default).
    pub(crate) fn reserving(out: &'a mut Tensor, generator: Option<&'a Generator>) -> Self {
        IntoTensor {
            out,
            stream: Stream::Reserve(generator),
        }
    }
}

impl RunSampler for IntoTensor<'_> {
    type Out = Key;
    #[track_caller]
    fn run<S: Sampler>(self, op: S) -> Result<Key, RngError> {
        Ok(run(op, Target::Existing(self.out), self.stream)?.key)
    }
}

/// Runs the random op `op` into a new tensor of `dims` on `device`, drawing from
/// `generator` (or `device`'s default generator): the pipeline of ditto's own ops, for
/// a downstream crate's [`Sampler`]. The generator advances by `ceil(words / 4)` blocks
/// with `words = op.layout().words_for(n)`; the values do not depend on the thread
/// count or the device.
#[track_caller]
pub fn sample<S: Sampler>(
    op: S,
    dims: &[usize],
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    NewTensor {
        dims,
        device,
        stream: Stream::Reserve(generator),
    }
    .run(op)
}

/// [`sample`] into the existing tensor `out` (contiguous, of dtype `S::Elem`, on any
/// device; a strided view is a `NotContiguous` error). Returns the key the op's words
/// started at (what a replay with [`sample_at`] needs).
#[track_caller]
pub fn sample_<S: Sampler>(
    op: S,
    out: &mut Tensor,
    generator: Option<&Generator>,
) -> Result<Key, RngError> {
    IntoTensor::reserving(out, generator).run(op)
}

/// [`sample_`] with the words starting at `key`, touching no generator: recomputes an
/// op's output from its key (as dropout's backward regenerates its mask), or fills a
/// stretch the caller reserved (`Generator::reserve_blocks`).
#[track_caller]
pub fn sample_at<S: Sampler>(op: S, out: &mut Tensor, key: Key) -> Result<(), RngError> {
    IntoTensor {
        out,
        stream: Stream::At(key),
    }
    .run(op)
    .map(|_| ())
}
