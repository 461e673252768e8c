//! Where the random ops hand over to CUDA: allocate the output on the device, launch
//! the kernel from `kernels::launch` with the reserved key as plain values, wrap the
//! buffer in a tensor.
//!
//! Contract for every function here (DESIGN.md §1):
//! - the caller has already validated every argument (same errors as on CPU), checked
//!   that device `ordinal` exists, and reserved the offset on the generator: `key` is
//!   `(seed, base block)` and is passed to the kernel as plain values; no generator is
//!   touched here;
//! - `n` is the element count of `dims` (may be 0: an empty tensor, no launch);
//! - element `i` equals the CPU sampler's element `i` bit for bit (f64 normals
//!   excepted: they are CPU-only and refused before dispatch). The kernels run the
//!   per-element code that `tests/cuda_header_parity.rs` checks against the samplers;
//! - `f64` parameters are converted exactly as the CPU does: `as f32` for the f32, f16
//!   and bf16 dtypes, kept as f64 for f64.
//!
//! Kernels are queued on the device's default stream; results are read back (masks,
//! `to_vec`) on that stream too, so no extra synchronisation is needed. Without the
//! `cuda` feature nothing reaches here (no CUDA device exists) and every function
//! returns `NotImplementedOnDevice`.

#[cfg(not(feature = "cuda"))]
pub(crate) use disabled::*;
#[cfg(feature = "cuda")]
pub(crate) use gpu::*;

#[cfg(feature = "cuda")]
mod gpu {
    use kernels::launch::{self, KeepSource};
    use kernels::{KernelError, Launch};
    use tensor_core::cuda::CudaStorage;
    use tensor_core::{CpuStorage, DType, Device, Storage, Tensor, TensorError};

    use crate::stream::key::Key;
    use crate::{Generator, RngError};

    /// Turns a launcher's error into rng-gen's, naming the device.
    fn kernel_error(ordinal: usize) -> impl FnOnce(KernelError) -> RngError {
        move |e| RngError::Tensor(e.into_tensor_error(ordinal))
    }

    /// A zeroed device buffer for `n` elements of `dtype`.
    fn alloc(ordinal: usize, dtype: DType, n: u64) -> Result<CudaStorage, RngError> {
        let len = usize::try_from(n).map_err(|_| TensorError::AllocationFailed {
            device: Device::Cuda(ordinal),
            dtype,
            elements: usize::MAX,
        })?;
        Ok(CudaStorage::alloc(ordinal, dtype, len)?)
    }

    /// The finished buffer as a tensor of shape `dims`.
    fn wrap(out: CudaStorage, dims: &[usize]) -> Result<Tensor, RngError> {
        Ok(Tensor::from_storage(Storage::Cuda(out), dims)?)
    }

    /// The device buffer holding exactly `t`'s elements in order: `t`'s own when it is
    /// a whole contiguous buffer, else a compact copy (through the host; views are rare
    /// inputs to dropout).
    fn compact(t: &Tensor, ordinal: usize) -> Result<Tensor, RngError> {
        let whole = |t: &Tensor| {
            t.is_contiguous()
                && t.storage_offset() == 0
                && matches!(t.storage(), Storage::Cuda(s) if s.len() == t.elem_count())
        };
        if whole(t) {
            return Ok(t.clone());
        }
        Ok(t.to_device(Device::Cpu)?.to_device(Device::Cuda(ordinal))?)
    }

    /// The device buffer behind a CUDA tensor.
    fn cuda_storage(t: &Tensor, ordinal: usize) -> Result<&CudaStorage, RngError> {
        match t.storage() {
            Storage::Cuda(s) => Ok(s),
            other => Err(TensorError::WrongDevice {
                op: "dropout",
                expected: Device::Cuda(ordinal),
                got: other.device(),
            }
            .into()),
        }
    }

    /// `bits`: U32 tensor of raw words; element `i` = word `i`.
    pub(crate) fn bits(
        dims: &[usize],
        key: Key,
        n: u64,
        ordinal: usize,
    ) -> Result<Tensor, RngError> {
        let mut out = alloc(ordinal, DType::U32, n)?;
        launch::bits(&mut out, key.seed, key.offset, Launch::Auto)
            .map_err(kernel_error(ordinal))?;
        wrap(out, dims)
    }

    /// `rand` / `uniform` in `dtype` (f32, f16, bf16, f64) on `[low, high)`.
    pub(crate) fn uniform(
        dims: &[usize],
        dtype: DType,
        key: Key,
        n: u64,
        low: f64,
        high: f64,
        ordinal: usize,
    ) -> Result<Tensor, RngError> {
        let mut out = alloc(ordinal, dtype, n)?;
        launch::uniform(&mut out, key.seed, key.offset, low, high, Launch::Auto)
            .map_err(kernel_error(ordinal))?;
        wrap(out, dims)
    }

    /// `randn` / `normal` in `dtype` (f32, f16, bf16; never f64).
    pub(crate) fn normal(
        dims: &[usize],
        dtype: DType,
        key: Key,
        n: u64,
        mean: f64,
        std: f64,
        ordinal: usize,
    ) -> Result<Tensor, RngError> {
        let mut out = alloc(ordinal, dtype, n)?;
        launch::normal(
            &mut out,
            key.seed,
            key.offset,
            mean as f32,
            std as f32,
            Launch::Auto,
        )
        .map_err(kernel_error(ordinal))?;
        wrap(out, dims)
    }

