//! Command-line flags of `train_gpt`: the run's flags it shares with `train_resume`
//! (`examples/common/flags.rs`), the data parallel ones it shares with `ddp_train`
//! (`examples/common/ddp.rs`), and its own: the model, the optimiser and schedule, the
//! text, evaluation and sampling, and nanoGPT's recipes (`recipe.rs`). Parsed by clap
//! (derive).

use std::path::PathBuf;

use clap::builder::{RangedU64ValueParser, ValueParser};
use clap::Parser;
use nn_mini::gpt::{DataSpec, GptConfig, GptTrainConfig};
use nn_mini::AdamWConfig;
use tensor_core::Device;

use super::recipe::{NanoFlags, EVAL_ITERS};
use crate::common::ddp::{BackendFlag, DdpFlags};
use crate::common::flags::{conflict, RunFlags};

/// The largest model dimension a flag takes (width, heads, layers, block size); the
/// configuration's own parameter limit applies on top.
pub const MAX_DIM: u64 = 4096;
/// The longest sample of generated text.
pub const MAX_SAMPLE: u64 = 100_000;

/// A finite f64 in `[low, high]`, for the optimiser's flags.
pub fn float_in(low: f64, high: f64) -> ValueParser {
    ValueParser::new(move |value: &str| -> Result<f64, String> {
        match value.parse::<f64>() {
            Ok(x) if x.is_finite() && (low..=high).contains(&x) => Ok(x),
            _ => Err(format!("expected a number in [{low}, {high}]")),
        }
    })
}

/// Train a small GPT on a text's bytes, save it mid-run, resume it, and get the same
/// loss curve bit for bit; on one device or data parallel.
///
/// Without --backend one process trains on --device. With --backend (threads, mpi,
/// nccl) the run is data parallel as in ddp_train: rank 0 prints, writes the CSV and
/// the checkpoint, and compares; --batch-size is the global batch.
///
/// Exit status: 0 ok, 1 the compared curves differ, 2 bad flags, 3 any other error
/// (a bad text or model shape, a diverged run).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(name = "train_gpt")]
#[command(mut_arg("batch_size", |a| a.help(
    "Sequences per (global) batch, 1..=4000 [default: 16]; on --resume it must match the checkpoint's"
)))]
#[command(mut_arg("backend", |a| a.help(
    "Data parallel: which engine runs the ranks [default: none, one process on --device]"
)))]
pub struct Args {
    #[command(flatten)]
    pub run: RunFlags,

    #[command(flatten)]
    pub ddp: DdpFlags,

    #[command(flatten)]
    pub nano: NanoFlags,

    /// cpu or cuda:N [default: cpu]; one process only (data parallel ranks take the
    /// backend's device); on --resume, the device to continue on
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<Device>,

    /// Run each step after the first as a replayed CUDA graph (forward, loss and
    /// backward in one graph launch; clipping, the schedule and AdamW after it; the same
    /// losses bit for bit); one process on --device cuda:N, or a resumed CUDA run
    #[arg(long)]
    pub cuda_graph: bool,

    /// The text to train on: any file, its bytes are the tokens [default: data/emma.txt,
    /// Jane Austen's Emma]; on --resume, where to find the run's text (it must be the
    /// same bytes)
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,

    /// Transformer blocks, 1..=4096 [default: 4]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_DIM))]
    pub layers: Option<usize>,

    /// Attention heads, 1..=4096, dividing --width [default: 4]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_DIM))]
    pub heads: Option<usize>,

    /// Width of each token's vector, 1..=4096 [default: 128]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_DIM))]
    pub width: Option<usize>,

    /// Rows of the position table, 1..=4096 [default: 64]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_DIM))]
    pub block_size: Option<usize>,

    /// Tokens per training sequence, 1..=4096, at most --block-size [default: 64]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_DIM))]
    pub context: Option<usize>,

    /// Dropout probability, in [0, 1] [default: 0.1]
    #[arg(long, value_name = "P", value_parser = float_in(0.0, 1.0))]
    pub dropout: Option<f64>,

    /// Peak learning rate, in [0, 1e30] [default: 0.001]; far too high a rate diverges,
    /// and the run stops at the first step whose loss or gradient norm is not finite
    #[arg(long, value_name = "LR", value_parser = float_in(0.0, 1e30))]
    pub lr: Option<f64>,

    /// AdamW weight decay of the weight matrices, in [0, 10] [default: 0.1]
    #[arg(long, value_name = "W", value_parser = float_in(0.0, 10.0))]
    pub weight_decay: Option<f64>,

