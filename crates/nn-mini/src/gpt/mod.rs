//! A small GPT (GPT-2's layout, nanoGPT's names) and its training run, on byte-level
//! text.
//!
//! * [`Gpt`]: token and position embeddings, [`Block`]s of pre-LayerNorm
//!   [`CausalSelfAttention`] and [`Mlp`], a final layer norm and an output head tied to
//!   the token embedding; every layer with a hand-written backward, as the rest of
//!   nn-mini. Parameters carry nanoGPT's `state_dict` names, so a checkpoint loads into
//!   nanoGPT's `GPT` by name.
//! * [`Text`] / [`TextWindows`]: any file's bytes as tokens (vocabulary 256), sampled as
//!   random windows whose offsets come from each sample's own key.
//! * [`GptTrainConfig`] / [`GptTrainer`]: the run of `examples/train_gpt.rs`, AdamW with
//!   a warm-up and cosine schedule and gradient clipping; it saves, resumes and runs
//!   data parallel like the MLP run, through the same [`crate::train`] code.
//! * [`estimate_loss`]: nanoGPT's held-out evaluation over a train / val [`Split`] of
//!   the text, from its own key tree (`EVAL_DOMAIN`).
//! * [`generate_batch`] / [`Generation`]: requests generated with a key-value cache
//!   ([`KvCache`]), each with its own seed and [`SamplingParams`], whose text does not
//!   depend on the batch, the thread count or (portable) the device.
//!
//! Where each random number comes from is the MLP run's tree ([`crate::train`]): the
//! initialisation from `INIT_DOMAIN`, every dropout mask (embeddings, attention
//! probabilities, residual branches) from the one `DROPOUT_DOMAIN` generator, each
//! layer reserving its stretch in forward order, the windows from `LOADER_DOMAIN`.

mod attention;
mod block;
mod config;
mod evaluate;
mod generate;
mod kv_cache;
mod model;
mod run;
pub mod sampling;
mod text;
mod train_config;

pub use attention::CausalSelfAttention;
pub use block::{Block, Mlp};
pub use config::{GptConfig, Precision};
pub use evaluate::{estimate_loss, Split, EVAL_DOMAIN};
pub use generate::{generate_batch, Generation, GenerationRequest};
pub use kv_cache::KvCache;
pub use model::Gpt;
pub use run::{read_text, token_cross_entropy, GptTrainer};
pub use sampling::SamplingParams;
pub use text::{Text, TextWindows};
pub use train_config::{DataSpec, GptTrainConfig};
