//! Using a trained [`Gpt`]: the loss of a held-out text, and sampling text from it.

use rng_gen::Generator;
use tensor_core::{DType, Device, Tensor};

use super::{token_cross_entropy, Gpt};
use crate::{Module, NnError, Result};

impl Gpt {
    /// The mean next-token cross-entropy of `text` with dropout off: the model reads
    /// `text[..n - 1]` and predicts `text[1..]`. `text` must hold 2 ..= block_size + 1
    /// bytes. Draws no random number and saves nothing for backward.
    pub fn eval_loss(&mut self, text: &[u8]) -> Result<f32> {
        let block = self.config().block_size;
        if text.len() < 2 || text.len() > block + 1 {
            return Err(NnError::invalid(
                "Gpt::eval_loss",
                format!(
                    "a text of {} bytes; expected 2 ..= {} (the position table's {block} plus the next byte)",
                    text.len(),
                    block + 1
                ),
            ));
        }
        let n = text.len() - 1;
        let device = self.device();
        let tokens = |bytes: &[u8]| -> Result<Tensor> {
            let values = bytes.iter().map(|&b| i64::from(b)).collect();
            Ok(Tensor::from_vec(values, &[1, n], Device::Cpu)?.to_device(device)?)
        };
        let logits = self.forward(&tokens(&text[..n])?, false)?;
        let (loss, _) = token_cross_entropy(&logits, &tokens(&text[1..])?)?;
        Ok(loss.to_dtype(DType::F32)?.to_vec::<f32>()?[0])
    }

    /// `count` tokens sampled after `prompt` (at least one token), each drawn from the
    /// model's next-token distribution (temperature 1, dropout off) given the last
    /// `block_size` tokens so far. The draw for each token is one uniform `u` from
    /// `generator` ([`rng_gen::rand`], f32), and the token is the first whose cumulative
    /// probability (summed in f64 over the softmax, in token order) exceeds `u`: the
    /// same generator state gives the same text.
    pub fn generate(
        &mut self,
        prompt: &[u8],
        count: usize,
        generator: &Generator,
    ) -> Result<Vec<u8>> {
        let vocab = self.config().vocab_size;
        if prompt.is_empty() || vocab > 256 {
            return Err(NnError::invalid(
                "Gpt::generate",
                format!(
                    "expected a prompt of at least one byte and a byte vocabulary (at most 256 tokens), got {} bytes and {vocab} tokens",
                    prompt.len()
                ),
            ));
        }
        let (block, device) = (self.config().block_size, self.device());
        let mut tokens: Vec<u8> = prompt.to_vec();
        for _ in 0..count {
            let context = &tokens[tokens.len().saturating_sub(block)..];
            let input = context.iter().map(|&b| i64::from(b)).collect();
            let input =
                Tensor::from_vec(input, &[1, context.len()], Device::Cpu)?.to_device(device)?;
            let logits = self.forward(&input, false)?;
            let last = logits
                .narrow(1, context.len() - 1, 1)?
                .reshape(&[1, vocab])?
                .log_softmax(1)?
                .to_dtype(DType::F64)?
                .to_vec::<f64>()?;
            let u = rng_gen::rand(&[1], DType::F32, generator.device(), Some(generator))?;
            let u = f64::from(u.to_vec::<f32>()?[0]);
            let mut cumulative = 0.0;
            let mut pick = vocab - 1;
            for (token, log_p) in last.iter().enumerate() {
                cumulative += log_p.exp();
                if u < cumulative {
                    pick = token;
                    break;
                }
            }
            tokens.push(pick as u8);
        }
        Ok(tokens[prompt.len()..].to_vec())
    }
}
