//! `Sgd` against an independent scalar implementation of `torch.optim.SGD`'s rule.

use crate::support;

use nn_mini::{NnError, Parameter, Sgd, SgdConfig};
use support::ParamsOnly;
use tensor_core::{Device, Tensor};

/// `torch.optim.SGD.step` for one f64 parameter vector, written out element by element
/// in the same order of operations (each `a + b * c` is a multiply then an add).
struct Reference {
    config: SgdConfig,
    buf: Option<Vec<f64>>,
}

impl Reference {
    fn step(&mut self, p: &mut [f64], g: &[f64]) {
        let c = self.config;
        let mut d_p: Vec<f64> = g
            .iter()
            .zip(p.iter())
            .map(|(g, p)| {
                if c.weight_decay != 0.0 {
                    g + c.weight_decay * p
                } else {
                    *g
                }
            })
            .collect();
        if c.momentum != 0.0 {
            let buf = match self.buf.take() {
                None => d_p.clone(),
                Some(b) => b
                    .iter()
                    .zip(&d_p)
                    .map(|(b, d)| b * c.momentum + (1.0 - c.dampening) * d)
                    .collect(),
            };
            d_p = if c.nesterov {
                d_p.iter()
                    .zip(&buf)
                    .map(|(d, b)| d + c.momentum * b)
                    .collect()
            } else {
                buf.clone()
            };
            self.buf = Some(buf);
        }
        for (p, d) in p.iter_mut().zip(&d_p) {
            *p += -c.lr * d;
        }
    }
}

fn gradient(step: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((step * 31 + i * 17) % 13) as f64 / 7.0 - 0.9)
        .collect()
}

#[test]
fn matches_the_pytorch_rule_for_every_option() {
    let configs = [
        SgdConfig::new(0.1),
        SgdConfig::new(0.05).momentum(0.9),
        SgdConfig::new(0.05).momentum(0.9).dampening(0.3),
        SgdConfig::new(0.05).weight_decay(0.01),
        SgdConfig::new(0.05).momentum(0.8).nesterov(true),
        SgdConfig::new(0.02)
            .momentum(0.9)
            .weight_decay(1e-3)
            .nesterov(true),
    ];
    for config in configs {
        let init: Vec<f64> = (0..6).map(|i| i as f64 * 0.25 - 0.6).collect();
        let mut model = ParamsOnly(vec![Parameter::new(
            "w",
            Tensor::from_vec(init.clone(), &[2, 3], Device::Cpu).unwrap(),
        )]);
        let mut sgd = Sgd::new(config).unwrap();
        let mut reference = Reference { config, buf: None };
        let mut expected = init;
        for step in 0..5 {
            let g = gradient(step, 6);
            model.0[0].grad = Some(Tensor::from_vec(g.clone(), &[2, 3], Device::Cpu).unwrap());
            sgd.step(&mut model).unwrap();
            reference.step(&mut expected, &g);
            let got = model.0[0].value.to_vec::<f64>().unwrap();
            assert_eq!(got, expected, "{config:?} step {step}");
        }
        assert_eq!(
            sgd.momentum_buffers().len(),
            usize::from(config.momentum != 0.0)
        );
    }
}

#[test]
fn parameters_without_gradients_are_skipped() {
    let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu).unwrap();
    let mut model = ParamsOnly(vec![
        Parameter::new("a", w.clone()),
        Parameter::new("b", w.clone()),
    ]);
    model.0[0].grad = Some(Tensor::ones(&[2], tensor_core::DType::F32, Device::Cpu).unwrap());
    let mut sgd = Sgd::new(SgdConfig::new(0.5).momentum(0.9)).unwrap();
    sgd.step(&mut model).unwrap();
    assert_eq!(model.0[0].value.to_vec::<f32>().unwrap(), vec![0.5, 1.5]);
    assert_eq!(model.0[1].value.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    assert_eq!(sgd.momentum_buffers().keys().collect::<Vec<_>>(), ["a"]);
    // The update did not leak into the tensor the parameter was built from.
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
}

#[test]
fn rejects_what_pytorch_rejects() {
    for bad in [
        SgdConfig::new(-0.1),
        SgdConfig::new(f64::NAN),
        SgdConfig::new(0.1).momentum(-0.5),
        SgdConfig::new(0.1).weight_decay(-1.0),
        SgdConfig::new(0.1).nesterov(true),
        SgdConfig::new(0.1)
            .momentum(0.9)
            .dampening(0.1)
            .nesterov(true),
    ] {
        assert!(
            matches!(Sgd::new(bad), Err(NnError::InvalidArgument { .. })),
            "{bad:?}"
        );
    }
}
