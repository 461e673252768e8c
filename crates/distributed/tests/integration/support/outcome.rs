//! What a data parallel test compares between runs: every loss, every parameter and
//! the dropout generator's position, as bits, after running a trainer of any kind to a
//! step.

use nn_mini::train::Run;
use nn_mini::Module;

/// Loss bits, parameter bits and the dropout generator's offset.
pub type Outcome = (Vec<u32>, Vec<u32>, u64);

/// The [`Outcome`] of a run that ended with `losses`, `model` and the dropout generator
/// at `offset`.
pub fn outcome(losses: &[f32], model: &dyn Module, offset: u64) -> Outcome {
    let params = model
        .parameters()
        .iter()
        .flat_map(|p| p.value.to_vec::<f32>().unwrap())
        .map(f32::to_bits)
        .collect();
    (losses.iter().map(|l| l.to_bits()).collect(), params, offset)
}

/// Steps `run` to step `steps` and returns its [`Outcome`].
pub fn finish<R: Run>(mut run: R, steps: u64) -> Result<Outcome, R::Error> {
    while run.step_count() < steps {
        run.step()?;
    }
    let offset = run.dropout_generator().offset();
    Ok(outcome(run.losses(), run.model(), offset))
}
