//! CUDA support: the per-device context registry, device buffers, and run-time kernel
//! compilation (NVRTC and a per-device module cache) shared with the `kernels` crate.
//!
//! Built with cudarc's `dynamic-loading`, so this compiles on machines with no CUDA and
//! looks for the driver only at run time. cudarc panics when a CUDA library is missing;
//! every entry point here first checks that the driver library loads and otherwise
//! returns [`crate::TensorError::CudaUnavailable`] with the
//! reason "no CUDA driver found". Nothing in this module panics without a GPU.

pub mod allocator;
mod capture_state;
mod copy;
pub mod graph;
pub mod module_cache;
pub mod nvrtc;
mod registry;
mod staging;
mod storage;

pub use allocator::{
    empty_cache, max_memory_allocated, memory_allocated, memory_reserved, memory_stats,
    reset_peak_memory_stats, MemoryStats,
};
pub use graph::{is_capturing, CudaGraph};
pub use module_cache::CudaSource;
pub use registry::{
    context, default_stream, device_count, driver_version, get_device_name, is_available, sm_count,
    synchronize, MIN_DRIVER_VERSION,
};
pub use storage::CudaStorage;

use crate::TensorError;

/// The tensor ops' translation unit: `cuda/tensor_ops.cu` with `tensor_ops.cuh` inlined
/// (see [`crate::cuda_source`]).
pub static TENSOR_OPS: CudaSource = CudaSource {
    file_name: "ditto_tensor_ops.cu",
    text: crate::cuda_source::tensor_ops_translation_unit,
};

/// The portable matmul's translation unit (`cuda/portable_matmul.cu`, docs/contract.md
/// §14), a module of its own: its one kernel synchronises its blocks.
pub static PORTABLE_MATMUL: CudaSource = CudaSource {
    file_name: "ditto_portable_matmul.cu",
    text: crate::cuda_source::portable_matmul_translation_unit,
};

/// Every `extern "C" __global__` kernel in `cuda/tensor_ops.cu`.
pub const TENSOR_OPS_KERNELS: [&str; 58] = [
    "ditto_gather_8",
    "ditto_gather_16",
    "ditto_gather_32",
    "ditto_gather_64",
    "ditto_scatter_8",
    "ditto_scatter_16",
    "ditto_scatter_32",
    "ditto_scatter_64",
    "ditto_binary_f32",
    "ditto_unary_f32",
    "ditto_relu_backward_f32",
    "ditto_axpy_f32",
    "ditto_sgd_momentum_f32",
    "ditto_block_sums_f32",
    "ditto_finish_sums_f32",
    "ditto_max_dim_f32",
    "ditto_log_softmax_f32",
    "ditto_log_softmax_portable_f32",
    "ditto_binary_f64",
    "ditto_unary_f64",
    "ditto_relu_backward_f64",
    "ditto_axpy_f64",
    "ditto_sgd_momentum_f64",
    "ditto_block_sums_f64",
    "ditto_finish_sums_f64",
    "ditto_max_dim_f64",
    "ditto_log_softmax_f64",
    "ditto_log_softmax_portable_f64",
    "ditto_index_add_atomic_f32",
    "ditto_index_add_owner_f32",
    "ditto_scatter_add_atomic_f32",
    "ditto_scatter_add_owner_f32",
    "ditto_sum_atomic_f32",
    "ditto_index_add_atomic_f64",
    "ditto_index_add_owner_f64",
    "ditto_scatter_add_atomic_f64",
    "ditto_scatter_add_owner_f64",
    "ditto_sum_atomic_f64",
    "ditto_gather_index_f32",
    "ditto_one_hot_f32",
    "ditto_gather_index_f64",
    "ditto_one_hot_f64",
    "ditto_gelu_tanh_f32",
    "ditto_gelu_tanh_backward_f32",
    "ditto_layer_norm_f32",
    "ditto_layer_norm_backward_f32",
    "ditto_layer_norm_param_grads_f32",
    "ditto_causal_softmax_f32",
    "ditto_causal_softmax_backward_f32",
    "ditto_adamw_f32",
    "ditto_gelu_tanh_f64",
    "ditto_gelu_tanh_backward_f64",
    "ditto_layer_norm_f64",
    "ditto_layer_norm_backward_f64",
    "ditto_layer_norm_param_grads_f64",
    "ditto_causal_softmax_f64",
    "ditto_causal_softmax_backward_f64",
    "ditto_adamw_f64",
];

/// Wraps a cudarc driver error with the device and the operation that failed.
pub(crate) fn driver_error(
    ordinal: usize,
    op: &'static str,
) -> impl FnOnce(cudarc::driver::DriverError) -> TensorError {
    move |e| TensorError::Cuda {
        ordinal,
        op,
        message: e.to_string(),
    }
}
