//! How one token is chosen from a row of logits: greedy, or drawn with a temperature,
//! top-k and top-p (nucleus), from a uniform that belongs to the request and the
//! token's position alone.
//!
//! The choice is host arithmetic in a fixed order: logits to f64, divided by the
//! temperature, the top-k cut (ties kept by lower token id), a softmax summed in token
//! order, the top-p cut over the probabilities sorted high to low (ties by lower id),
//! then the first token, in token order, whose cumulative probability exceeds `u`
//! times the kept total. `u` is [`draw`]'s, a Philox uniform at the key
//! `fold_in(fold_in(Key::new(seed), SAMPLE_DOMAIN), position)`: the same for a request
//! wherever it runs, so its text does not depend on the batch, the thread count or the
//! device, only on its logits.

use rand_core::RngCore;
use rng_gen::stream::convert::uniform_f64;
use rng_gen::{fold_in, Key, PhiloxRng};

/// Sub-key of a request's seed for its draws: after the training run's domains
/// (`crate::train`'s 0 to 3), so a request seeded with a run's seed never reuses a
/// training stream.
pub const SAMPLE_DOMAIN: u64 = 4;

use crate::{NnError, Result};

/// How a request chooses its tokens (vLLM's and SGLang's field names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 for greedy (the most likely token, the lowest id on a tie); otherwise the
    /// logits are divided by it. In `[0, 100]`.
    pub temperature: f64,
    /// Keep only the `k` most likely tokens (`None`: all).
    pub top_k: Option<usize>,
    /// Keep the fewest most likely tokens whose probability sums to at least `p`, in
    /// `(0, 1]` (`None`: all).
    pub top_p: Option<f64>,
}

impl Default for SamplingParams {
    /// Temperature 1, every token: the model's own distribution.
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: None,
            top_p: None,
        }
    }
}

impl SamplingParams {
    /// Errors on a temperature outside `[0, 100]`, a `top_k` of 0 or a `top_p` outside
    /// `(0, 1]`, naming the field and what it expects.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(NnError::invalid("SamplingParams", message));
        if !(0.0..=100.0).contains(&self.temperature) {
            return bad(format!(
                "temperature must be in [0, 100], got {}",
                self.temperature
            ));
        }
        if self.top_k == Some(0) {
            return bad("top_k must be at least 1 (or absent: every token)".into());
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return bad(format!("top_p must be in (0, 1], got {p}"));
            }
        }
        Ok(())
    }
}

/// The uniform in `[0, 1)` that chooses token `position` of the request seeded `seed`.
#[must_use]
pub fn draw(seed: u64, position: u64) -> f64 {
    let mut rng = PhiloxRng::from_key(fold_in(fold_in(Key::new(seed), SAMPLE_DOMAIN), position));
    let (w0, w1) = (rng.next_u32(), rng.next_u32());
    uniform_f64(w0, w1)
}

/// The token `params` choose from `logits` with the uniform `u` (see the module docs).
#[must_use]
pub fn choose(logits: &[f32], params: &SamplingParams, u: f64) -> usize {
    let first_max = |values: &mut dyn Iterator<Item = (usize, f64)>| {
        values.fold((0, f64::NEG_INFINITY), |best, (i, x)| {
            if x > best.1 {
                (i, x)
            } else {
                best
            }
        })
    };
    if params.temperature == 0.0 {
        return first_max(&mut logits.iter().map(|&x| f64::from(x)).enumerate()).0;
    }
    let mut scaled: Vec<f64> = logits
        .iter()
        .map(|&x| f64::from(x) / params.temperature)
        .collect();
    // Token ids from most to least likely, ties by lower id.
    let mut order: Vec<usize> = (0..scaled.len()).collect();
    order.sort_by(|&a, &b| scaled[b].total_cmp(&scaled[a]).then(a.cmp(&b)));
    if let Some(k) = params.top_k {
        for &i in order.iter().skip(k) {
            scaled[i] = f64::NEG_INFINITY;
        }
    }
    let max = scaled[order[0]];
    let mut probs: Vec<f64> = scaled.iter().map(|&x| (x - max).exp()).collect();
    let total: f64 = probs.iter().sum();
    if let Some(p) = params.top_p {
        let mut kept = 0.0;
        for (rank, &i) in order.iter().enumerate() {
            if rank > 0 && kept >= p * total {
                probs[i] = 0.0;
            }
            kept += probs[i];
        }
    }
    let target = u * probs.iter().sum::<f64>();
    let mut cumulative = 0.0;
    for (i, &p) in probs.iter().enumerate() {
        cumulative += p;
        if p > 0.0 && target < cumulative {
            return i;
        }
    }
    order[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_top_k_and_top_p_keep_what_they_say() {
        let logits = [1.0, 3.0, 3.0, 2.0, -1.0];
        let greedy = SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        };
        assert_eq!(choose(&logits, &greedy, 0.9), 1, "the lowest id of a tie");
        let top2 = SamplingParams {
            top_k: Some(2),
            ..SamplingParams::default()
        };
        let picks: Vec<usize> = (0..100)
            .map(|i| choose(&logits, &top2, f64::from(i) / 100.0))
            .collect();
        assert!(
            picks.iter().all(|&t| t == 1 || t == 2) && picks.contains(&1) && picks.contains(&2)
        );
        let nucleus = SamplingParams {
            top_p: Some(0.5),
            ..SamplingParams::default()
        };
        let picks: Vec<usize> = (0..100)
            .map(|i| choose(&logits, &nucleus, f64::from(i) / 100.0))
            .collect();
        assert!(picks.iter().all(|&t| t == 1 || t == 2), "{picks:?}");
        let all: Vec<usize> = (0..1000)
            .map(|i| choose(&logits, &SamplingParams::default(), f64::from(i) / 1000.0))
            .collect();
        assert!((0..5).all(|t| all.contains(&t)));
    }

    #[test]
    fn draws_belong_to_the_seed_and_position() {
        assert_eq!(draw(7, 3).to_bits(), draw(7, 3).to_bits());
        assert_ne!(draw(7, 3), draw(7, 4));
        assert_ne!(draw(7, 3), draw(8, 3));
        assert!((0..1000)
            .map(|i| draw(1, i))
            .all(|u| (0.0..1.0).contains(&u)));
    }

    #[test]
    fn bad_parameters_are_refused() {
        for (params, expected) in [
            (
                SamplingParams {
                    temperature: -0.5,
                    ..SamplingParams::default()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    top_k: Some(0),
                    ..SamplingParams::default()
                },
                "top_k",
            ),
            (
                SamplingParams {
                    top_p: Some(0.0),
                    ..SamplingParams::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    top_p: Some(1.5),
                    ..SamplingParams::default()
                },
                "top_p",
            ),
        ] {
            let err = params.validate().unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
    }
}
