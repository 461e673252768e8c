//! The one training loop of every binary (`train_resume`, `ddp_train`, `train_gpt`):
//! [`start`] the run the flags ask for, [`train`] it to `--steps` with the progress
//! lines, the CSV and the checkpoints, then report. It is written once over
//! `nn_mini::train::Run`, so the MLP and the GPT, one process and a rank of a data
//! parallel job all run it; a binary keeps only its flags, its model and its summary
//! line.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::CommandFactory;
use distributed::DdpPlace;
use nn_mini::train::{self, Run, RunConfig, Start, Started};

use super::curves::{CsvError, CurveWriter};
use super::ddp::check_outputs_on_rank0;
use super::elastic::{self, save_due};
use super::flags::{check_same, conflict, RunFlags};
use super::outputs;
use super::report::Report;

/// Where a run executes, as the loop needs to know it before the run exists: which
/// process checks the paths the run will write (and tells the others).
pub trait Place {
    /// Checks every path the run writes before anything else (rank 0 checks, every
    /// rank learns the outcome): a bad one is an error now, not after the training.
    fn check_outputs(&self, flags: &RunFlags) -> Result<(), Box<dyn Error>>;
}

impl Place for () {
    fn check_outputs(&self, flags: &RunFlags) -> Result<(), Box<dyn Error>> {
        Ok(outputs::check(flags)?)
    }
}

impl Place for DdpPlace {
    fn check_outputs(&self, flags: &RunFlags) -> Result<(), Box<dyn Error>> {
        check_outputs_on_rank0(flags, &*self.group)
    }
}

/// The run the flags ask for (program `A`'s): the checkpoint `--resume` names, or with
/// `--resume-latest` the newest in `--checkpoint-dir` that loads, or a fresh one from
/// `fresh` (also when that folder holds none: a job's first start). A resume takes
/// every setting from its checkpoint, passed through `adjust` (the device, the worker
/// count, where a text lies now); flags may only repeat the rest.
pub fn start<R, A>(
    flags: &RunFlags,
    place: &R::Place,
    fresh: impl FnOnce() -> Result<R::Config, Box<dyn Error>>,
    adjust: impl FnMut(&mut R::Config),
) -> Result<Started<R>, Box<dyn Error>>
where
    R: Run,
    R::Place: Place,
    A: CommandFactory,
{
    place.check_outputs(flags)?;
    let how = match (&flags.resume, elastic::checkpoint_dir(flags)) {
        (Some(path), _) => Start::File(path.clone()),
        (None, Some(dir)) if flags.resume_latest => Start::Latest(dir),
        _ => Start::Fresh,
    };
    let started = train::start::<R, Box<dyn Error>>(&how, place, fresh, adjust);
    let started = match (&how, started) {
        (Start::File(path), Err(e)) => {
            return Err(format!("cannot resume from {}: {e}", path.display()).into())
        }
        (_, started) => started?,
    };
    elastic::warn_skipped(&started.skipped);
    if let Some(path) = &started.resumed_from {
        let (run, saved) = (&started.run, started.run.config());
        check_same::<A, _>("--seed", flags.seed, saved.seed())?;
        check_same::<A, _>("--batch-size", flags.batch_size, saved.batch_size())?;
        if run.rank() == 0 {
            println!(
                "resumed {} at step {} (epoch {}, batch {} of the epoch)",
                path.display(),
                run.step_count(),
                run.loader().epoch(),
                run.loader().position()
            );
        }
    }
    Ok(started)
}

/// How the loop runs the steps: the binary's choices beyond [`RunFlags`].
pub struct Steps {
    /// Read the losses from the device every this many steps (and at `--save-at` and
    /// the last step): on a GPU a read waits for the device.
    pub read_every: u64,
    /// Replay each step as a CUDA graph.
    pub cuda_graph: bool,
    /// The CSV has a `val_loss` column (a run that evaluates on held-out data).
    pub val_column: bool,
}

/// What a binary does after each step besides training, given the run and the step:
/// `train_gpt` evaluates on held-out data every `--eval-interval` steps and returns
/// the validation loss for the CSV; the others do nothing (`&mut |_, _| Ok(None)`).
/// It must not draw from the run's streams, so that it never changes the curve.
pub type Evaluate<'a, R> = dyn FnMut(&mut R, u64) -> Result<Option<f32>, Box<dyn Error>> + 'a;

