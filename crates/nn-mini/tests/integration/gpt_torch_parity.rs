//! The GPT against PyTorch (issue 30): ditto's run writes its weights before and after
//! its first step, and the batch of that step, and `scripts/gpt_torch_parity.py` loads
//! them into a nanoGPT-style PyTorch `GPT` by name and checks the loss and the step
//! (clipping and AdamW) to 1e-5, dropout off.
//!
//! It needs a Python with torch and safetensors: `DITTO_TORCH_PYTHON` names it (default
//! `python3`). Without one the test says so and passes, unless
//! `DITTO_REQUIRE_TORCH=1`, which CI sets (`.ci/run` installs torch into a venv).

use std::process::Command;

use nn_mini::gpt::{DataSpec, GptConfig, GptTrainConfig, Text};
use nn_mini::train::{FreshRun, RunConfig, TrainingRun};
use nn_mini::{Checkpoint, Module};
use tensor_core::DType;

/// The Python to run, or `None` (with the reason printed) when it lacks torch.
fn torch_python() -> Option<String> {
    let python = std::env::var("DITTO_TORCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import torch, safetensors"])
        .output();
    let required = std::env::var("DITTO_REQUIRE_TORCH").is_ok_and(|v| v == "1");
    match probe {
        Ok(out) if out.status.success() => Some(python),
        other => {
            let why = match other {
                Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
                Err(e) => e.to_string(),
            };
            assert!(
                !required,
                "DITTO_REQUIRE_TORCH=1 but {python} cannot import torch: {why}"
            );
            eprintln!("skipping the PyTorch parity check: {python} cannot import torch and safetensors ({why})");
            None
        }
    }
}

#[test]
fn one_step_and_the_loss_match_pytorch() {
    parity(true);
}

/// nanoGPT's default `bias=False`: the checkpoint has no `.bias` entries and loads into
/// the module built without them, by name.
#[test]
fn one_step_and_the_loss_match_pytorch_without_biases() {
    parity(false);
}

fn parity(bias: bool) {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let text_path = dir.path().join("text.txt");
    let text: Vec<u8> = b"It is a truth universally acknowledged, that a single man in possession \
        of a good fortune, must be in want of a wife. "
        .iter()
        .copied()
        .cycle()
        .take(6000)
        .collect();
    std::fs::write(&text_path, &text).unwrap();
    let data = DataSpec::of(&text_path, &Text::read(&text_path).unwrap());
    let mut config = GptTrainConfig {
        seed: 11,
        model: GptConfig {
            vocab_size: 256,
            block_size: 16,
            n_layer: 2,
            n_head: 2,
            n_embd: 32,
            dropout: 0.0,
            bias,
            precision: nn_mini::gpt::Precision::F32,
        },
        context: 16,
        batch_size: 4,
        warmup: 0,
        decay_steps: 10,
        grad_clip: 0.5,
        ..GptTrainConfig::new(data)
    };
    config.optimizer.lr = 1e-2;
    let FreshRun {
        mut model,
        mut state,
    } = FreshRun::new(config.clone(), None).unwrap();
    let save = |model: &dyn Module, name: &str| {
        let mut ck = Checkpoint::new();
        ck.put_module("model.", model).unwrap();
        ck.set_metadata("train.config", config.to_json()).unwrap();
        let path = dir.path().join(name);
        ck.save(&path).unwrap();
        path
    };
    let step0 = save(&model, "step0.safetensors");
    // The run's first step, exactly as the training loop takes it.
    let batch = state.loader_mut().next_batch().unwrap();
    model.zero_grad();
    let logits = model.forward(&batch.input, true).unwrap();
    let (loss, grad) = state.config().loss(&logits, &batch.target).unwrap();
    model.backward_params(&grad).unwrap();
    GptTrainConfig::update(&mut state, &mut model).unwrap();
    let step1 = save(&model, "step1.safetensors");
    let mut ck = Checkpoint::new();
    ck.insert("input", &batch.input).unwrap();
    ck.insert("target", &batch.target).unwrap();
    ck.insert(
        "loss",
        &loss.to_dtype(DType::F32).unwrap().reshape(&[]).unwrap(),
    )
    .unwrap();
    let batch_path = dir.path().join("batch.safetensors");
    ck.save(&batch_path).unwrap();
    assert_eq!(batch.input.dims(), &[4, 16]);

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/gpt_torch_parity.py"
    );
    let out = Command::new(&python)
        .args([
            script.as_ref(),
            step0.as_os_str(),
            step1.as_os_str(),
            batch_path.as_os_str(),
        ])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    println!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "PyTorch disagrees:\n{report}");
    assert!(report.contains("ok   loss:"), "{report}");
}
