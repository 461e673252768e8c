//! `WarmupCosine`: a linear warm-up then a cosine decay of the learning rate (nanoGPT's
//! `get_lr`), computed the same way on every machine.

use crate::{NnError, Result};

/// The learning rate of step `it` (0-based, the step about to run):
///
/// ```text
/// it < warmup:          lr * (it + 1) / (warmup + 1)
/// it > decay_steps:     min_lr
/// otherwise:            min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr),
///                       r = (it - warmup) / (decay_steps - warmup)
/// ```
///
/// A function of the step alone, so a resumed run needs nothing but its step count to
/// continue the schedule exactly. The cosine is [`cos_pi`], a fixed series in f64, not
/// libm's `cos`, so the rates are the same bits on every machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarmupCosine {
    /// The peak rate, reached at the end of the warm-up.
    pub lr: f64,
    /// The rate after the decay.
    pub min_lr: f64,
    /// Steps of linear warm-up.
    pub warmup: u64,
    /// The step at which the decay reaches `min_lr` (nanoGPT's `lr_decay_iters`).
    pub decay_steps: u64,
}

impl WarmupCosine {
    /// Errors unless `0 <= min_lr <= lr` (finite) and `warmup < decay_steps`.
    pub fn validate(&self) -> Result<()> {
        let finite = self.lr.is_finite() && self.min_lr.is_finite();
        if !finite || self.min_lr < 0.0 || self.min_lr > self.lr {
            return Err(NnError::invalid(
                "WarmupCosine",
                format!(
                    "expected 0 <= min_lr <= lr, both finite, got min_lr {} and lr {}",
                    self.min_lr, self.lr
                ),
            ));
        }
        if self.warmup >= self.decay_steps {
            return Err(NnError::invalid(
                "WarmupCosine",
                format!(
                    "the warm-up ({} steps) must end before the decay does (step {})",
                    self.warmup, self.decay_steps
                ),
            ));
        }
        Ok(())
    }

    /// The rate of step `it` (module docs).
    #[must_use]
    pub fn lr_at(&self, it: u64) -> f64 {
        if it < self.warmup {
            return self.lr * (it + 1) as f64 / (self.warmup + 1) as f64;
        }
        if it > self.decay_steps {
            return self.min_lr;
        }
        let ratio = (it - self.warmup) as f64 / (self.decay_steps - self.warmup) as f64;
        let coeff = 0.5 * (1.0 + cos_pi(ratio));
        self.min_lr + coeff * (self.lr - self.min_lr)
    }
}

/// `cos(pi x)` for `x` in `[0, 1]`: the Taylor series of `cos(y)` at `y = pi x - pi/2`
/// folded to `-sin(y)`, summed term by term in f64 (each term from the last by one
/// multiply and one divide), a fixed sequence of correctly rounded operations. Within
/// a few ulp of `f64::cos`.
#[must_use]
pub fn cos_pi(x: f64) -> f64 {
    // cos(pi x) = -sin(pi x - pi/2) = sin(pi/2 - pi x), and |pi/2 - pi x| <= pi/2,
    // where the sine series converges fast (25 terms reach 10^-40).
    let y = std::f64::consts::FRAC_PI_2 - std::f64::consts::PI * x.clamp(0.0, 1.0);
    let y2 = y * y;
    let (mut term, mut sum) = (y, y);
    for k in 1..25u32 {
        let k = f64::from(k);
        term = -term * y2 / ((2.0 * k) * (2.0 * k + 1.0));
        sum += term;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_is_close_to_cos() {
        for i in 0..=10_000 {
            let x = f64::from(i) / 10_000.0;
            let want = (std::f64::consts::PI * x).cos();
            assert!(
                (cos_pi(x) - want).abs() < 1e-15,
                "{x}: {} vs {want}",
                cos_pi(x)
            );
        }
    }

    #[test]
    fn warm_up_then_decay() {
        let s = WarmupCosine {
            lr: 1e-3,
            min_lr: 1e-4,
            warmup: 100,
            decay_steps: 1000,
        };
        s.validate().unwrap();
        assert_eq!(s.lr_at(0), 1e-3 / 101.0);
        assert_eq!(s.lr_at(99), 1e-3 * 100.0 / 101.0);
        assert_eq!(s.lr_at(100), 1e-3);
        assert!((s.lr_at(550) - 5.5e-4).abs() < 1e-15);
        assert!((s.lr_at(1000) - 1e-4).abs() < 1e-18);
        assert_eq!(s.lr_at(5000), 1e-4);
        assert!(WarmupCosine { warmup: 1000, ..s }.validate().is_err());
        assert!(WarmupCosine { min_lr: 1.0, ..s }.validate().is_err());
    }
}
