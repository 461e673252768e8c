//! What the training ops' CUDA launchers share: kernel lookup, launch grids, dense
//! operands and outputs, and strided views (`layout`). The launchers themselves live
//! beside their CPU code, in each family's `cuda.rs` (`ops/elementwise/cuda.rs`, ...);
//! their kernels are in `cuda/tensor_ops.cu`.
//!
//! Each public op in [`crate::ops`] checks its arguments' device first and comes here for
//! CUDA tensors. The kernels give every output element to exactly one thread and sum in
//! the order of the [`ops`](crate::ops) docs, so sums, means, elementwise arithmetic and
//! `relu` are bit-identical to the CPU; `exp` / `log` / `pow` use CUDA's libdevice (the
//! same on every GPU, not bit-equal to the CPU's libm). `matmul` follows cuBLAS, whose
//! results are reproducible run to run on one GPU model but may differ between models.
//!
//! Operands may be any strided view: dense inputs are read where they lie, other views
//! are first gathered into a dense buffer by the `ditto_gather_*` kernels. Work is
//! queued on the device's default stream and ordered after all earlier ditto work.

mod layout;

// Every family's launchers, in one list: the CPU side of each op calls them here when
// its tensor is on a GPU.
pub(crate) use crate::ops::accumulate::cuda::{index_add, scatter_add};
pub(crate) use crate::ops::attention::cuda::{causal_softmax, causal_softmax_backward};
pub(crate) use crate::ops::class_index::cuda::{gather_index, one_hot};
pub(crate) use crate::ops::elementwise::cuda::{axpy_, binary, gelu_tanh, relu_backward, unary};
pub(crate) use crate::ops::matmul::batched_cuda::batched_matmul;
pub(crate) use crate::ops::matmul::cuda::{matmul, matmul_bf16};
pub(crate) use crate::ops::normalization::cuda::{layer_norm, layer_norm_backward};
pub(crate) use crate::ops::optimizers::cuda::{adamw_step_, sgd_momentum_step_};
pub(crate) use crate::ops::reduce::cuda::{log_softmax, max_dim, sum_dim, SumKind};
pub(crate) use layout::{cat, contiguous, index_select, index_select_from, to_bf16, write_into};

use cuda_runtime::CudaError;
use cudarc::driver::{CudaFunction, CudaStream, CudaView, LaunchArgs, LaunchConfig};

use crate::cuda::{module_cache, CudaStorage, ROW_OPS, TENSOR_OPS};
use crate::{Device, Result, Storage, Tensor, TensorError};

/// The kernel `name` on device `ordinal`, compiling the tensor ops on first use.
pub(crate) fn kernel(ordinal: usize, name: &str) -> Result<CudaFunction> {
    Ok(module_cache::function(ordinal, &TENSOR_OPS, name)?)
}

