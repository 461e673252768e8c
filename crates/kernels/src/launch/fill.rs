//! The ops that fill a buffer with fresh random elements: bits, uniform, normal,
//! bernoulli, randint. Element `i` of the buffer is element `i` of the op
//! (docs/contract.md §3).
//!
//! Each `*_call` states the op's kernel and arguments once (matching its signature in
//! `cuda/random.cu`); each launcher runs that call on a whole buffer.

use tensor_core::cuda::CudaStorage;
use tensor_core::DType;

use super::{kernel_name, Arg, KernelCall};
use crate::error::Result;
use crate::grid::Launch;
use crate::nvrtc::RANDOM_SOURCE;

/// A call of a kernel in `random.cu`.
fn random_call(kernel: String, args: Vec<Arg<'static>>, per_item: u64) -> KernelCall<'static> {
    KernelCall {
        source: &RANDOM_SOURCE,
        kernel,
        args,
        elements_per_item: per_item,
    }
}

/// Raw Philox words into a u32 buffer: `ditto_bits_u32_kernel(seed, offset, n, out)`.
#[must_use]
pub fn bits_call() -> KernelCall<'static> {
    random_call("ditto_bits_u32_kernel".into(), vec![], 4)
}

/// `uniform(low, high)`: `(seed, offset, n, low, high, out)` with f32 bounds (`as f32`)
/// for f32 / f16 / bf16, which compute in f32 and round to the output type, and f64
/// bounds for f64, which uses two words per element. `rand` is `(0, 1)`.
pub fn uniform_call(dtype: DType, low: f64, high: f64) -> Result<KernelCall<'static>> {
    const SUPPORTED: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::F64];
    let name = kernel_name("uniform", dtype, SUPPORTED, "f32, f16, bf16, f64")?;
    Ok(if dtype == DType::F64 {
        random_call(name, vec![Arg::F64(low), Arg::F64(high)], 2)
    } else {
        let args = vec![Arg::F32(low as f32), Arg::F32(high as f32)];
        random_call(name, args, 4)
    })
}

/// `normal(mean, std)` (f32, f16, bf16): `(seed, offset, n, mean, std, out)`, Box-Muller
/// pairs, then `mean + std * z` in f32, rounded to the output type.
pub fn normal_call(dtype: DType, mean: f32, std: f32) -> Result<KernelCall<'static>> {
    const SUPPORTED: &[DType] = &[DType::F32, DType::F16, DType::BF16];
    let name = kernel_name("normal", dtype, SUPPORTED, "f32, f16, bf16")?;
    Ok(random_call(name, vec![Arg::F32(mean), Arg::F32(std)], 4))
}

/// `bernoulli(p)`: `(seed, offset, n, p, out)`, 1 where `u < p`, else 0, as float values
/// or as u8 / bool bytes.
pub fn bernoulli_call(dtype: DType, p: f32) -> Result<KernelCall<'static>> {
    const SUPPORTED: &[DType] = &[
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::U8,
        DType::Bool,
    ];
    let text = "f32, f16, bf16, f64, u8, bool";
    let name = kernel_name("bernoulli", dtype, SUPPORTED, text)?;
    Ok(random_call(name, vec![Arg::F32(p)], 4))
}

/// `randint` (i64): `(seed, offset, n, low, range, out)`, `low + below(w0, w1, range)`,
/// two words per element; `range = high - low >= 1`.
#[must_use]
pub fn randint_call(low: i64, range: u64) -> KernelCall<'static> {
    let args = vec![Arg::I64(low), Arg::U64(range)];
    random_call("ditto_randint_i64_kernel".into(), args, 2)
}

/// The whole of `out` from the call (its length is the op's `n`).
fn run(
    call: KernelCall<'_>,
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    launch: Launch,
) -> Result<()> {
    let n = out.len() as u64;
    call.launch(seed, offset, n, out, 0, launch)
}

/// Raw Philox words: element `i` of `out` (u32) becomes word `i` of the op.
pub fn bits(out: &mut CudaStorage, seed: u64, offset: u64, launch: Launch) -> Result<()> {
    kernel_name("bits", out.dtype(), &[DType::U32], "u32")?;
    run(bits_call(), out, seed, offset, launch)
}

/// [`uniform_call`] on the whole of `out`.
pub fn uniform(
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    low: f64,
    high: f64,
    launch: Launch,
) -> Result<()> {
    run(
        uniform_call(out.dtype(), low, high)?,
        out,
        seed,
        offset,
        launch,
    )
}

/// [`normal_call`] on the whole of `out`.
pub fn normal(
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    mean: f32,
    std: f32,
    launch: Launch,
) -> Result<()> {
    run(
        normal_call(out.dtype(), mean, std)?,
        out,
        seed,
        offset,
        launch,
    )
}

/// [`bernoulli_call`] on the whole of `out`.
pub fn bernoulli(
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    p: f32,
    launch: Launch,
) -> Result<()> {
    run(bernoulli_call(out.dtype(), p)?, out, seed, offset, launch)
}

/// [`randint_call`] on the whole of `out` (i64).
pub fn randint(
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    low: i64,
    range: u64,
    launch: Launch,
) -> Result<()> {
    kernel_name("randint", out.dtype(), &[DType::I64], "i64")?;
    run(randint_call(low, range), out, seed, offset, launch)
}
