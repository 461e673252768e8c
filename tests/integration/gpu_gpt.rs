//! The GPT run of issue 30 on CUDA: under portable arithmetic (docs/contract.md §14) a
//! few training steps give the same loss bytes and final parameters on the CPU, on
//! `cuda:0` and on `cuda:1`, and a run saved on `cuda:0` resumes on the CPU with the
//! same remaining losses. Every step runs the transformer ops' kernels (GELU, layer
//! norm, causal softmax, batched matmul, AdamW) forward, backward and in the update,
//! with attention and residual dropout on. Without portable arithmetic the CUDA run
//! still trains, close to the CPU's, and (on the stand-in, which rounds expf and sgemm
//! like a GPU) not bit-equal, so the comparison can fail.
//!
//! The switch is process-wide, so it is flipped in one test only, in a process of its
//! own (`own_process!`).
use std::path::Path;

use crate::support;

use ditto::nn_mini::gpt::{DataSpec, GptConfig, GptTrainConfig, GptTrainer, Precision, Text};
use ditto::nn_mini::train::{Run, TrainingRun};
use ditto::nn_mini::Module;
use ditto::tensor_core::{use_portable_arithmetic, Device};
use support::{gpus, on_standin};

const STEPS: u64 = 5;
const SAVE_AT: u64 = 2;

/// A text of `len` bytes of English-like words, written to `dir/text.txt`.
fn write_text(dir: &Path, len: usize) -> DataSpec {
    let path = dir.join("text.txt");
    let words =
        b"it was the best of times, it was the worst of times; we had everything before us. ";
    let bytes: Vec<u8> = words.iter().copied().cycle().take(len).collect();
    std::fs::write(&path, &bytes).unwrap();
    DataSpec::of(&path, &Text::from_bytes(bytes))
}

/// Two layers of two heads, width 16, context 8, batches of 4, dropout 0.1 (attention
/// and residual masks), a short warm-up: small enough for the stand-in.
fn tiny(data: DataSpec, device: Device, precision: Precision) -> GptTrainConfig {
    let tiny = GptTrainConfig::tiny(data);
    GptTrainConfig {
        seed: 11,
        device,
        model: GptConfig {
            n_layer: 2,
            precision,
            ..tiny.model
        },
        ..tiny
    }
}

/// The loss bits and the final parameters' bits of a trainer run to `STEPS`.
fn finish(mut trainer: GptTrainer) -> (Vec<u32>, Vec<Vec<u32>>) {
    while trainer.step_count() < STEPS {
        trainer.step().unwrap();
    }
    let losses = trainer.losses().iter().map(|l| l.to_bits()).collect();
    let params = trainer
        .model()
        .parameters()
        .iter()
        .map(|p| {
            let values = p
                .value
                .to_device(Device::Cpu)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            values.iter().map(|v| v.to_bits()).collect()
        })
        .collect();
    (losses, params)
}

type Bits = (Vec<u32>, Vec<Vec<u32>>);

fn straight(data: &DataSpec, device: Device, precision: Precision) -> Bits {
    let trainer = GptTrainer::new(tiny(data.clone(), device, precision)).unwrap();
    assert_eq!(trainer.model().parameters()[0].value.device(), device);
    finish(trainer)
}

/// Saved after `SAVE_AT` steps on `from`, resumed on `to`.
fn moved(data: &DataSpec, from: Device, to: Device, dir: &Path, precision: Precision) -> Bits {
    let path = dir.join(format!("{from}-{to}-{precision}.safetensors").replace(':', ""));
    let mut first = GptTrainer::new(tiny(data.clone(), from, precision)).unwrap();
    while first.step_count() < SAVE_AT {
        first.step().unwrap();
    }
    first.save(&path).unwrap();
    drop(first);
    let resumed = GptTrainer::resume(&path, None, Some(to)).unwrap();
    assert_eq!(resumed.config().device, to);
    assert_eq!(
        resumed.config().model.precision,
        precision,
        "kept in the checkpoint"
    );
    finish(resumed)
}

