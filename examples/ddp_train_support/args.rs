//! Command-line flags of `ddp_train`: the data parallel flags it shares with
//! `train_gpt` (`--backend`, `--world-size`, `--invariant`, `--micro-shards`,
//! `--collective-timeout`, in `examples/common/ddp.rs`), the run's flags it shares with
//! `train_resume` (`examples/common/flags.rs`), and `--demo`, parsed by clap (derive).
//! There is no `--device`: the backend picks it.

use clap::Parser;

use crate::common::ddp::{BackendFlag, DdpFlags};
use crate::common::flags::{conflict, RunFlags};

/// Data parallel training of train_resume's MLP; with --invariant the loss curve does
/// not depend on the number of ranks.
///
/// Rank 0 prints, writes the CSV and the checkpoint, and compares. --batch-size is the
/// global batch (all ranks together), divided among the ranks.
///
/// Exit status: 0 ok, 1 the compared curves differ, 2 bad flags, 3 any other error.
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(name = "ddp_train")]
pub struct Args {
    #[command(flatten)]
    pub ddp: DdpFlags,

    /// Threads backend: a straight run on 1 rank, the same on 4 ranks, a run on 4
    /// ranks killed at --save-at and resumed on 2, each compared with the first
    /// (implies --invariant)
    #[arg(long, conflicts_with_all = ["resume", "compare", "out", "world_size", "checkpoint_dir"])]
    pub demo: bool,

    #[command(flatten)]
    pub run: RunFlags,
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

    /// The backend that runs the ranks (threads unless given).
    pub fn backend(&self) -> BackendFlag {
        self.ddp.backend_or(BackendFlag::Threads)
    }

    /// The checks clap's attributes cannot state; `--demo` turns on `--invariant`.
    pub fn validated(mut self) -> Result<Self, clap::Error> {
        self.run.validate::<Args>()?;
        self.ddp.validate::<Args>(self.backend())?;
        if self.demo && self.backend() != BackendFlag::Threads {
            return Err(conflict::<Args>(
                "--demo runs on the threads backend with 1, 4 and 2 ranks itself".into(),
            ));
        }
        self.ddp.invariant |= self.demo;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::flags::{assert_help_states, parse_line};

    fn parse(line: &str) -> Result<Args, clap::Error> {
        parse_line::<Args>("ddp_train", line)?.validated()
    }

    #[test]
    fn the_command_is_well_formed_and_help_states_every_range() {
        let help = assert_help_states::<Args>(&[
            "1..=1024",
            "1..=1000000",
            "1..=4000",
            "0..=256",
            "1..=86400",
            "--seed",
        ]);
        assert!(!help.contains("--device"));
    }

    #[test]
    fn own_flags_and_shared_ones_parse_and_bad_input_is_refused() {
        let a =
            parse("--backend threads --world-size 4 --seed 7 --steps 100 --invariant --out w4.csv")
                .unwrap();
        assert_eq!(
            (a.backend(), a.ddp.world_size, a.ddp.invariant),
            (BackendFlag::Threads, Some(4), true)
        );
        assert_eq!((a.run.seed, a.run.steps), (Some(7), Some(100)));
        assert_eq!(parse("--backend=mpi").unwrap().backend(), BackendFlag::Mpi);
        assert_eq!(parse("").unwrap().backend(), BackendFlag::Threads);
        assert!(parse("--demo").unwrap().ddp.invariant);
        assert_eq!(
            parse("--invariant --micro-shards 16")
                .unwrap()
                .ddp
                .micro_shards,
            Some(16)
        );
        for (line, want) in [
            ("--backend ucc", "possible values: threads, mpi, nccl, gloo"),
            ("--backend mpi --world-size 2", "threads backend"),
            ("--world-size 0", "0 is not in 1..=1024"),
            ("--world-size 1025", "not in 1..=1024"),
            (
                "--invariant --micro-shards 12",
                "a power of two in 1..=1024",
            ),
            (
                "--invariant --micro-shards 2048",
                "a power of two in 1..=1024",
            ),
            ("--batch-size 4000000000000", "not in 1..=4000"),
            ("--device cpu", "unexpected argument '--device'"),
            ("--micro-shards 4", "needs --invariant"),
            ("--invariant --invariant", "cannot be used multiple times"),
            ("--frobnicate", "unexpected argument"),
            ("--demo --backend mpi", "threads backend"),
            ("--demo --world-size 2", "cannot be used with"),
            ("--collective-timeout 0", "0 is not in 1..=86400"),
            ("--collective-timeout 86401", "not in 1..=86400"),
            ("--collective-timeout 10m", "invalid digit"),
            ("--backend mpi --collective-timeout 5", "under mpirun"),
            ("--demo --checkpoint-dir ck", "cannot be used with"),
        ] {
            let err = parse(line).unwrap_err().to_string();
            assert!(err.contains(want), "{line}: {err}");
        }
    }
}
