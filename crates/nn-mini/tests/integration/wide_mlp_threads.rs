//! Issue 29's rule at the sizes where ditto fans out: a few training steps of an MLP as
//! wide as the large benchmark model (784-1024-1024-10, batch 256, dropout, SGD with
//! momentum) give the same losses and parameters, bit for bit, on pools of 1, 2 and 3
//! threads, with default and with portable arithmetic. The demo of `thread_counts.rs`
//! is too small for any op to leave the calling thread; here every fan-out runs: the
//! matmuls' blocks and tiles, dropout's fill and mask pass (2^18 elements), the
//! elementwise ops and SGD (parameters of 2^18 elements and more). The GPT gets the
//! same check at 1, 2, 3 and 8 threads.

use nn_mini::train::build_mlp;
use nn_mini::{cross_entropy_with, ClassTargets, Module};
use nn_mini::{Sgd, SgdConfig};
use rng_gen::{Generator, Key};
use tensor_core::{use_portable_arithmetic, DType, Device};
use test_support::on_threads;

const WIDTHS: [usize; 4] = [784, 1024, 1024, 10];
const BATCH: usize = 256;
const STEPS: usize = 3;

/// Every step's loss bits, then every parameter's bits, after `STEPS` steps.
fn train() -> (Vec<u32>, Vec<Vec<u32>>) {
    let init = Generator::from_key(Device::Cpu, Key::new(1));
    let drop = Generator::from_key(Device::Cpu, Key::new(2));
    let mut model = build_mlp(&WIDTHS, 0.1, &init, &drop).unwrap();
    let mut sgd = Sgd::new(SgdConfig::new(0.05).momentum(0.9)).unwrap();
    let x = rng_gen::randn(&[BATCH, WIDTHS[0]], DType::F32, Device::Cpu, Some(&init)).unwrap();
    let labels = Generator::from_key(Device::Cpu, Key::new(3));
    let y = rng_gen::randint(0, 10, &[BATCH], Device::Cpu, Some(&labels)).unwrap();
    let y = ClassTargets::new("wide_mlp_threads", &y, 10, Device::Cpu).unwrap();
    let mut losses = Vec::new();
    for _ in 0..STEPS {
        model.zero_grad();
        let logits = model.forward(&x, true).unwrap();
        let (loss, grad) = cross_entropy_with(&logits, &y).unwrap();
        losses.push(loss.to_vec::<f32>().unwrap()[0].to_bits());
        model.backward_params(&grad).unwrap();
        sgd.step(&mut model).unwrap();
    }
    let params = model
        .parameters()
        .iter()
        .map(|p| {
            let values = p.value.to_vec::<f32>().unwrap();
            values.into_iter().map(f32::to_bits).collect()
        })
        .collect();
    (losses, params)
}

fn assert_same_on_1_2_and_3_threads(what: &str) {
    let runs: Vec<_> = [1, 2, 3].map(|threads| on_threads(threads, train)).into();
    for (i, run) in runs.iter().enumerate().skip(1) {
        assert_eq!(run.0, runs[0].0, "{what}: losses, {} threads", i + 1);
        for (p, (got, want)) in run.1.iter().zip(&runs[0].1).enumerate() {
            assert!(got == want, "{what}: parameter {p}, {} threads", i + 1);
        }
    }
}

#[test]
fn wide_mlp_steps_do_not_depend_on_the_thread_count() {
    assert_same_on_1_2_and_3_threads("default arithmetic");
}

#[test]
fn wide_mlp_steps_do_not_depend_on_the_thread_count_portable() {
    test_support::own_process!(wide_mlp_steps_do_not_depend_on_the_thread_count_portable);
    use_portable_arithmetic(true);
    assert_same_on_1_2_and_3_threads("portable arithmetic");
}

/// The GPT at a size where its ops fan out (issue 42): batches of 16 sequences of 64
/// tokens at width 128 make the MLP's hidden activations `[1024, 512]` (2^19 elements),
/// past every parallel threshold, with dropout on. Loss bits and parameter bits of
/// four steps, on pools of 1, 2, 3 and 8 threads.
fn assert_gpt_same_on_1_2_3_and_8_threads(what: &str) {
    use nn_mini::gpt::{DataSpec, GptConfig, GptTrainConfig, GptTrainer, Text};
    use nn_mini::train::{Run, TrainingRun};
    let dir = tempfile::tempdir().unwrap();
    let words = b"it is a truth universally acknowledged, that a single man in possession ";
    let bytes: Vec<u8> = words.iter().copied().cycle().take(20_000).collect();
    let path = dir.path().join("text.txt");
    std::fs::write(&path, &bytes).unwrap();
    let config = GptTrainConfig {
        model: GptConfig {
            n_layer: 1,
            ..GptConfig::default()
        },
        ..GptTrainConfig::new(DataSpec::of(&path, &Text::from_bytes(bytes)))
    };
    let train = || {
        let mut trainer = GptTrainer::new(config.clone()).unwrap();
        while trainer.step_count() < 4 {
            trainer.step().unwrap();
        }
        let losses: Vec<u32> = trainer.losses().iter().map(|l| l.to_bits()).collect();
        let params: Vec<Vec<u32>> = trainer
            .model()
            .parameters()
            .iter()
            .map(|p| {
                p.value
                    .to_vec::<f32>()
                    .unwrap()
                    .into_iter()
                    .map(f32::to_bits)
                    .collect()
            })
            .collect();
        (losses, params)
    };
    let one = on_threads(1, train);
    for threads in [2, 3, 8] {
        let run = on_threads(threads, train);
        assert_eq!(run.0, one.0, "{what}: losses, {threads} threads");
        assert!(run.1 == one.1, "{what}: parameters, {threads} threads");
    }
}

#[test]
fn gpt_steps_do_not_depend_on_the_thread_count() {
    assert_gpt_same_on_1_2_3_and_8_threads("default arithmetic");
}

#[test]
fn gpt_steps_do_not_depend_on_the_thread_count_portable() {
    test_support::own_process!(gpt_steps_do_not_depend_on_the_thread_count_portable);
    use_portable_arithmetic(true);
    assert_gpt_same_on_1_2_3_and_8_threads("portable arithmetic");
}