#[test]
fn portable_gpt_runs_are_the_same_bytes_on_cpu_and_both_devices_and_across_resumes() {
    test_support::own_process!(
        portable_gpt_runs_are_the_same_bytes_on_cpu_and_both_devices_and_across_resumes
    );
    if !gpus(2) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path(), 2000);
    use_portable_arithmetic(true);
    let f32 = Precision::F32;
    let cpu = straight(&data, Device::Cpu, f32);
    assert!(cpu.0.iter().all(|&l| f32::from_bits(l).is_finite()));
    assert_eq!(straight(&data, Device::Cuda(0), f32), cpu, "cuda:0");
    assert_eq!(straight(&data, Device::Cuda(1), f32), cpu, "cuda:1");
    assert_eq!(
        moved(&data, Device::Cuda(0), Device::Cpu, dir.path(), f32),
        cpu,
        "saved on cuda:0, resumed on the cpu"
    );
    use_portable_arithmetic(false);
    let (default_cuda, cuda_params) = straight(&data, Device::Cuda(0), f32);
    let (default_cpu, cpu_params) = straight(&data, Device::Cpu, f32);
    for (g, c) in default_cuda.iter().zip(&default_cpu) {
        let (g, c) = (f32::from_bits(*g), f32::from_bits(*c));
        assert!(
            (g - c).abs() <= 1e-3 * c.abs(),
            "default cuda:0 loss {g}, cpu {c}"
        );
    }
    // The losses (f32 means over the batch) may round to the same bits; the trained
    // parameters carry every difference of the steps.
    if on_standin() {
        assert_ne!(
            cuda_params, cpu_params,
            "the stand-in rounds expf and sgemm like the CPU"
        );
    }
}

/// `--cuda-graph` for the GPT (issue 43): forward, token cross-entropy and backward
/// captured once and replayed (the token ids staged in the embedding's buffer, the
/// residual and fused-attention dropout masks drawn by the graph), clipping, the
/// schedule's rate and AdamW run eagerly after each replay. The losses and the final
/// parameters are the eager run's bits in f32 and in bf16 (whose operand narrowing and
/// bf16 GEMMs are captured too), and a checkpoint saved after a replay resumes, eagerly
/// or graphed, to the same bits.
#[test]
fn a_graphed_gpt_step_is_the_eager_step_bit_for_bit() {
    test_support::own_process!(a_graphed_gpt_step_is_the_eager_step_bit_for_bit);
    if !gpus(1) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path(), 2000);
    let cuda = Device::Cuda(0);
    for precision in [Precision::F32, Precision::Bf16] {
        let eager = straight(&data, cuda, precision);
        let graphed = |mut trainer: GptTrainer| {
            trainer.set_cuda_graph(true).unwrap();
            trainer
        };
        let trainer = GptTrainer::new(tiny(data.clone(), cuda, precision)).unwrap();
        same(
            &finish(graphed(trainer)),
            &eager,
            &format!("{precision}: graphed"),
        );
        let path = dir.path().join(format!("graphed-{precision}.safetensors"));
        let mut first = graphed(GptTrainer::new(tiny(data.clone(), cuda, precision)).unwrap());
        while first.step_count() < SAVE_AT + 1 {
            first.step().unwrap(); // one eager step, then replays
        }
        first.save(&path).unwrap();
        drop(first);
        let resumed = GptTrainer::resume(&path, None, None).unwrap();
        let what = format!("{precision}: saved after a replay, resumed eagerly");
        same(&finish(resumed), &eager, &what);
        let resumed = graphed(GptTrainer::resume(&path, None, None).unwrap());
        same(
            &finish(resumed),
            &eager,
            &format!("{precision}: resumed graphed"),
        );
    }
}

/// Equal runs, or a failure naming the losses and the first parameter that differs
/// (not every parameter's bits).
fn same(got: &Bits, want: &Bits, what: &str) {
    let losses = |b: &Bits| b.0.iter().map(|&l| f32::from_bits(l)).collect::<Vec<_>>();
    assert_eq!(losses(got), losses(want), "{what}: losses");
    let differs = got.1.iter().zip(&want.1).position(|(g, w)| g != w);
    assert_eq!(differs, None, "{what}: parameter {differs:?} differs");
}

