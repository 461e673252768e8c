//! One training step of the demo's 64-256-256-10 MLP (dropout 0.1, SGD lr 0.05 momentum
//! 0.9, batch 128) on one thread. `benches/compare_torch_train.py` times the same step
//! in PyTorch; results are in `benches/RESULTS.md`.
//!
//! * `train_step/model_only`: a fixed batch: zero_grad, forward (dropout on),
//!   cross-entropy, backward, SGD step. The same work as the PyTorch script.
//! * `train_step/with_loader`: `Trainer::step`, which also draws the batch from the data
//!   loader (shuffled order, per-sample augmentation, stacking) on the calling thread.
//!
//! Run: `cargo bench --bench train_step` (the bench makes rayon's global pool one thread;
//! setting `RAYON_NUM_THREADS=1` as well changes nothing).

use criterion::{criterion_group, criterion_main, Criterion};
use nn_mini::train::{TrainConfig, Trainer};
use nn_mini::{cross_entropy, Dropout, Linear, Module, ReLU, Sequential, Sgd, SgdConfig};
use rng_gen::{Generator, Key};
use tensor_core::{DType, Device};

fn mlp(init: &Generator, dropout: &Generator) -> Sequential {
    Sequential::new()
        .push(Linear::new(64, 256, init).unwrap())
        .push(ReLU::new())
        .push(Dropout::new(0.1, dropout).unwrap())
        .push(Linear::new(256, 256, init).unwrap())
        .push(ReLU::new())
        .push(Dropout::new(0.1, dropout).unwrap())
        .push(Linear::new(256, 10, init).unwrap())
}

fn train_step(c: &mut Criterion) {
    // One thread for every rayon op of the process (criterion's state is not `Send`, so
    // a scoped `pool.install` cannot wrap the benchmark closures).
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global();
    assert_eq!(rayon::current_num_threads(), 1, "set RAYON_NUM_THREADS=1");
    {
        let init = Generator::from_key(Device::Cpu, Key::new(1));
        let dropout = Generator::from_key(Device::Cpu, Key::new(2));
        let mut model = mlp(&init, &dropout);
        let mut sgd = Sgd::new(SgdConfig::new(0.05).momentum(0.9)).unwrap();
        let x = rng_gen::randn(&[128, 64], DType::F32, Device::Cpu, Some(&init)).unwrap();
        let y = rng_gen::randint(0, 10, &[128], Device::Cpu, Some(&init)).unwrap();
        c.bench_function("train_step/model_only", |b| {
            b.iter(|| {
                model.zero_grad();
                let logits = model.forward(&x, true).unwrap();
                let (loss, grad) = cross_entropy(&logits, &y).unwrap();
                model.backward_params(&grad).unwrap();
                sgd.step(&mut model).unwrap();
                loss
            });
        });

        let config = TrainConfig {
            seed: 7,
            ..TrainConfig::default()
        };
        let mut trainer = Trainer::new(config).unwrap();
        c.bench_function("train_step/with_loader", |b| {
            b.iter(|| trainer.step().unwrap());
        });
    }
}

criterion_group!(benches, train_step);
criterion_main!(benches);
