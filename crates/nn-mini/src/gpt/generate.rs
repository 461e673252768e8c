//! Generating text with a trained [`Gpt`]: requests, each with its own prompt, seed,
//! sampling parameters, length and stop sequence, run many at a time.
//!
//! A request's tokens depend on the request alone. Its rows go through the model on
//! their own, one token at a time with a key-value cache ([`KvCache`]), and each token
//! is chosen from its own uniform, keyed by the request's seed and the token's position
//! ([`sampling`](super::sampling)). So neither the other requests of a batch, nor its
//! row in it, nor when it joined, nor the thread count changes its text; in portable
//! arithmetic neither does the device. A batch here is how many requests advance in
//! turn, as a server's batch would; the rows of different requests never meet in one
//! op, because a stacked product (gemm over `[requests, width]`) picks its blocking from
//! the row count and may round a row differently in another batch.

use rng_gen::{Generator, Key};
use tensor_core::Device;

use super::sampling::{choose, draw};
use super::{Gpt, GptTrainConfig, KvCache, SamplingParams};
use crate::train::config_of;
use crate::{Checkpoint, NnError, Result};

impl Gpt {
    /// The model a GPT run's checkpoint holds, on `device`, for generation: built from
    /// the checkpoint's configuration, its parameters then restored (the run's text is
    /// not needed). A checkpoint of another kind of run is a `KindMismatch` error.
    pub fn from_checkpoint(ck: &Checkpoint, device: Device) -> Result<Gpt> {
        let config: GptTrainConfig = config_of(ck)?;
        let unused = Generator::from_key(device, Key::new(0));
        let mut model = Gpt::new(&config.model, &unused, &unused)?;
        ck.restore_module("model.", &mut model)?;
        Ok(model)
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationRequest {
    /// The bytes the text continues (at least one).
    pub prompt: Vec<u8>,
    /// The seed of the request's draws.
    pub seed: u64,
    /// Temperature, top-k, top-p.
    pub sampling: SamplingParams,
    /// The most bytes to generate.
    pub max_tokens: usize,
    /// Stop when the text ends with these bytes (they are not part of the result).
    pub stop: Option<Vec<u8>>,
}

/// A request in progress: its cache, the bytes generated so far, whether it is done.
#[derive(Clone, Debug)]
pub struct Generation {
    request: GenerationRequest,
    cache: KvCache,
    /// Tokens to step through before the next choice (after the prompt's prefill).
    pending: Vec<u8>,
    generated: Vec<u8>,
    done: bool,
}

impl Generation {
    /// A request at its start. Errors on an empty prompt or bad sampling parameters.
    pub fn new(request: GenerationRequest) -> Result<Self> {
        Generation::resume(request, Vec::new())
    }

    /// A request continued after `generated` bytes (what an interrupted one had
    /// produced): it prefills the prompt and steps through those bytes as the
    /// uninterrupted one did, so it goes on as that one would.
    pub fn resume(request: GenerationRequest, generated: Vec<u8>) -> Result<Self> {
        if request.prompt.is_empty() {
            return Err(NnError::invalid(
                "Generation::new",
                "an empty prompt; expected at least one byte to continue",
            ));
        }
        request.sampling.validate()?;
        let pending = generated.clone();
        let done = generated.len() >= request.max_tokens;
        Ok(Generation {
            request,
            cache: KvCache::new(),
            pending,
            generated,
            done,
        })
    }

    /// The bytes generated so far (without a stop sequence that ended it).
    #[must_use]
    pub fn text(&self) -> &[u8] {
        &self.generated
    }

    /// True when the request has its `max_tokens` bytes or met its stop sequence.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Generates the next byte (nothing when done).
    pub fn step(&mut self, model: &mut Gpt) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let mut logits = None;
        if self.cache.tokens().is_empty() {
            // nanoGPT's crop: the last block of the prompt.
            let prompt = &self.request.prompt;
            let block = model.config().block_size;
            logits = Some(model.prefill(
                &prompt[prompt.len().saturating_sub(block)..],
                &mut self.cache,
            )?);
        }
        for token in std::mem::take(&mut self.pending) {
            logits = Some(model.forward_cached(token, &mut self.cache)?);
        }
        let logits = logits.expect("the prompt's prefill or a previous choice gives logits");
        let logits = logits.to_dtype(tensor_core::DType::F32)?.to_vec::<f32>()?;
        let position = self.generated.len() as u64;
        let token = choose(
            &logits,
            &self.request.sampling,
            draw(self.request.seed, position),
        );
        let token = u8::try_from(token).map_err(|_| {
            NnError::invalid("Generation::step", format!("token {token} is not a byte"))
        })?;
        self.generated.push(token);
        self.pending.push(token);
        if let Some(stop) = self.request.stop.as_deref().filter(|s| !s.is_empty()) {
            if self.generated.ends_with(stop) {
                self.generated.truncate(self.generated.len() - stop.len());
                self.done = true;
            }
        }
        self.done |= self.generated.len() >= self.request.max_tokens;
        Ok(())
    }
}

/// Generates every request, at most `batch_size` in flight: each round advances every
/// request in flight by one byte, and a finished request's place goes to the next one.
/// `finished(index, text)` is called as each request finishes (in finishing order);
/// an error from it stops the run. Each text is what the request gives alone.
pub fn generate_batch(
    model: &mut Gpt,
    requests: Vec<GenerationRequest>,
    batch_size: usize,
    mut finished: impl FnMut(usize, Vec<u8>) -> Result<()>,
) -> Result<()> {
    if batch_size == 0 {
        return Err(NnError::invalid(
            "generate_batch",
            "a batch of 0; expected at least 1",
        ));
    }
    if model.config().vocab_size > 256 {
        return Err(NnError::invalid(
            "generate_batch",
            format!(
                "a vocabulary of {} tokens; expected a byte-level model (at most 256)",
                model.config().vocab_size
            ),
        ));
    }
    let mut waiting = requests.into_iter().enumerate();
    let mut flight: Vec<(usize, Generation)> = Vec::with_capacity(batch_size);
    loop {
        while flight.len() < batch_size {
            match waiting.next() {
                Some((i, request)) => flight.push((i, Generation::new(request)?)),
                None => break,
            }
        }
        if flight.is_empty() {
            return Ok(());
        }
        for (_, generation) in &mut flight {
            generation.step(model)?;
        }
        let mut k = 0;
        while k < flight.len() {
            if flight[k].1.is_done() {
                let (i, generation) = flight.remove(k);
                finished(i, generation.generated)?;
            } else {
                k += 1;
            }
        }
    }
}
