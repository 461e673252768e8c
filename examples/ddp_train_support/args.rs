//! Command-line flags of `ddp_train`: its own (`--backend`, `--world-size`,
//! `--invariant`, `--micro-shards`, `--demo`) plus the run's flags it shares with
//! `train_resume` (`examples/common/flags.rs`), parsed by clap (derive). There is no
//! `--device`: the backend picks it.

use clap::builder::RangedU64ValueParser;
use clap::{Parser, ValueEnum};

use crate::common::flags::{conflict, RunFlags};

/// The most ranks of the threads backend, and the most micro-shards.
pub const MAX_RANKS: u64 = 1024;
/// The longest collective timeout, in seconds (a day).
pub const MAX_COLLECTIVE_TIMEOUT_S: u64 = 86_400;

/// Which engine runs the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendFlag {
    /// Ranks are threads of this process (CPU)
    Threads,
    /// One process per rank under mpirun (CPU); build with --features mpi
    Mpi,
    /// One process per GPU, launched like torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
    /// MASTER_ADDR, MASTER_PORT); build with --features nccl
    Nccl,
}

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
    /// Which engine runs the ranks
    #[arg(long, value_enum, default_value_t = BackendFlag::Threads)]
    pub backend: BackendFlag,

    /// Ranks of the threads backend, 1..=1024 [default: 1]; mpi and nccl take theirs
    /// from the launcher
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_RANKS))]
    pub world_size: Option<usize>,

    /// World-size-invariant gradient sums (fixed micro-shards, fixed tree); without it
    /// the backend's all-reduce (fast, reproducible only at a fixed world size)
    #[arg(long)]
    pub invariant: bool,

    /// Micro-shards of --invariant: a power of two in 1..=1024 [default: 8]; the world
    /// size must be a power of two dividing it
    #[arg(long, value_name = "N", value_parser = power_of_two_shards)]
    pub micro_shards: Option<usize>,

    /// Seconds one collective may take before every rank ends with an error naming it,
    /// its sequence number and (threads) the ranks that did not arrive: a dead or stuck
    /// rank. 1..=86400 [default: DITTO_COLLECTIVE_TIMEOUT_S, else 600]. Threads and nccl;
    /// under mpirun the launcher ends the job when a rank dies
    #[arg(long, value_name = "SECONDS", value_parser = RangedU64ValueParser::<u64>::new().range(1..=MAX_COLLECTIVE_TIMEOUT_S))]
    pub collective_timeout: Option<u64>,

    /// Threads backend: a straight run on 1 rank, the same on 4 ranks, a run on 4
    /// ranks killed at --save-at and resumed on 2, each compared with the first
    /// (implies --invariant)
    #[arg(long, conflicts_with_all = ["resume", "compare", "out", "world_size", "checkpoint_dir"])]
    pub demo: bool,

    #[command(flatten)]
    pub run: RunFlags,
}

/// `--micro-shards`: a power of two in 1..=[`MAX_RANKS`].
fn power_of_two_shards(value: &str) -> Result<usize, String> {
    match value.parse::<u64>() {
        Ok(n) if n.is_power_of_two() && n <= MAX_RANKS => Ok(n as usize),
        _ => Err(format!("expected a power of two in 1..={MAX_RANKS}")),
    }
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

    /// The checks clap's attributes cannot state; `--demo` turns on `--invariant`.
    pub fn validated(mut self) -> Result<Self, clap::Error> {
        self.run.validate::<Args>()?;
        let threads = self.backend == BackendFlag::Threads;
        if self.world_size.is_some() && !threads {
            return Err(conflict::<Args>(
                "--world-size is for the threads backend; mpi and nccl take the world size from their launcher".into(),
            ));
        }
        if self.demo && !threads {
            return Err(conflict::<Args>(
                "--demo runs on the threads backend with 1, 4 and 2 ranks itself".into(),
            ));
        }
        if self.collective_timeout.is_some() && self.backend == BackendFlag::Mpi {
            return Err(conflict::<Args>(
                "--collective-timeout is for threads and nccl; under mpirun a rank that dies ends the whole job (docs/distributed.md, running on a cluster)".into(),
            ));
        }
        if self.micro_shards.is_some() && !self.invariant && !self.demo {
            return Err(conflict::<Args>("--micro-shards needs --invariant".into()));
        }
        self.invariant |= self.demo;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(line: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("ddp_train").chain(line.split_whitespace()))?
            .validated()
    }

    #[test]
    fn the_command_is_well_formed_and_help_states_every_range() {
        Args::command().debug_assert();
        let help = Args::command().render_long_help().to_string();
        for range in [
            "1..=1024",
            "1..=1000000",
            "1..=4000",
            "0..=256",
            "1..=86400",
            "--seed",
        ] {
            assert!(
                help.contains(range),
                "--help does not state {range}:\n{help}"
            );
        }
        assert!(!help.contains("--device"));
    }

    #[test]
    fn own_flags_and_shared_ones_parse_and_bad_input_is_refused() {
        let a =
            parse("--backend threads --world-size 4 --seed 7 --steps 100 --invariant --out w4.csv")
                .unwrap();
        assert_eq!(
            (a.backend, a.world_size, a.invariant),
            (BackendFlag::Threads, Some(4), true)
        );
        assert_eq!((a.run.seed, a.run.steps), (Some(7), Some(100)));
        assert_eq!(parse("--backend=mpi").unwrap().backend, BackendFlag::Mpi);
        assert_eq!(parse("").unwrap().backend, BackendFlag::Threads);
        assert!(parse("--demo").unwrap().invariant);
        assert_eq!(
            parse("--invariant --micro-shards 16").unwrap().micro_shards,
            Some(16)
        );
        for (line, want) in [
            ("--backend gloo", "possible values: threads, mpi, nccl"),
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