/// Trains `started` to `--steps`: prints `describe`'s line, then steps (each followed
/// by `evaluate`), reading the losses every `steps.read_every` steps into the CSV
/// (`--out`) and the progress lines;
/// saves in `--checkpoint-dir` every `--save-every` steps and at the last, and at
/// `--save-at` writes `--checkpoint` and stops, as a killed job would. Rank 0 prints,
/// writes and finally compares with `--compare` and plots. Returns the run and the
/// report's exit status (1 when the compared curves differ).
pub fn train<R: Run, A: CommandFactory>(
    started: Started<R>,
    flags: &RunFlags,
    steps: &Steps,
    describe: impl FnOnce(&R) -> String,
    evaluate: &mut Evaluate<'_, R>,
) -> Result<(R, ExitCode), Box<dyn Error>> {
    let Started {
        mut run,
        resumed_from,
        ..
    } = started;
    let rank = run.rank();
    let say = |line: String| {
        if rank == 0 {
            println!("{line}");
        }
    };
    run.set_cuda_graph(steps.cuda_graph)?;
    let dir = elastic::checkpoint_dir(flags);
    let done = run.step_count();
    let last = checked_last_step::<A>(flags, done)?;
    say(describe(&run));

    let csv = match rank {
        0 => elastic::open_csv(flags, run.losses(), steps.val_column)?,
        _ => None,
    };
    let mut progress = Progress::new(flags, last, csv);
    while run.step_count() < last {
        run.step_deferred()?;
        let step = run.step_count();
        let val = evaluate(&mut run, step)?;
        if step.is_multiple_of(steps.read_every) || step == last || Some(step) == flags.save_at {
            let first = step + 1 - run.unread_losses() as u64;
            for (k, &loss) in (first..).zip(run.read_losses()?) {
                let val = val.filter(|_| k == step);
                if let Some(line) = progress.record(k, loss, val)? {
                    say(line);
                }
            }
        }
        if let Some(dir) = dir.as_ref().filter(|_| save_due(flags, step, last)) {
            if let Some(saved) = run.save_in(dir)? {
                say(elastic::saved_line(&saved, step));
            }
        }
        if Some(step) == flags.save_at {
            let path = checkpoint_path(flags);
            run.save(&path)?;
            say(format!(
                "saved {} after step {step}; stopping here",
                path.display()
            ));
            break;
        }
    }
    if done == last {
        say(format!(
            "the run had finished: step {done} of {last}; nothing left to train"
        ));
    }
    if rank != 0 {
        return Ok((run, ExitCode::SUCCESS));
    }
    // The comparison with another run, step for step and bit for bit, and the plot of
    // the whole history (restored steps included) over it.
    let rows = elastic::report_rows(flags, &progress.rows, run.losses());
    let code = Report::of(flags).finish(
        &rows,
        run.losses(),
        &progress.val,
        resumed_from.map(|_| done),
    )?;
    Ok((run, code))
}

/// Print a progress line every this many steps.
pub const LOG_EVERY: u64 = 20;

/// A training binary's `main` after parsing its flags: the process-wide switches they
/// ask for, then the demo (`demo` true: the story told by running this program again)
/// or the run itself, and the exit status of either ([`exit_code`]).
pub fn main_of(
    flags: &RunFlags,
    demo: bool,
    run_demo: impl FnOnce() -> Result<ExitCode, Box<dyn Error>>,
    run: impl FnOnce() -> Result<ExitCode, Box<dyn Error>>,
) -> ExitCode {
    flags.apply_switches();
    super::allocator::keep_freed_memory();
    exit_code(if demo { run_demo() } else { run() })
}

/// The exit status of a run: its own, 2 (with clap's message) for flags that
/// contradict each other or the checkpoint, 3 for any other error.
pub fn exit_code(result: Result<ExitCode, Box<dyn Error>>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => match e.downcast::<clap::Error>() {
            Ok(e) => e.exit(),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(3)
            }
        },
    }
}

/// The last step of the run (`--steps`, 200 by default), checked not to lie before
/// the `done` steps a resumed run starts from, and `--save-at` after them. `--steps`
/// equal to `done` trains nothing: a restart of a run that had finished, or a
/// checkpoint resumed only to evaluate it and sample from it.
pub fn checked_last_step<C: CommandFactory>(
    flags: &RunFlags,
    done: u64,
) -> Result<u64, clap::Error> {
    let steps = flags.last_step();
    if steps < done || flags.save_at.is_some_and(|k| k <= done) {
        return Err(conflict::<C>(format!(
            "the run is already at step {done}: --steps ({steps}) must not be earlier and \
             --save-at must be later"
        )));
    }
    Ok(steps)
}

/// Where `--save-at` writes.
pub fn checkpoint_path(flags: &RunFlags) -> PathBuf {
    flags
        .checkpoint
        .clone()
        .unwrap_or_else(|| "checkpoint.safetensors".into())
}

/// The losses of the steps this process runs, each appended to the run's CSV as it
/// comes (`--out`), and a progress line every [`LOG_EVERY`] steps, at the last step and
/// at `--save-at`.
pub struct Progress {
    steps: u64,
    save_at: Option<u64>,
    started: Instant,
    /// `(step, loss)` of every step run here (not the restored ones).
    pub rows: Vec<(u64, f32)>,
    /// `(step, validation loss)` of the steps evaluated here.
    pub val: Vec<(u64, f32)>,
    csv: Option<CurveWriter>,
}

impl Progress {
    /// Progress towards step `steps`, its rows going to `csv` too.
    pub fn new(flags: &RunFlags, steps: u64, csv: Option<CurveWriter>) -> Self {
        Progress {
            steps,
            save_at: flags.save_at,
            started: Instant::now(),
            rows: Vec::new(),
            val: Vec::new(),
            csv,
        }
    }

    /// Records `step`'s loss and validation loss, if it was evaluated (and writes its
    /// CSV row); the progress line, if one is due (`None` otherwise).
    pub fn record(
        &mut self,
        step: u64,
        loss: f32,
        val: Option<f32>,
    ) -> Result<Option<String>, CsvError> {
        self.rows.push((step, loss));
        self.val.extend(val.map(|v| (step, v)));
        if let Some(csv) = &mut self.csv {
            csv.append(step, loss, val)?;
        }
        let steps = self.steps;
        if !step.is_multiple_of(LOG_EVERY) && step != steps && Some(step) != self.save_at {
            return Ok(None);
        }
        let rate = self.rows.len() as f64 / self.started.elapsed().as_secs_f64();
        Ok(Some(format!(
            "step {step:>5}/{steps} | loss {loss:.6} | {rate:>7.1} steps/s"
        )))
    }
}
