//! The end of a `train_gpt` run that reached `--steps`: the loss of a held-out text
//! (`--eval-text`) and a sample of generated text, both with dropout off.

use std::error::Error;

use nn_mini::gpt::{Gpt, GptTrainConfig};
use nn_mini::train::DROPOUT_DOMAIN;
use rng_gen::{fold_in, Generator, Key};
use tensor_core::Device;

use super::args::Args;

/// Sub-key of the run key for the sample's generator: after the run's own domains
/// (`nn_mini::train`'s `INIT_DOMAIN` .. `DATA_DOMAIN`), so sampling never shares a
/// stream with training.
const SAMPLE_DOMAIN: u64 = DROPOUT_DOMAIN + 3;

/// Prints `eval loss: X` for `--eval-text` and the sample `--sample` asks for.
pub fn evaluate_and_sample(
    args: &Args,
    config: &GptTrainConfig,
    model: &mut Gpt,
) -> Result<(), Box<dyn Error>> {
    let (seed, context) = (config.seed, config.context);
    if let Some(path) = &args.eval_text {
        let text =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if text.len() < context + 1 {
            return Err(format!(
                "--eval-text {} has {} bytes; the eval loss needs context + 1 = {} bytes",
                path.display(),
                text.len(),
                context + 1
            )
            .into());
        }
        let loss = model.eval_loss(&text[..context + 1])?;
        println!("eval loss: {loss}");
    }
    let count = args.sample.unwrap_or(200);
    if count > 0 {
        let prompt = args.prompt.clone().unwrap_or_else(|| "\n".into());
        let generator = Generator::from_key(Device::Cpu, fold_in(Key::new(seed), SAMPLE_DOMAIN));
        let text = model.generate(prompt.as_bytes(), count, &generator)?;
        println!(
            "sample ({count} bytes after {prompt:?}, seed {seed}):\n{}{}",
            prompt,
            String::from_utf8_lossy(&text)
        );
    }
    Ok(())
}
