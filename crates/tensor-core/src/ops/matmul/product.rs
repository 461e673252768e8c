//! The element and the 2-D product that every CPU matmul is made of: the 2-D
//! [`Tensor::matmul`] (`ops/matmul/mod.rs`) and each entry of a batched one
//! (`ops/matmul/batched_matmul.rs`) call [`product_2d`], which picks gemm on fixed blocks
//! (`ops/matmul/gemm_blocks.rs`) or ditto's portable kernels. It lives below both callers so
//! that neither file imports the other for it, and above the gemm blocks, which take any
//! element gemm accepts and are handed only these.

use crate::portable::matmul::{Operand, PortableElement};
use crate::{Element, Result, Tensor, TensorError};

/// f32 or f64: what a CPU product needs of its element (gemm's and the portable
/// kernels' element, read from and stored into CPU storage).
pub(crate) trait ProductElement: Element + Default + PortableElement {
    /// The whole CPU buffer behind `t`, or a dtype error.
    fn slice_of(t: &Tensor) -> Result<&[Self]> {
        Self::slice(t.cpu_storage()?).ok_or(TensorError::DTypeMismatch {
            op: "matmul",
            expected: <Self as Element>::DTYPE,
            got: t.dtype(),
        })
    }
}

impl ProductElement for f32 {}
impl ProductElement for f64 {}

/// `a * b` for 2-D operands read through their strides: gemm, or ditto's portable
/// kernels under portable arithmetic. Every CPU product (2-D, and each entry of a
/// batched one) is this call.
pub(crate) fn product_2d<T: ProductElement>(
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    portable: bool,
) -> Result<Vec<T>> {
    if portable {
        crate::portable::matmul::matmul(a, b)
    } else {
        crate::ops::matmul::gemm_blocks::gemm_into(a, b)
    }
}
