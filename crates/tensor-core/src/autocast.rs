//! Autocast: bf16 matrix products with f32 accumulation, PyTorch's
//! `torch.autocast(dtype=torch.bfloat16)` for ditto's f32 training path.
//!
//! # What it changes
//! Inside an [`autocast`] scope, every [`Tensor::matmul`] of two f32 tensors (2-D and
//! batched) multiplies its operands **rounded to bf16** (round to nearest, ties to
//! even) and sums the products in f32, returning f32. Nothing else changes: layer norm,
//! softmax, losses, the optimizer and the weights stay f32, as autocast keeps them f32
//! (ditto also keeps the elementwise ops f32, where autocast would run some in bf16).
//!
//! # Why rounding defines it
//! Two bf16 values have 8-bit significands, so their product has at most 16 significant
//! bits and is exact in f32. A product of bf16-rounded f32 tensors summed in f32 is
//! therefore exactly what a bf16 GEMM with f32 accumulation computes, given the same
//! order of additions. So the CPU runs it as a rounding pass and its ordinary f32 gemm;
//! portable arithmetic (docs/contract.md §14) runs its one defined order on the rounded
//! operands on every device, and a bf16 run is resumable and auditable on a CPU bit for
//! bit. On CUDA in default arithmetic the operands are narrowed to bf16 tensors on the
//! device and multiplied by cuBLAS's bf16 GEMM into f32 (`cublasGemmEx`, f32 compute):
//! half the bytes read, and the GPU's bf16 tensor cores; the order of additions is then
//! cuBLAS's, as for f32.
//!
//! # Why thread-local
//! As in PyTorch, the scope belongs to the thread that entered it: ranks of the threads
//! backend and tests running side by side each have their own. The model enters it
//! around its forward and backward (nn-mini's `GptConfig::precision`), so training,
//! evaluation and sampling all see the precision the run was configured with, and a
//! checkpoint records it.

use std::cell::Cell;

use crate::{DType, Result, Tensor, TensorError};

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

/// The dtype matmuls run in on this thread: `Some(DType::BF16)` inside an [`autocast`]
/// scope, `None` outside one or inside [`autocast_disabled`].
#[must_use]
pub fn get_autocast_dtype() -> Option<DType> {
    AUTOCAST.with(Cell::get)
}

/// Restores the previous autocast state of its thread when dropped.
#[must_use = "autocast ends when the guard is dropped"]
#[derive(Debug)]
pub struct AutocastGuard {
    previous: Option<DType>,
    /// Bound to the thread whose state it restores.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        AUTOCAST.with(|c| c.set(self.previous));
    }
}

fn enter(state: Option<DType>) -> AutocastGuard {
    let previous = AUTOCAST.with(|c| c.replace(state));
    AutocastGuard {
        previous,
        _not_send: std::marker::PhantomData,
    }
}

/// Enters an autocast scope on this thread until the guard drops. `dtype` is
/// `DType::BF16`, or `DType::F32` for a scope that runs in plain f32 (what a
/// configuration of f32 precision enters). f16 would need loss scaling, which ditto does
/// not have.
pub fn autocast(dtype: DType) -> Result<AutocastGuard> {
    match dtype {
        DType::BF16 => Ok(enter(Some(DType::BF16))),
        DType::F32 => Ok(enter(None)),
        other => Err(TensorError::UnsupportedDType {
            op: "autocast",
            dtype: other,
            supported: "bf16 (or f32: no autocast)",
        }),
    }
}

/// Suspends autocast on this thread until the guard drops: for ops that round their
/// operands themselves (the attention op under bf16).
pub fn autocast_disabled() -> AutocastGuard {
    enter(None)
}

/// `t` as a matmul inside this thread's autocast scope would read it: rounded to bf16
/// in a bf16 scope when it is f32, else `t` itself (a shared clone). For ops that
/// multiply their own operands with autocast suspended (attention).
pub fn autocast_operand(t: &Tensor) -> Result<Tensor> {
    if get_autocast_dtype() == Some(DType::BF16) && t.dtype() == DType::F32 {
        t.round_to_bf16()
    } else {
        Ok(t.clone())
    }
}