    /// Steps of linear warm-up, 0..=1000000 [default: 100]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<u64>::new().range(0..=1_000_000))]
    pub warmup: Option<u64>,

    /// Largest global gradient norm, in [0, 1000]; 0 turns clipping off [default: 1]
    #[arg(long, value_name = "NORM", value_parser = float_in(0.0, 1000.0))]
    pub grad_clip: Option<f64>,

    /// Bytes of text to generate at the end of a run that reaches --steps, 0..=100000
    /// (0: none), seeded from --seed [default: 200]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(0..=MAX_SAMPLE))]
    pub sample: Option<usize>,

    /// The text the sample continues [default: a newline]
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,

    /// The whole story: a straight run of --steps (100 unless given), a run killed at
    /// --save-at (default 3/5 of --steps), a resume compared with the straight run
    #[arg(long, conflicts_with_all = ["resume", "compare", "out", "checkpoint_dir"])]
    pub demo: bool,
}

/// A text shipped in the repository's `data/`.
fn data_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

impl Args {
    /// Parses the process's command line; prints the error and exits with status 2 on
    /// bad flags (and prints `--help` and exits with 0).
    pub fn parse_or_exit() -> Self {
        match Args::parse().validated() {
            Ok(args) => args,
            Err(e) => e.exit(),
        }
    }

    /// The checks clap's attributes cannot state, after `--recipe` filled in the flags
    /// not given.
    pub fn validated(mut self) -> Result<Self, clap::Error> {
        self.apply_recipe();
        self.run.validate::<Args>()?;
        let nano = &self.nano;
        if nano.eval_only && self.run.resume.is_none() && !self.run.resume_latest {
            return Err(conflict::<Args>(
                "--eval-only evaluates a checkpoint: expected --resume CK (or --resume-latest)"
                    .into(),
            ));
        }
        if nano.eval_only && (self.demo || self.run.save_at.is_some()) {
            return Err(conflict::<Args>(
                "--eval-only trains nothing: it cannot be used with --demo or --save-at".into(),
            ));
        }
        if nano.save_best && (self.run.checkpoint_dir.is_none() || nano.eval_interval.is_none()) {
            return Err(conflict::<Args>(
                "--save-best keeps best.safetensors in --checkpoint-dir at each --eval-interval: \
                 expected both"
                    .into(),
            ));
        }
        if self.cuda_graph && self.ddp.backend.is_some() {
            return Err(conflict::<Args>(
                "--cuda-graph captures one process's step: it cannot be used with --backend".into(),
            ));
        }
        if let Some(backend) = self.ddp.backend {
            self.ddp.validate::<Args>(backend)?;
            if self.device.is_some() {
                return Err(conflict::<Args>(
                    "--device is for one process; data parallel ranks run on their backend's device".into(),
                ));
            }
        } else if self.ddp != DdpFlags::default() {
            return Err(conflict::<Args>(
                "--world-size, --invariant, --micro-shards and --collective-timeout need --backend"
                    .into(),
            ));
        }
        if self.demo && self.ddp.backend.is_some_and(|b| b != BackendFlag::Threads) {
            return Err(conflict::<Args>(
                "--demo runs its three runs itself, in one process or on the threads backend"
                    .into(),
            ));
        }
        Ok(self)
    }

    /// Fills every flag not given with `--recipe`'s value (nanoGPT's; see
    /// `recipe.rs`), the text and the checkpoint folder included.
    fn apply_recipe(&mut self) {
        let Some(recipe) = self.nano.recipe else {
            return;
        };
        let v = recipe.values();
        let nano = &mut self.nano;
        self.run.steps.get_or_insert(v.steps);
        self.layers.get_or_insert(v.layers);
        self.heads.get_or_insert(v.heads);
        self.width.get_or_insert(v.width);
        self.block_size.get_or_insert(v.block);
        self.context.get_or_insert(v.block);
        self.dropout.get_or_insert(v.dropout);
        self.run.batch_size.get_or_insert(v.batch);
        self.lr.get_or_insert(1e-3);
        self.weight_decay.get_or_insert(0.1);
        self.warmup.get_or_insert(100);
        self.grad_clip.get_or_insert(1.0);
        nano.min_lr.get_or_insert(1e-4);
        nano.decay_steps.get_or_insert(v.steps);
        nano.beta2.get_or_insert(0.99);
        nano.bias.get_or_insert(false);
        nano.eval_interval.get_or_insert(250);
        nano.eval_iters.get_or_insert(v.eval_iters);
        self.data
            .get_or_insert_with(|| data_file("tinyshakespeare.txt"));
        if self.run.resume.is_none() && !nano.eval_only && !self.demo {
            self.run
                .checkpoint_dir
                .get_or_insert_with(|| recipe.out_dir().into());
            nano.save_best = true;
        }
    }

