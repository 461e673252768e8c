//! Command-line flags of `train_resume`: the run's flags shared with `ddp_train`
//! (`examples/common/flags.rs`) plus this program's own, parsed by clap (derive).

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use tensor_core::Device;

use crate::common::flags::RunFlags;

/// Train an MLP, save it mid-run, resume it, and get the same loss curve bit for bit.
///
/// Exit status: 0 ok, 1 the compared curves differ, 2 bad flags, 3 any other error.
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(name = "train_resume")]
pub struct Args {
    #[command(flatten)]
    pub run: RunFlags,

    /// cpu or cuda:N [default: cpu]; on --resume, the device to continue on
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<Device>,

    /// Read the losses from the device every K steps, 1..=256, in one copy (and at
    /// --save-at and the last step) [default: 20]; the CSV holds every step's loss
    /// whatever K is. On a GPU a read waits for the device, so larger K keeps it busier
    #[arg(long, value_name = "K", value_parser = RangedU64ValueParser::<u64>::new().range(1..=256))]
    pub log_every: Option<u64>,

    /// Run each step after the first as a replayed CUDA graph (one graph launch per
    /// step; the same losses bit for bit); needs --device cuda:N, or a resumed CUDA run
    #[arg(long)]
    pub cuda_graph: bool,

    /// The whole story: a straight run, a run killed at --save-at (default 3/5 of
    /// --steps), a resume compared with the straight run
    #[arg(long, conflicts_with_all = ["resume", "compare", "out", "checkpoint_dir"])]
    pub demo: bool,
}

impl Args {
    /// Parses the process's command line; prints the error and exits with status 2 on
    /// bad flags (and prints `--help` and exits with 0).
    pub fn parse_or_exit() -> Self {
        let args = Args::parse();
        if let Err(e) = args.run.validate::<Args>() {
            e.exit();
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::flags::{assert_help_states, parse_line};

    fn parse(line: &str) -> Result<Args, clap::Error> {
        let args = parse_line::<Args>("train_resume", line)?;
        args.run.validate::<Args>()?;
        Ok(args)
    }

    #[test]
    fn the_command_is_well_formed_and_help_states_every_range() {
        assert_help_states::<Args>(&[
            "1..=1000000",
            "1..=4000",
            "0..=256",
            "1..=--steps",
            "1..=256",
        ]);
    }

    #[test]
    fn accepts_both_spellings_and_rejects_bad_input() {
        let a = parse("--seed 7 --steps=200 --workers 3 --device cuda:1 --save-at 120").unwrap();
        assert_eq!(
            (a.run.seed, a.run.steps, a.run.workers, a.run.save_at),
            (Some(7), Some(200), Some(3), Some(120))
        );
        assert_eq!(a.device, Some(Device::Cuda(1)));
        assert!(parse("--demo --deterministic error").is_ok_and(|a| a.demo));
        assert_eq!(
            parse("").unwrap(),
            Args {
                run: RunFlags::default(),
                device: None,
                log_every: None,
                cuda_graph: false,
                demo: false
            }
        );
        for (line, want) in [
            ("--frobnicate", "unexpected argument"),
            ("positional", "unexpected argument"),
            ("--seed", "a value is required"),
            ("--seed -3", "unexpected argument"),
            ("--steps 0", "0 is not in 1..=1000000"),
            ("--steps 1000001", "not in 1..=1000000"),
            (
                "--batch-size 4000000000000",
                "4000000000000 is not in 1..=4000",
            ),
            ("--batch-size 0", "not in 1..=4000"),
            ("--workers 257", "257 is not in 0..=256"),
            ("--log-every 0", "0 is not in 1..=256"),
            ("--log-every 257", "257 is not in 1..=256"),
            ("--save-at 0", "not in 1..=1000000"),
            ("--device gpu", "--device"),
            (
                "--deterministic sometimes",
                "possible values: off, warn, error",
            ),
            ("--seed 1 --seed 2", "cannot be used multiple times"),
            ("--steps 10 --save-at 11", "after the last step"),
            ("--demo --resume x", "cannot be used with"),
            ("--demo=1", "unexpected value"),
            ("--demo --checkpoint-dir ck", "cannot be used with"),
        ] {
            let err = parse(line).unwrap_err().to_string();
            assert!(err.contains(want), "{line}: {err}");
        }
    }
}