/// True when a matmul of `lhs` and `rhs` is a bf16 product: inside a bf16 scope, both
/// f32.
pub(crate) fn is_bf16_product(lhs: &Tensor, rhs: &Tensor) -> bool {
    get_autocast_dtype() == Some(DType::BF16)
        && lhs.dtype() == DType::F32
        && rhs.dtype() == DType::F32
}

impl Tensor {
    /// Every element rounded to the nearest bf16 (ties to even, NaN stays NaN, overflow
    /// to infinity), kept in f32: `x.to(torch.bfloat16).float()` in one pass and on the
    /// device. f32 only.
    #[track_caller]
    pub fn round_to_bf16(&self) -> Result<Tensor> {
        audited!("round_to_bf16", [self], {
            const OP: &str = "round_to_bf16";
            if self.dtype() != DType::F32 {
                return Err(TensorError::UnsupportedDType {
                    op: OP,
                    dtype: self.dtype(),
                    supported: "f32",
                });
            }
            crate::ops::elementwise::unary::round_to_bf16(self)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{bf16, Device};

    #[test]
    fn rounding_is_halfs_round_to_nearest_even() {
        let ties = [
            1.0 + 2f32.powi(-8),                  // tie, even below: 1
            1.0 + 3.0 * 2f32.powi(-8),            // tie, even above
            1.0 + 2f32.powi(-8) + 2f32.powi(-20), // just above a tie: up
            -3.0e38,                              // stays finite
            f32::MAX,                             // overflows to infinity
            f32::MIN_POSITIVE / 3.0,              // subnormal
        ];
        let t = Tensor::from_vec(ties.to_vec(), &[ties.len()], Device::Cpu).unwrap();
        let got = t.round_to_bf16().unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f32> = ties.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
        assert_eq!(got, want);
        assert_eq!(got[0], 1.0);
        assert_eq!(got[1], 1.0 + 4.0 * 2f32.powi(-8));
        assert_eq!(got[4], f32::INFINITY);
        let nan = Tensor::from_vec(vec![f32::NAN], &[1], Device::Cpu).unwrap();
        assert!(nan.round_to_bf16().unwrap().to_vec::<f32>().unwrap()[0].is_nan());
        let f64s = Tensor::from_vec(vec![1.0f64], &[1], Device::Cpu).unwrap();
        assert!(matches!(
            f64s.round_to_bf16(),
            Err(TensorError::UnsupportedDType { .. })
        ));
    }

    #[test]
    fn a_bf16_scope_multiplies_rounded_operands_and_ends_with_its_guard() {
        let a: Vec<f32> = (0..12).map(|i| 1.0 + i as f32 * 0.001_234_5).collect();
        let b: Vec<f32> = (0..12).map(|i| 0.3 - i as f32 * 0.000_987_6).collect();
        let a = Tensor::from_vec(a, &[3, 4], Device::Cpu).unwrap();
        let b = Tensor::from_vec(b, &[4, 3], Device::Cpu).unwrap();
        let plain = a.matmul(&b).unwrap().to_vec::<f32>().unwrap();
        let rounded = a
            .round_to_bf16()
            .unwrap()
            .matmul(&b.round_to_bf16().unwrap())
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_ne!(plain, rounded, "the operands have bits below bf16's");
        {
            let _scope = autocast(DType::BF16).unwrap();
            assert_eq!(get_autocast_dtype(), Some(DType::BF16));
            assert_eq!(a.matmul(&b).unwrap().to_vec::<f32>().unwrap(), rounded);
            {
                let _off = autocast_disabled();
                assert_eq!(a.matmul(&b).unwrap().to_vec::<f32>().unwrap(), plain);
            }
            // Batched products too.
            let a3 = a.reshape(&[1, 3, 4]).unwrap();
            let b3 = b.reshape(&[1, 4, 3]).unwrap();
            assert_eq!(a3.matmul(&b3).unwrap().to_vec::<f32>().unwrap(), rounded);
        }
        assert_eq!(get_autocast_dtype(), None);
        assert_eq!(a.matmul(&b).unwrap().to_vec::<f32>().unwrap(), plain);
        // Another thread has its own state.
        let _scope = autocast(DType::BF16).unwrap();
        std::thread::spawn(|| assert_eq!(get_autocast_dtype(), None))
            .join()
            .unwrap();
        assert!(autocast(DType::F16).is_err());
    }
}
