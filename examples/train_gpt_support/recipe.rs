//! `train_gpt`'s flags for running nanoGPT's recipes: held-out evaluation, the schedule
//! and model settings nanoGPT's configurations name, and the recipes themselves.
//!
//! A recipe fills in every flag the command line leaves out, with exactly the values
//! of nanoGPT's `config/train_shakespeare_char.py` (over its `train.py` defaults:
//! `bias = False`, weight decay 0.1, beta1 0.9, clipping at 1.0) or of the CPU line in
//! nanoGPT's README; a flag given on the command line wins. Differences that remain:
//! nanoGPT's character vocabulary has the 65 characters of the text, ditto's the 256
//! byte values (the same tokens for this ASCII text; the loss is per character in
//! both), and ditto's GELU is GPT-2's tanh approximation.

use clap::builder::{PossibleValuesParser, RangedU64ValueParser, TypedValueParser, ValueParser};
use clap::{Args, ValueEnum};

use super::args::float_in;
use nn_mini::gpt::Precision;

/// A named training recipe.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    /// nanoGPT's config/train_shakespeare_char.py: 6 layers, 6 heads, width 384, block
    /// 256, batch 64, dropout 0.2, 5000 steps (a GPU recipe)
    ShakespeareChar,
    /// nanoGPT README's CPU line for it: 4 layers, 4 heads, width 128, block 64, batch
    /// 12, dropout 0, 2000 steps, 20 eval batches
    ShakespeareCharCpu,
}

/// The values a recipe sets, in `train_gpt`'s terms.
pub struct RecipeValues {
    pub layers: usize,
    pub heads: usize,
    pub width: usize,
    pub block: usize,
    pub batch: usize,
    pub dropout: f64,
    pub steps: u64,
    pub eval_iters: usize,
}

impl Recipe {
    /// What differs between the two recipes; the rest is [`NanoFlags::apply`]'s.
    pub fn values(self) -> RecipeValues {
        match self {
            Recipe::ShakespeareChar => RecipeValues {
                layers: 6,
                heads: 6,
                width: 384,
                block: 256,
                batch: 64,
                dropout: 0.2,
                steps: 5000,
                eval_iters: 200,
            },
            Recipe::ShakespeareCharCpu => RecipeValues {
                layers: 4,
                heads: 4,
                width: 128,
                block: 64,
                batch: 12,
                dropout: 0.0,
                steps: 2000,
                eval_iters: 20,
            },
        }
    }

    /// nanoGPT's `out_dir` for the recipe, where its checkpoints go unless
    /// `--checkpoint-dir` says otherwise.
    pub fn out_dir(self) -> &'static str {
        "out-shakespeare-char"
    }
}

/// Evaluation, nanoGPT's settings and recipes (flattened into `train_gpt`'s flags).
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct NanoFlags {
    /// Set every flag not given to a nanoGPT recipe's value (the run's first line prints
    /// the resolved configuration)
    #[arg(long, value_name = "NAME")]
    pub recipe: Option<Recipe>,

    /// The fraction of the text held out for validation, at its end, in [0, 0.5]
    /// (nanoGPT's split: the first 90% trains) [default: 0.1]
    #[arg(long, value_name = "F", value_parser = float_in(0.0, 0.5))]
    pub val_fraction: Option<f64>,

    /// Every N steps (and at the last step) print and log (CSV column val_loss) the
    /// mean loss over --eval-iters batches of the training and of the held-out bytes,
    /// dropout off, 1..=1000000 [default: no evaluation]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<u64>::new().range(1..=1_000_000))]
    pub eval_interval: Option<u64>,

    /// Batches per evaluation, 1..=100000 [default: 200]
    #[arg(long, value_name = "M", value_parser = RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub eval_iters: Option<usize>,

    /// With --checkpoint-dir: keep the checkpoint of the lowest validation loss as
    /// best.safetensors in it (written atomically at each evaluation that improves)
    #[arg(long)]
    pub save_best: bool,

    /// With --resume (or --resume-latest): evaluate the checkpoint (and sample, with
    /// --sample) without training
    #[arg(long)]
    pub eval_only: bool,

    /// AdamW's beta2, in [0, 0.9999] [default: 0.95]
    #[arg(long, value_name = "B", value_parser = float_in(0.0, 0.9999))]
    pub beta2: Option<f64>,

    /// The learning rate the cosine decay ends at, in [0, 1e30] [default: --lr / 10]
    #[arg(long, value_name = "LR", value_parser = float_in(0.0, 1e30))]
    pub min_lr: Option<f64>,

    /// The step the cosine decay reaches --min-lr at, 1..=1000000 [default: --steps]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<u64>::new().range(1..=1_000_000))]
    pub decay_steps: Option<u64>,

    /// Biases in the linear layers and layer norms (false: nanoGPT's bias=False)
    /// [default: true]
    #[arg(long, value_name = "BOOL", value_parser = ValueParser::bool())]
    pub bias: Option<bool>,

    /// The precision of the matrix products (nanoGPT's dtype): f32, or bf16 autocast
    /// with f32 weights, sums and statistics; kept in the checkpoint [default: f32]
    #[arg(long, value_name = "P",
          value_parser = PossibleValuesParser::new(Precision::NAMES).try_map(|s| s.parse::<Precision>()))]
    pub precision: Option<Precision>,
}

/// The number of evaluation batches when `--eval-iters` is not given (nanoGPT's).
pub const EVAL_ITERS: usize = 200;
