//! What `train_gpt` does besides training, with dropout off: nanoGPT's held-out
//! evaluation every `--eval-interval` steps (and the best checkpoint), and at the end of
//! a run a sample of generated text.

use std::error::Error;
use std::path::PathBuf;

use nn_mini::gpt::{
    estimate_loss, generate_batch, read_text, GenerationRequest, Gpt, GptTrainConfig,
    SamplingParams, Split, Text,
};
use nn_mini::train::Run;
use nn_mini::Checkpoint;

use super::args::Args;

/// The metadata key of `best.safetensors` holding its validation loss, so a resumed
/// run keeps the best of the whole run.
const BEST_VAL_KEY: &str = "train_gpt.val_loss";

/// The held-out evaluation of a run (`--eval-interval`, `--eval-iters`, `--save-best`,
/// `--eval-only`): nanoGPT's `estimate_loss` over both splits, from the evaluation
/// stream (`nn_mini::gpt::EVAL_DOMAIN`), so it never changes the training curve.
pub struct Evaluator {
    interval: Option<u64>,
    iters: usize,
    text: Option<Text>,
    /// `--save-best`: the file, and the lowest validation loss saved in it so far.
    best: Option<(PathBuf, Option<f32>)>,
}

impl Evaluator {
    /// The evaluation `args` ask for of the run `config` describes (after a resume,
    /// the checkpoint's), reading its text once. `resumed`: the run continues a
    /// checkpoint, whose best file it then continues too; a fresh run refuses an
    /// existing one rather than overwrite another run's best model.
    pub fn new(
        args: &Args,
        config: &GptTrainConfig,
        resumed: bool,
    ) -> Result<Self, Box<dyn Error>> {
        let on = args.nano.eval_interval.is_some() || args.nano.eval_only;
        if args.nano.eval_interval.is_some() && config.val_fraction == 0.0 {
            return Err(format!(
                "--eval-interval evaluates on held-out bytes, but this run holds none \
                 (val_fraction 0{}): expected --val-fraction > 0",
                if resumed { ", from its checkpoint" } else { "" }
            )
            .into());
        }
        let mut best = None;
        if args.nano.save_best {
            let dir = args.run.checkpoint_dir.clone().unwrap_or_default();
            let path = dir.join("best.safetensors");
            let saved = match (path.exists(), resumed) {
                (false, _) => None,
                (true, true) => Some(best_val_of(&path)?),
                (true, false) => {
                    return Err(format!(
                        "{} holds another run's best checkpoint; a fresh run would overwrite \
                         it: move it, or pick an empty --checkpoint-dir",
                        path.display()
                    )
                    .into())
                }
            };
            best = Some((path, saved));
        }
        Ok(Evaluator {
            interval: args.nano.eval_interval,
            iters: args.eval_iters(),
            text: if on { Some(read_text(config)?) } else { None },
            best,
        })
    }

    /// True when the run evaluates (its CSV then has a `val_loss` column).
    pub fn is_on(&self) -> bool {
        self.interval.is_some()
    }

    /// [`evaluate`](Self::evaluate) when `step` is a multiple of `--eval-interval` or
    /// the run's `last` step; `None` otherwise.
    pub fn evaluate_due<R>(
        &mut self,
        run: &mut R,
        step: u64,
        last: u64,
    ) -> Result<Option<f32>, Box<dyn Error>>
    where
        R: Run<Config = GptTrainConfig>,
    {
        match self.interval {
            Some(n) if step.is_multiple_of(n) || step == last => self.evaluate(run, step),
            _ => Ok(None),
        }
    }

    /// The mean training-split and validation losses at `step` (rank 0 prints them),
    /// and with `--save-best` the checkpoint when the validation loss is the lowest so
    /// far. Returns the validation loss (`None` for a run without a held-out split).
    pub fn evaluate<R>(&mut self, run: &mut R, step: u64) -> Result<Option<f32>, Box<dyn Error>>
    where
        R: Run<Config = GptTrainConfig>,
    {
        let Some(text) = &self.text else {
            return Ok(None);
        };
        let config = run.config().clone();
        let mut loss =
            |split| estimate_loss(run.model_mut(), &config, text, split, self.iters, step);
        let train = loss(Split::Train)?;
        let val = match config.val_fraction > 0.0 {
            true => Some(loss(Split::Val)?),
            false => None,
        };
        let say = |line: String| {
            if run.rank() == 0 {
                println!("{line}");
            }
        };
        match val {
            Some(v) => say(format!(
                "step {step}: train loss {train:.4}, val loss {v:.4}"
            )),
            None => say(format!(
                "step {step}: train loss {train:.4} (no held-out bytes)"
            )),
        }
        if let (Some((path, best)), Some(v)) = (&mut self.best, val) {
            if best.is_none_or(|b| v < b) {
                run.save_with(&*path, &[(BEST_VAL_KEY, &format!("{v:?}"))])?;
                if run.rank() == 0 {
                    println!(
                        "saved {} (val loss {v:.4}, the lowest so far)",
                        path.display()
                    );
                }
                *best = Some(v);
            }
        }
        Ok(val)
    }
}

/// The validation loss `best.safetensors` was saved with.
fn best_val_of(path: &std::path::Path) -> Result<f32, Box<dyn Error>> {
    let ck = Checkpoint::load(path)?;
    let value = ck.require_metadata(BEST_VAL_KEY)?;
    value.parse().map_err(|_| {
        format!(
            "{}: {BEST_VAL_KEY} is {value:?}, not a number",
            path.display()
        )
        .into()
    })
}

/// Prints the sample `--sample` asks for (`default_sample` bytes when it is not given):
/// a request seeded with the run's seed, temperature 1 (`nn_mini::gpt::generate_batch`).
pub fn sample(
    args: &Args,
    config: &GptTrainConfig,
    model: &mut Gpt,
    default_sample: usize,
) -> Result<(), Box<dyn Error>> {
    let (seed, count) = (config.seed, args.sample.unwrap_or(default_sample));
    if count == 0 {
        return Ok(());
    }
    let prompt = args.prompt.clone().unwrap_or_else(|| "\n".into());
    let request = GenerationRequest {
        prompt: prompt.clone().into_bytes(),
        seed,
        sampling: SamplingParams::default(),
        max_tokens: count,
        stop: None,
    };
    generate_batch(model, vec![request], 1, |_, text| {
        println!(
            "sample ({count} bytes after {prompt:?}, seed {seed}):\n{prompt}{}",
            String::from_utf8_lossy(&text)
        );
        Ok(())
    })?;
    Ok(())
}
