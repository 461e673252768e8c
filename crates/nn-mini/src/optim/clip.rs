//! `clip_grad_norm_`: global gradient-norm clipping, PyTorch's
//! `torch.nn.utils.clip_grad_norm_` with the 2-norm.

use tensor_core::{DType, Device, Tensor};

use crate::{Module, NnError, Result};

/// Scales every gradient of `module` so that their global 2-norm is at most
/// `max_norm`, and returns the norm before clipping (PyTorch's
/// `clip_grad_norm_(parameters, max_norm)`):
///
/// ```text
/// total = sqrt(sum over parameters of sum(g^2))
/// coef  = max_norm / (total + 1e-6);  if coef < 1, every g = g * coef
/// ```
///
/// Each parameter's `sum(g^2)` is [`Tensor::sum_all`](tensor_core::Tensor::sum_all) of
/// `g * g` (the blocked f64 order, the same bits on every device), rounded to the
/// dtype; the parameters' sums are added in f64 in parameter order, and the square root
/// and `coef` are f64. A non-finite norm (an overflowing or NaN gradient) is returned
/// as it is and nothing is scaled: the caller decides (a training loop reports it).
/// Parameters without a gradient are skipped.
pub fn clip_grad_norm_(module: &mut dyn Module, max_norm: f64) -> Result<f64> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(NnError::invalid(
            "clip_grad_norm_",
            format!("max_norm must be finite and > 0, got {max_norm}"),
        ));
    }
    // Every parameter's sum of squares stays on its device until one read per dtype
    // (usually one) brings them to the host: one wait per step on a GPU, not one per
    // parameter. Widening to f64 there is exact.
    let mut squares = Vec::new();
    for param in module.parameters() {
        if let Some(g) = &param.grad {
            squares.push(g.mul(g)?.sum_all()?.reshape(&[1])?);
        }
    }
    let mut sums = vec![0.0f64; squares.len()];
    let mut dtypes: Vec<DType> = Vec::new();
    for dtype in squares.iter().map(Tensor::dtype) {
        if !dtypes.contains(&dtype) {
            dtypes.push(dtype);
        }
    }
    for dtype in dtypes {
        let (at, group): (Vec<usize>, Vec<Tensor>) = squares
            .iter()
            .enumerate()
            .filter(|(_, t)| t.dtype() == dtype)
            .map(|(i, t)| (i, t.clone()))
            .unzip();
        let values = Tensor::cat(&group, 0)?
            .to_device(Device::Cpu)?
            .to_dtype(DType::F64)?
            .to_vec::<f64>()?;
        for (i, v) in at.into_iter().zip(values) {
            sums[i] = v;
        }
    }
    let total: f64 = sums.iter().fold(0.0, |total, s| total + s);
    let norm = total.sqrt();
    if !norm.is_finite() {
        return Ok(norm);
    }
    let coef = max_norm / (norm + 1e-6);
    if coef < 1.0 {
        for param in module.parameters_mut() {
            if let Some(g) = &mut param.grad {
                g.scale_(coef)?;
            }
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use rng_gen::Generator;
    use tensor_core::{DType, Device, Tensor};

    use super::clip_grad_norm_;
    use crate::layers::Linear;
    use crate::{Module, Sequential};

    /// Two layers whose gradients are set by hand, the second in f64.
    fn model_with_grads() -> Sequential {
        let generator = Generator::new(Device::Cpu);
        generator.manual_seed(3);
        let mut model = Sequential::new()
            .push(Linear::new(3, 4, &generator).unwrap())
            .push(Linear::new(4, 2, &generator).unwrap());
        for (i, p) in model.parameters_mut().into_iter().enumerate() {
            let n = p.value.elem_count();
            let values: Vec<f64> = (0..n).map(|j| ((i * 7 + j) as f64).sin() * 3.0).collect();
            let g = Tensor::from_vec(values, p.value.dims(), Device::Cpu).unwrap();
            p.grad = Some(
                g.to_dtype(if i >= 2 { DType::F64 } else { DType::F32 })
                    .unwrap(),
            );
        }
        model
    }

    #[test]
    fn the_norm_is_the_f64_sum_of_each_parameters_rounded_sum_in_order() {
        let mut model = model_with_grads();
        // The definition, one parameter at a time (the arithmetic before the sums were
        // read together).
        let mut total = 0.0f64;
        for p in model.parameters() {
            let g = p.grad.as_ref().unwrap();
            let s = g.mul(g).unwrap().sum_all().unwrap();
            total += s.to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap();
        }
        let before: Vec<Vec<f64>> = model
            .parameters()
            .iter()
            .map(|p| {
                p.grad
                    .as_ref()
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec()
                    .unwrap()
            })
            .collect();
        let norm = clip_grad_norm_(&mut model, 1.0).unwrap();
        assert_eq!(norm.to_bits(), total.sqrt().to_bits());
        // Clipped to norm 1: every gradient scaled by the same coefficient.
        let coef = 1.0 / (norm + 1e-6);
        for (p, old) in model.parameters().iter().zip(&before) {
            let now: Vec<f64> = p
                .grad
                .as_ref()
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec()
                .unwrap();
            for (a, b) in now.iter().zip(old) {
                assert!(
                    (a - b * coef).abs() <= 1e-6 * b.abs().max(1e-3),
                    "{a} vs {}",
                    b * coef
                );
            }
        }
        assert!(clip_grad_norm_(&mut model, 0.0).is_err());
    }
}