/// Issue 43's bf16 autocast on CUDA: in portable arithmetic a bf16 run is the same
/// bytes on the CPU and `cuda:0`, saved on `cuda:0` and resumed on the CPU (a bf16 run
/// resumes and audits on a CPU), and not the f32 run's bytes (the rounding happened).
/// In default arithmetic the CUDA run (fused attention over bf16 operands, sgemm of
/// rounded operands) stays close to the CPU's.
#[test]
fn bf16_gpt_runs_are_the_same_bytes_on_cpu_and_cuda_and_across_resumes() {
    test_support::own_process!(bf16_gpt_runs_are_the_same_bytes_on_cpu_and_cuda_and_across_resumes);
    if !gpus(1) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path(), 2000);
    let bf16 = Precision::Bf16;
    use_portable_arithmetic(true);
    let cpu = straight(&data, Device::Cpu, bf16);
    assert!(cpu.0.iter().all(|&l| f32::from_bits(l).is_finite()));
    assert_ne!(
        cpu.1,
        straight(&data, Device::Cpu, Precision::F32).1,
        "bf16 is not f32"
    );
    assert_eq!(straight(&data, Device::Cuda(0), bf16), cpu, "cuda:0");
    assert_eq!(
        moved(&data, Device::Cuda(0), Device::Cpu, dir.path(), bf16),
        cpu,
        "saved on cuda:0, resumed on the cpu"
    );
    use_portable_arithmetic(false);
    let (default_cuda, _) = straight(&data, Device::Cuda(0), bf16);
    let (default_cpu, _) = straight(&data, Device::Cpu, bf16);
    for (g, c) in default_cuda.iter().zip(&default_cpu) {
        let (g, c) = (f32::from_bits(*g), f32::from_bits(*c));
        assert!(
            (g - c).abs() <= 1e-3 * c.abs(),
            "default cuda:0 bf16 loss {g}, cpu {c}"
        );
    }
}

/// Issue 44 on CUDA: under portable arithmetic, seeded requests generate the same text
/// with the model on the CPU, on `cuda:0` and on `cuda:1` (the cache's single-row steps
/// and the prompt's prefill run the transformer kernels), in batches of 1 and 3.
#[test]
fn portable_generation_is_the_same_text_on_cpu_and_both_devices() {
    use ditto::nn_mini::gpt::{generate_batch, GenerationRequest, Gpt, SamplingParams};
    use ditto::rng_gen::{Generator, Key};
    test_support::own_process!(portable_generation_is_the_same_text_on_cpu_and_both_devices);
    if !gpus(2) {
        return;
    }
    use_portable_arithmetic(true);
    let config = GptConfig {
        block_size: 8,
        n_layer: 2,
        n_head: 2,
        n_embd: 16,
        dropout: 0.0,
        ..GptConfig::default()
    };
    let texts = |device: Device, batch: usize| {
        let init = Generator::from_key(device, Key::new(5));
        let mut model = Gpt::new(&config, &init, &init).unwrap();
        let requests = (0..4u64)
            .map(|i| GenerationRequest {
                prompt: b"it was the best"[..1 + i as usize * 3].to_vec(),
                seed: 40 + i,
                sampling: SamplingParams {
                    temperature: [0.0, 1.0][(i % 2) as usize],
                    top_k: Some(50),
                    top_p: None,
                },
                max_tokens: 12, // past the position table of 8
                stop: None,
            })
            .collect();
        let mut out = vec![Vec::new(); 4];
        generate_batch(&mut model, requests, batch, |i, text| {
            out[i] = text;
            Ok(())
        })
        .unwrap();
        out
    };
    let cpu = texts(Device::Cpu, 1);
    assert!(cpu.iter().all(|t| t.len() == 12));
    for device in [Device::Cuda(0), Device::Cuda(1)] {
        for batch in [1, 3] {
            assert_eq!(texts(device, batch), cpu, "{device}, batches of {batch}");
        }
    }
}
