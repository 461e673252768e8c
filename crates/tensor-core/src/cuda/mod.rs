//! Tensors on CUDA devices: a tensor's device buffer ([`CudaStorage`]), its copies to
//! and from the host, and the tensor ops' CUDA sources. The runtime under them
//! (contexts, streams, the allocator, graphs, NVRTC, the module cache, cuBLAS) is the
//! `cuda-runtime` crate, re-exported here under the names it always had, so
//! `tensor_core::cuda::device_count()` and `tensor_core::cuda::CudaGraph` still work.
//! Its errors reach users inside [`TensorError::Cuda`](crate::TensorError::Cuda).

mod copy;
mod graph;
mod storage;

pub use cuda_runtime::{
    allocator, context, default_stream, device_count, driver_version, empty_cache, get_device_name,
    guarded, is_available, is_capturing, max_memory_allocated, memory_allocated, memory_reserved,
    memory_stats, module_cache, nvrtc, refuse_during_capture, reset_peak_memory_stats, sm_count,
    synchronize, CudaError, CudaSource, MemoryStats, MIN_DRIVER_VERSION,
};
pub use graph::CudaGraph;
pub use storage::CudaStorage;

pub(crate) use cuda_runtime::driver_error;

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

/// The block-per-row kernels of layer norm and the causal softmax (`cuda/row_ops.cu`), a
/// module of their own: they synchronise their blocks.
pub static ROW_OPS: CudaSource = CudaSource {
    file_name: "ditto_row_ops.cu",
    text: crate::cuda_source::row_ops_translation_unit,
};

/// Every `extern "C" __global__` kernel in `cuda/row_ops.cu`.
pub const ROW_OPS_KERNELS: [&str; 8] = [
    "ditto_layer_norm_f32",
    "ditto_layer_norm_backward_f32",
    "ditto_causal_softmax_f32",
    "ditto_causal_softmax_backward_f32",
    "ditto_layer_norm_f64",
    "ditto_layer_norm_backward_f64",
    "ditto_causal_softmax_f64",
    "ditto_causal_softmax_backward_f64",
];

/// Every `extern "C" __global__` kernel in `cuda/tensor_ops.cu`.
pub const TENSOR_OPS_KERNELS: [&str; 61] = [
    "ditto_gather_8",
    "ditto_gather_16",
    "ditto_gather_32",
    "ditto_gather_64",
    "ditto_scatter_8",
    "ditto_scatter_16",
    "ditto_scatter_32",
    "ditto_scatter_64",
    "ditto_index_select_8",
    "ditto_index_select_16",
    "ditto_index_select_32",
    "ditto_index_select_64",
    "ditto_gather_f32_to_bf16",
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
    "ditto_layer_norm_param_partials_f32",
    "ditto_layer_norm_param_finish_f32",
    "ditto_adamw_f32",
    "ditto_gelu_tanh_f64",
    "ditto_gelu_tanh_backward_f64",
    "ditto_layer_norm_param_partials_f64",
    "ditto_layer_norm_param_finish_f64",
    "ditto_adamw_f64",
    "ditto_clip_coefficients_f32",
    "ditto_clip_coefficients_f64",
    "ditto_adamw_many_f32",
    "ditto_adamw_many_f64",
];
