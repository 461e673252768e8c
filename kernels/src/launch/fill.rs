//! Launchers of the ops that fill a buffer with fresh random elements: bits, uniform,
//! normal, bernoulli, randint. Element `i` of the buffer is element `i` of the op
//! (DESIGN.md §1).

use cudarc::driver::PushKernelArg;
use tensor_core::cuda::CudaStorage;
use tensor_core::DType;

use super::{kernel_name, launch_config, launch_failed};
use crate::error::Result;
use crate::grid::Launch;
use crate::module_cache;

/// A scalar kernel parameter, pushed with its own C type.
enum Param {
    F32(f32),
    F64(f64),
    I64(i64),
    U64(u64),
}

/// The arguments every fill kernel takes: `(seed, offset, n, params..., out)`.
struct Fill<'a> {
    op: &'static str,
    out: &'a mut CudaStorage,
    seed: u64,
    offset: u64,
    params: Vec<Param>,
}

impl Fill<'_> {
    /// Queues the kernel for `out`'s dtype, with one work item per Philox block of
    /// `elements_per_block` elements (4 with one word per element, 2 with two).
    fn launch(
        self,
        supported: &'static [DType],
        text: &'static str,
        elements_per_block: u64,
        launch: Launch,
    ) -> Result<()> {
        let name = kernel_name(self.op, self.out.dtype(), supported, text)?;
        let n = self.out.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let ordinal = self.out.ordinal();
        let func = module_cache::function(ordinal, &name)?;
        let cfg = launch_config(ordinal, n.div_ceil(elements_per_block), launch)?;
        let stream = self.out.stream()?;
        let mut args = stream.launch_builder(&func);
        args.arg(&self.seed).arg(&self.offset).arg(&n);
        for p in &self.params {
            match p {
                Param::F32(v) => args.arg(v),
                Param::F64(v) => args.arg(v),
                Param::I64(v) => args.arg(v),
                Param::U64(v) => args.arg(v),
            };
        }
        args.arg(self.out.bytes_mut());
        // SAFETY: the argument list matches the kernel's signature in random.cu
        // (u64 seed, u64 offset, u64 n, params..., T* out) for every op here, and `out`
        // holds n elements of the kernel's element type, which is all the kernel writes.
        unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &name))?;
        Ok(())
    }
}

/// Raw Philox words: element `i` of `out` (u32) becomes word `i` of the op.
pub fn bits(out: &mut CudaStorage, seed: u64, offset: u64, launch: Launch) -> Result<()> {
    let fill = Fill {
        op: "bits",
        out,
        seed,
        offset,
        params: vec![],
    };
    fill.launch(&[DType::U32], "u32", 4, launch)
}

/// `uniform(low, high)` into `out`: `low + (high - low) * u`, one multiply then one
/// add. f32 / f16 / bf16 compute in f32 (bounds `as f32`) and round to the output type;
/// f64 uses two words per element and computes in f64. `rand` is `(0, 1)`.
pub fn uniform(
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    low: f64,
    high: f64,
    launch: Launch,
) -> Result<()> {
    const SUPPORTED: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::F64];
    let (params, per_block) = if out.dtype() == DType::F64 {
        (vec![Param::F64(low), Param::F64(high)], 2)
    } else {
        (vec![Param::F32(low as f32), Param::F32(high as f32)], 4)
    };
    let fill = Fill {
        op: "uniform",
        out,
        seed,
        offset,
        params,
    };
    fill.launch(SUPPORTED, "f32, f16, bf16, f64", per_block, launch)
}

/// `normal(mean, std)` into `out` (f32, f16 or bf16): Box-Muller pairs, then
/// `mean + std * z` in f32, rounded to the output type.
pub fn normal(
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    mean: f32,
    std: f32,
    launch: Launch,
) -> Result<()> {
    const SUPPORTED: &[DType] = &[DType::F32, DType::F16, DType::BF16];
    let params = vec![Param::F32(mean), Param::F32(std)];
    let fill = Fill {
        op: "normal",
        out,
        seed,
        offset,
        params,
    };
    fill.launch(SUPPORTED, "f32, f16, bf16", 4, launch)
}

/// `bernoulli(p)` into `out`: 1 where `u < p`, else 0, as float values or as u8 / bool
/// bytes.
pub fn bernoulli(
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    p: f32,
    launch: Launch,
) -> Result<()> {
    const SUPPORTED: &[DType] = &[
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::U8,
        DType::Bool,
    ];
    let fill = Fill {
        op: "bernoulli",
        out,
        seed,
        offset,
        params: vec![Param::F32(p)],
    };
    fill.launch(SUPPORTED, "f32, f16, bf16, f64, u8, bool", 4, launch)
}

/// `randint` into `out` (i64): `low + below(w0, w1, range)`, two words per element;
/// `range = high - low >= 1`.
pub fn randint(
    out: &mut CudaStorage,
    seed: u64,
    offset: u64,
    low: i64,
    range: u64,
    launch: Launch,
) -> Result<()> {
    let params = vec![Param::I64(low), Param::U64(range)];
    let fill = Fill {
        op: "randint",
        out,
        seed,
        offset,
        params,
    };
    fill.launch(&[DType::I64], "i64", 2, launch)
}