    /// Batches per evaluation.
    pub fn eval_iters(&self) -> usize {
        self.nano.eval_iters.unwrap_or(EVAL_ITERS)
    }

    /// The text to train on.
    pub fn data_path(&self) -> PathBuf {
        self.data.clone().unwrap_or_else(|| data_file("emma.txt"))
    }

    /// The configuration of a fresh run over `data`, on `device`, ending its schedule
    /// at `steps`: `train_gpt`'s defaults with the flags given.
    pub fn train_config(&self, data: DataSpec, device: Device, steps: u64) -> GptTrainConfig {
        let defaults = GptTrainConfig::new(data);
        let model = GptConfig {
            n_layer: self.layers.unwrap_or(defaults.model.n_layer),
            n_head: self.heads.unwrap_or(defaults.model.n_head),
            n_embd: self.width.unwrap_or(defaults.model.n_embd),
            block_size: self.block_size.unwrap_or(defaults.model.block_size),
            dropout: self.dropout.unwrap_or(defaults.model.dropout),
            bias: self.nano.bias.unwrap_or(defaults.model.bias),
            precision: self.nano.precision.unwrap_or(defaults.model.precision),
            ..defaults.model
        };
        let lr = self.lr.unwrap_or(defaults.optimizer.lr);
        let (beta1, beta2) = defaults.optimizer.betas;
        let optimizer = AdamWConfig {
            lr,
            betas: (beta1, self.nano.beta2.unwrap_or(beta2)),
            weight_decay: self.weight_decay.unwrap_or(defaults.optimizer.weight_decay),
            ..defaults.optimizer
        };
        let warmup = self.warmup.unwrap_or(defaults.warmup);
        GptTrainConfig {
            seed: self.run.seed.unwrap_or(0),
            model,
            context: self.context.unwrap_or(defaults.context),
            batch_size: self.run.batch_size.unwrap_or(defaults.batch_size),
            optimizer,
            min_lr: self.nano.min_lr.unwrap_or(lr / 10.0),
            warmup,
            decay_steps: self.nano.decay_steps.unwrap_or(steps).max(warmup + 1),
            val_fraction: self.nano.val_fraction.unwrap_or(0.1),
            grad_clip: self.grad_clip.unwrap_or(defaults.grad_clip),
            num_workers: self.run.workers.unwrap_or(0),
            device,
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::flags::{assert_help_states, parse_line};

    fn parse(line: &str) -> Result<Args, clap::Error> {
        parse_line::<Args>("train_gpt", line)?.validated()
    }

    #[test]
    fn the_command_is_well_formed_and_help_states_every_range() {
        let help = assert_help_states::<Args>(&[
            "1..=1000000",
            "1..=4000",
            "0..=256",
            "1..=4096",
            "[0, 1]",
            "0..=100000",
        ]);
        assert!(help.contains("[default: 16]"));
    }

    #[test]
    fn flags_parse_and_bad_input_is_refused() {
        let a = parse("--seed 7 --steps 50 --layers 2 --heads 2 --width 32 --lr 0.003").unwrap();
        let config = a.train_config(
            DataSpec {
                path: "x".into(),
                len: 1000,
                sha256: "0".repeat(64),
            },
            Device::Cpu,
            50,
        );
        assert_eq!(
            (
                config.model.n_layer,
                config.model.n_head,
                config.model.n_embd
            ),
            (2, 2, 32)
        );
        assert_eq!(
            (config.seed, config.optimizer.lr, config.decay_steps),
            (7, 0.003, 101)
        );
        assert!(parse("--backend threads --world-size 2 --invariant").is_ok());
        for (line, want) in [
            ("--world-size 2", "need --backend"),
            (
                "--backend threads --device cpu",
                "--device is for one process",
            ),
            ("--backend mpi --world-size 2", "threads backend"),
            ("--demo --backend nccl", "--demo runs its three runs"),
            (
                "--lr=-1",
                "expected a number in [0, 1000000000000000000000000000000]",
            ),
            ("--dropout 1.5", "expected a number in [0, 1]"),
            ("--heads 0", "0 is not in 1..=4096"),
            ("--sample 100001", "not in 0..=100000"),
            ("--demo --resume x", "cannot be used with"),
            ("--demo --checkpoint-dir ck", "cannot be used with"),
        ] {
            let err = parse(line).unwrap_err().to_string();
            assert!(err.contains(want), "{line}: {err}");
        }
    }
}