/// The [`Launch::Auto`](crate::grid::Launch) grid for `items` independent work items on
/// device `ordinal`, or the one a test forced (grid-stride loops do the rest, so the
/// geometry never changes a value, except in the atomic fast paths' arrival order).
pub(crate) fn launch_config(ordinal: usize, items: u64) -> Result<LaunchConfig> {
    let grid = crate::grid::tensor_ops_grid(items, crate::cuda::sm_count(ordinal)?);
    Ok(LaunchConfig {
        grid_dim: (grid.blocks, 1, 1),
        block_dim: (grid.threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// A tensor-ops kernel looked up and given its grid, ready for its arguments. Every
/// launch here takes the same steps around its arguments (find the compiled function,
/// size the grid for its work items, name the kernel in a launch error); this type takes
/// them once, so an op states only the kernel's name, its work and its arguments.
pub(crate) struct TensorKernel {
    name: String,
    ordinal: usize,
    func: CudaFunction,
    config: LaunchConfig,
}

impl TensorKernel {
    /// The kernel `name` on device `ordinal`, with the grid for `items` work items.
    pub(crate) fn new(ordinal: usize, name: String, items: u64) -> Result<Self> {
        let func = kernel(ordinal, &name)?;
        let config = launch_config(ordinal, items)?;
        Ok(TensorKernel {
            name,
            ordinal,
            func,
            config,
        })
    }

    /// The block-per-row kernel `name` (`cuda/row_ops.cu`) on device `ordinal`, with the
    /// grid for `rows` rows ([`crate::grid::tensor_ops_row_grid`]).
    pub(crate) fn per_row(ordinal: usize, name: String, rows: u64) -> Result<Self> {
        let func = module_cache::function(ordinal, &ROW_OPS, &name)?;
        let grid = crate::grid::tensor_ops_row_grid(rows, crate::cuda::sm_count(ordinal)?);
        let config = LaunchConfig {
            grid_dim: (grid.blocks, 1, 1),
            block_dim: (grid.threads, 1, 1),
            shared_mem_bytes: 0,
        };
        Ok(TensorKernel {
            name,
            ordinal,
            func,
            config,
        })
    }

    /// The same kernel with `rows` rows of blocks (`gridDim.y`): a launch whose block row
    /// picks one item of a list (the multi-tensor AdamW's parameters).
    pub(crate) fn with_rows(mut self, rows: u32) -> Self {
        self.config.grid_dim.1 = rows;
        self
    }

    /// An empty argument list for this kernel, queued on `stream`.
    pub(crate) fn args<'a>(&'a self, stream: &'a CudaStream) -> LaunchArgs<'a> {
        stream.launch_builder(&self.func)
    }

    /// Launches the kernel with `args` (made by [`TensorKernel::args`]).
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in order and type, and every buffer
    /// must hold what the kernel reads and writes for the work items it was sized for.
    pub(crate) unsafe fn launch(&self, mut args: LaunchArgs<'_>) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { args.launch(self.config) }
            .map(drop)
            .map_err(launch_failed(self.ordinal, &self.name))
    }
}

/// Maps a failed kernel launch to a `Cuda` error naming the kernel.
pub(crate) fn launch_failed(
    ordinal: usize,
    kernel: &str,
) -> impl FnOnce(cudarc::driver::DriverError) -> TensorError + '_ {
    move |e| {
        CudaError::Driver {
            ordinal,
            op: "tensor kernel launch",
            message: format!("{kernel}: {e}"),
        }
        .into()
    }
}

/// `values` as a device array of `u64` (the kernels' `const ditto_u64*`).
pub(crate) fn upload_u64(ordinal: usize, values: &[usize]) -> Result<CudaStorage> {
    let words = values.iter().map(|&v| v as i64).collect();
    CudaStorage::from_cpu(&crate::CpuStorage::I64(words), ordinal)
}

/// The CUDA storage and device ordinal behind a tensor on a GPU.
pub(crate) fn storage_of(t: &Tensor) -> Result<(&CudaStorage, usize)> {
    match t.storage() {
        Storage::Cuda(s) => Ok((s, s.ordinal())),
        Storage::Cpu(_) => Err(TensorError::DeviceMismatch {
            op: "cuda op",
            lhs: Device::Cuda(0),
            rhs: Device::Cpu,
        }),
    }
}

/// The bytes of a dense (contiguous) tensor's elements, from its storage offset on.
pub(crate) fn dense_view(t: &Tensor) -> Result<CudaView<'_, u8>> {
    debug_assert!(t.is_contiguous());
    let (s, _) = storage_of(t)?;
    let start = t.storage_offset() * t.dtype().size_in_bytes();
    Ok(s.bytes().slice(start..))
}

/// `t` itself when it is contiguous, else a dense copy made on the device.
pub(crate) fn dense(t: &Tensor) -> Result<Tensor> {
    if t.is_contiguous() {
        Ok(t.clone())
    } else {
        contiguous(t)
    }
}

/// A new zeroed contiguous tensor of `dims` on device `ordinal`.
pub(crate) fn empty(dims: &[usize], dtype: crate::DType, ordinal: usize) -> Result<Tensor> {
    crate::transfer::zeros_on(dims, dtype, ordinal)
}

/// A new contiguous tensor of `dims` on device `ordinal` with unspecified contents, for
/// an output the kernel that follows writes completely (every output element belongs to
/// one thread, see the module docs): no memset per op.
pub(crate) fn uninit(dims: &[usize], dtype: crate::DType, ordinal: usize) -> Result<Tensor> {
    let shape = crate::Shape::new(dims)?;
    let storage = CudaStorage::alloc_uninit(ordinal, dtype, shape.elem_count())?;
    Tensor::from_storage(Storage::Cuda(storage), dims)
}

/// The mutable CUDA storage of a fresh output made by [`empty`].
pub(crate) fn output_storage(t: &mut Tensor) -> Result<&mut CudaStorage> {
    match t.storage_mut()? {
        Storage::Cuda(s) => Ok(s),
        Storage::Cpu(_) => Err(TensorError::DeviceMismatch {
            op: "cuda op output",
            lhs: Device::Cuda(0),
            rhs: Device::Cpu,
        }),
    }
}
