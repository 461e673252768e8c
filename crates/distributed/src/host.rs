//! Host buffers of any dtype, for the backends that move CPU tensors (threads, MPI,
//! Gloo).

use tensor_core::{Element, Tensor};

use crate::Result;

/// The `match` behind `with_element!` and `with_summable!`: for each listed variant of
/// the enum `$enum`, an arm running `$body` with the type alias `$t` bound to its
/// Rust type (tensor-core's internal `match_dtype!`, for the dtypes moved here).
macro_rules! match_type {
    ($dtype:expr, $t:ident => $body:expr, $enum:ty [$($variant:ident => $ty:ty),+ $(,)?]) => {{
        type MatchTypeEnum = $enum;
        match $dtype {
            $(
                MatchTypeEnum::$variant => {
                    type $t = $ty;
                    $body
                }
            )+
        }
    }};
}
pub(crate) use match_type;

/// Runs `$body` with `$t` bound to the Rust element type of `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $t:ident => $body:expr) => {
        $crate::host::match_type!($dtype, $t => $body, tensor_core::DType [
            F32 => f32,
            F64 => f64,
            F16 => tensor_core::f16,
            BF16 => tensor_core::bf16,
            I64 => i64,
            U32 => u32,
            U8 => u8,
            Bool => bool,
        ])
    };
}
pub(crate) use with_element;

/// Runs `$body` with `$t` bound to the Rust element type of `$dtype`, a
/// [`SumDtype`](crate::engine::SumDtype): [`with_element`] for the dtypes that sum.
macro_rules! with_summable {
    ($dtype:expr, $t:ident => $body:expr) => {
        $crate::host::match_type!($dtype, $t => $body, $crate::engine::SumDtype [
            F32 => f32,
            F64 => f64,
            I64 => i64,
        ])
    };
}
pub(crate) use with_summable;

/// The element types `all_reduce` sums, with the addition it uses (wrapping for
/// integers, so an overflow never panics).
pub(crate) trait Summable: Element {
    /// `a + b`.
    fn sum(a: Self, b: Self) -> Self;
}

impl Summable for f32 {
    fn sum(a: Self, b: Self) -> Self {
        a + b
    }
}

impl Summable for f64 {
    fn sum(a: Self, b: Self) -> Self {
        a + b
    }
}

impl Summable for i64 {
    fn sum(a: Self, b: Self) -> Self {
        a.wrapping_add(b)
    }
}

/// `acc[i] = acc[i] + x[i]`.
pub(crate) fn add_assign<T: Summable>(acc: &mut [T], x: &[T]) {
    for (a, &b) in acc.iter_mut().zip(x) {
        *a = T::sum(*a, b);
    }
}

/// A tensor with `values` and `tensor`'s dims (the result of a collective replacing the
/// caller's value).
pub(crate) fn like<T: Element>(tensor: &Tensor, values: Vec<T>) -> Result<Tensor> {
    Ok(Tensor::from_vec(values, tensor.dims(), tensor.device())?)
}

/// Plain-old-data view of the element types MPI and Gloo move as bytes (`f16`, `bf16`
/// and `bool` have no MPI datatype of their own).
#[cfg(any(feature = "mpi", feature = "gloo"))]
pub(crate) trait AsBytes: Element {
    /// The elements' bytes.
    fn bytes(values: &[Self]) -> &[u8];
    /// Elements from bytes written by [`bytes`](Self::bytes) on another rank.
    fn from_bytes(bytes: &[u8]) -> Vec<Self>;
}

#[cfg(any(feature = "mpi", feature = "gloo"))]
macro_rules! pod_as_bytes {
    ($($t:ty),*) => {$(
        impl AsBytes for $t {
            fn bytes(values: &[Self]) -> &[u8] {
                bytemuck::cast_slice(values)
            }
            fn from_bytes(bytes: &[u8]) -> Vec<Self> {
                bytemuck::pod_collect_to_vec(bytes)
            }
        }
    )*};
}
#[cfg(any(feature = "mpi", feature = "gloo"))]
pod_as_bytes!(f32, f64, tensor_core::f16, tensor_core::bf16, i64, u32, u8);

#[cfg(any(feature = "mpi", feature = "gloo"))]
impl AsBytes for bool {
    fn bytes(values: &[Self]) -> &[u8] {
        bytemuck::cast_slice(values)
    }
    fn from_bytes(bytes: &[u8]) -> Vec<Self> {
        // Any byte a peer sends is read as a valid bool (non-zero is true).
        bytes.iter().map(|&b| b != 0).collect()
    }
}