    /// `bernoulli` with probability `p` into `dtype` (a float type, U8 or Bool).
    pub(crate) fn bernoulli(
        dims: &[usize],
        dtype: DType,
        key: Key,
        n: u64,
        p: f32,
        ordinal: usize,
    ) -> Result<Tensor, RngError> {
        let mut out = alloc(ordinal, dtype, n)?;
        launch::bernoulli(&mut out, key.seed, key.offset, p, Launch::Auto)
            .map_err(kernel_error(ordinal))?;
        wrap(out, dims)
    }

    /// `randint`: I64, element = `low + below(w0, w1, range)` (`range >= 1`).
    pub(crate) fn randint(
        dims: &[usize],
        key: Key,
        n: u64,
        low: i64,
        range: u64,
        ordinal: usize,
    ) -> Result<Tensor, RngError> {
        let mut out = alloc(ordinal, DType::I64, n)?;
        launch::randint(&mut out, key.seed, key.offset, low, range, Launch::Auto)
            .map_err(kernel_error(ordinal))?;
        wrap(out, dims)
    }

    /// `randperm(n)`: Fisher-Yates is a chain of dependent swaps, so the permutation is
    /// computed by the CPU sampler from the same reserved key (on a scratch generator)
    /// and uploaded: identical by construction, and faster than a one-thread kernel.
    pub(crate) fn randperm(n: u64, key: Key, ordinal: usize) -> Result<Tensor, RngError> {
        let scratch = Generator::from_key(Device::Cpu, key);
        let len = usize::try_from(n).map_err(|_| TensorError::AllocationFailed {
            device: Device::Cuda(ordinal),
            dtype: DType::I64,
            elements: usize::MAX,
        })?;
        let host = super::super::randperm(len, Device::Cpu, Some(&scratch))?;
        Ok(host.to_device(Device::Cuda(ordinal))?)
    }

    /// `dropout` of the CUDA tensor `x`: keep iff `uniform_f32(word) >= p`, kept value
    /// `x * scale`. With `want_mask`, also returns the packed keep-mask (bit `i % 32` of
    /// word `i / 32`), written by the kernel and read back.
    pub(crate) fn dropout(
        x: &Tensor,
        key: Key,
        n: u64,
        p: f32,
        scale: f32,
        want_mask: bool,
        ordinal: usize,
    ) -> Result<(Tensor, Option<Vec<u32>>), RngError> {
        let x = compact(x, ordinal)?;
        let mut y = alloc(ordinal, x.dtype(), n)?;
        let mut mask = if want_mask {
            Some(alloc(ordinal, DType::U32, kernels::packed_mask_words(n))?)
        } else {
            None
        };
        launch::dropout(
            cuda_storage(&x, ordinal)?,
            &mut y,
            mask.as_mut(),
            key.seed,
            key.offset,
            p,
            scale,
            Launch::Auto,
        )
        .map_err(kernel_error(ordinal))?;
        let mask = match mask {
            Some(m) => match m.to_cpu()? {
                CpuStorage::U32(words) => Some(words),
                _ => unreachable!("the mask buffer was allocated as u32"),
            },
            None => None,
        };
        Ok((wrap(y, x.dims())?, mask))
    }

    /// `dropout_backward` of the CUDA tensor `grad`: `grad * scale` where kept, else 0;
    /// the keep pattern comes from `mask` when given (uploaded), else is regenerated
    /// from `key` and `p` on the device.
    pub(crate) fn dropout_backward(
        grad: &Tensor,
        key: Key,
        n: u64,
        p: f32,
        scale: f32,
        mask: Option<&[u32]>,
        ordinal: usize,
    ) -> Result<Tensor, RngError> {
        let grad = compact(grad, ordinal)?;
        let mut grad_in = alloc(ordinal, grad.dtype(), n)?;
        let uploaded = match mask {
            Some(words) => Some(CudaStorage::from_cpu(
                &CpuStorage::U32(words.to_vec()),
                ordinal,
            )?),
            None => None,
        };
        let keep = match &uploaded {
            Some(m) => KeepSource::Mask(m),
            None => KeepSource::Regenerate {
                seed: key.seed,
                offset: key.offset,
            },
        };
        launch::dropout_backward(
            cuda_storage(&grad, ordinal)?,
            &mut grad_in,
            keep,
            p,
            scale,
            Launch::Auto,
        )
        .map_err(kernel_error(ordinal))?;
        wrap(grad_in, grad.dims())
    }
}

#[cfg(not(feature = "cuda"))]
mod disabled {
    use tensor_core::{DType, Device, Tensor, TensorError};

    use crate::stream::key::Key;
    use crate::RngError;

    /// One stub per function of the `cuda` build, with the same parameter types (the
    /// callers compile unchanged) and all but `ordinal` ignored; each refuses with
    /// `NotImplementedOnDevice` named after itself.
    macro_rules! unavailable {
        ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {$(
            #[allow(clippy::type_complexity)]
            pub(crate) fn $name($(_: $arg,)* ordinal: usize) -> Result<$ret, RngError> {
                Err(RngError::Tensor(TensorError::NotImplementedOnDevice {
                    op: stringify!($name),
                    device: Device::Cuda(ordinal),
                }))
            }
        )*};
    }

    unavailable! {
        bits(&[usize], Key, u64) -> Tensor;
        uniform(&[usize], DType, Key, u64, f64, f64) -> Tensor;
        normal(&[usize], DType, Key, u64, f64, f64) -> Tensor;
        bernoulli(&[usize], DType, Key, u64, f32) -> Tensor;
        randint(&[usize], Key, u64, i64, u64) -> Tensor;
        randperm(u64, Key) -> Tensor;
        dropout(&Tensor, Key, u64, f32, f32, bool) -> (Tensor, Option<Vec<u32>>);
        dropout_backward(&Tensor, Key, u64, f32, f32, Option<&[u32]>) -> Tensor;
    }
}
