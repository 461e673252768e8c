//! Host buffers of any dtype, for the backends that move CPU tensors (threads, MPI).

use tensor_core::{Element, Tensor};

use crate::Result;

/// Runs `$body` with `$t` bound to the Rust element type of `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            tensor_core::DType::F32 => {
                type $t = f32;
                $body
            }
            tensor_core::DType::F64 => {
                type $t = f64;
                $body
            }
            tensor_core::DType::F16 => {
                type $t = tensor_core::f16;
                $body
            }
            tensor_core::DType::BF16 => {
                type $t = tensor_core::bf16;
                $body
            }
            tensor_core::DType::I64 => {
                type $t = i64;
                $body
            }
            tensor_core::DType::U32 => {
                type $t = u32;
                $body
            }
            tensor_core::DType::U8 => {
                type $t = u8;
                $body
            }
            tensor_core::DType::Bool => {
                type $t = bool;
                $body
            }
        }
    };
}
pub(crate) use with_element;

/// Runs `$body` with `$t` bound to the Rust element type of `$dtype`, a
/// [`SumDtype`](crate::engine::SumDtype): [`with_element`] for the dtypes that sum.
macro_rules! with_summable {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::engine::SumDtype::F32 => {
                type $t = f32;
                $body
            }
            $crate::engine::SumDtype::F64 => {
                type $t = f64;
                $body
            }
            $crate::engine::SumDtype::I64 => {
                type $t = i64;
                $body
            }
        }
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
