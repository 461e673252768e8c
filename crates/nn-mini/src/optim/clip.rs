//! `clip_grad_norm_`: global gradient-norm clipping, PyTorch's
//! `torch.nn.utils.clip_grad_norm_` with the 2-norm.

use tensor_core::{DType, Device, Tensor};

use crate::{Module, NnError, Result};

/// Scales every gradient of `module` so that their global 2-norm is at most
/// `max_norm`, and returns the norm before clipping as a one-element tensor on the
/// gradients' device, in their dtype (PyTorch's `clip_grad_norm_(parameters, max_norm)`,
/// which also returns a tensor):
///
/// ```text
/// total = sqrt(sum over parameters of sum(g^2))
/// coef  = max_norm / (total + 1e-6);  if coef < 1, every g = g * coef
/// ```
///
/// Each parameter's `sum(g^2)` is [`Tensor::sum_all`](tensor_core::Tensor::sum_all) of
/// `g * g` (the blocked f64 order, the same bits on every device), rounded to the
/// dtype; the rest is [`Tensor::clip_coefficients`]: the sums added in f64 in parameter
/// order, the square root and `coef` in f64. A non-finite norm is returned as it is and
/// nothing is scaled: the caller decides (a training loop reports it).
///
/// On a GPU nothing waits for the device: the norm and the factor are computed there and
/// every gradient is multiplied by the factor there (by exactly 1 when nothing is
/// clipped, which changes no finite value). Reading the returned norm is the caller's
/// one wait, when it wants it. Gradients of mixed dtypes or devices are summed on the
/// host instead. Parameters without a gradient are skipped; without any, the norm is 0.
pub fn clip_grad_norm_(module: &mut dyn Module, max_norm: f64) -> Result<Tensor> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(NnError::invalid(
            "clip_grad_norm_",
            format!("max_norm must be finite and > 0, got {max_norm}"),
        ));
    }
    let mut squares = Vec::new();
    for param in module.parameters() {
        if let Some(g) = &param.grad {
            squares.push(g.mul(g)?.sum_all()?.reshape(&[1])?);
        }
    }
    let Some(first) = squares.first() else {
        return Ok(Tensor::zeros(&[1], DType::F32, Device::Cpu)?);
    };
    let alike = squares
        .iter()
        .all(|s| s.dtype() == first.dtype() && s.device() == first.device());
    let sums = if alike {
        Tensor::cat(&squares, 0)?
    } else {
        // Widening to f64 on the host is exact.
        let mut host = Vec::with_capacity(squares.len());
        for s in &squares {
            host.push(s.to_device(Device::Cpu)?.to_dtype(DType::F64)?);
        }
        Tensor::cat(&host, 0)?
    };
    let coefficients = sums.clip_coefficients(max_norm)?;
    let factor = coefficients.narrow(0, 1, 1)?;
    if factor.device().is_cuda() {
        for param in module.parameters_mut() {
            if let Some(g) = &mut param.grad {
                *g = g.mul(&factor)?;
            }
        }
    } else {
        let factor = factor.to_dtype(DType::F64)?.to_vec::<f64>()?[0];
        if factor != 1.0 {
            for param in module.parameters_mut() {
                if let Some(g) = &mut param.grad {
                    g.scale_(factor)?;
                }
            }
        }
    }
    Ok(coefficients.narrow(0, 0, 1)?)
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
        // Mixed dtypes: summed on the host in f64, so the norm is an f64.
        let norm = norm.to_scalar::<f64>().unwrap();
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
