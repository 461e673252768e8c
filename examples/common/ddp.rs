//! What `ddp_train` and `train_gpt` share to run data parallel: the flags that pick the
//! backend, the world size and the reduce mode, and the launch that starts the ranks
//! (threads in this process, or this process as one rank of an MPI or NCCL job) and
//! runs a program's per-rank function on each.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::{Args, CommandFactory, ValueEnum};
use distributed::{ProcessGroup, ReduceMode, ThreadGroup};

use super::flags::{conflict, RunFlags};
use super::outputs;

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
    /// One process per CPU rank over Gloo, launched like torchrun; build with
    /// --features gloo (Debian's libgloo-dev)
    Gloo,
}

/// The data parallel flags. `backend` is `None` when not given: `ddp_train` then runs
/// the threads backend, `train_gpt` a single process.
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct DdpFlags {
    /// Which engine runs the ranks [default: threads]
    #[arg(long, value_enum)]
    pub backend: Option<BackendFlag>,

    /// Ranks of the threads backend, 1..=1024 [default: 1]; the others take theirs
    /// from the launcher
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_RANKS))]
    pub world_size: Option<usize>,

    /// World-size-invariant gradient sums (fixed micro-shards, fixed tree); without it
    /// the backend's all-reduce (fast, reproducible only at a fixed world size)
    #[arg(long)]
    pub invariant: bool,

    /// Micro-shards of --invariant: a power of two in 1..=1024 [default: 8]; the world
    /// size must be at most it
    #[arg(long, value_name = "N", value_parser = power_of_two_shards)]
    pub micro_shards: Option<usize>,

    /// Seconds one collective may take before every rank ends with an error naming it,
    /// its sequence number and (threads) the ranks that did not arrive: a dead or stuck
    /// rank. 1..=86400 [default: DITTO_COLLECTIVE_TIMEOUT_S, else 600]. Not for mpi:
    /// under mpirun the launcher ends the job when a rank dies
    #[arg(long, value_name = "SECONDS", value_parser = RangedU64ValueParser::<u64>::new().range(1..=MAX_COLLECTIVE_TIMEOUT_S))]
    pub collective_timeout: Option<u64>,
}

/// `--micro-shards`: a power of two in 1..=[`MAX_RANKS`].
fn power_of_two_shards(value: &str) -> Result<usize, String> {
    match value.parse::<u64>() {
        Ok(n) if n.is_power_of_two() && n <= MAX_RANKS => Ok(n as usize),
        _ => Err(format!("expected a power of two in 1..={MAX_RANKS}")),
    }
}

impl DdpFlags {
    /// The backend that runs the ranks, `default` when none was given.
    pub fn backend_or(&self, default: BackendFlag) -> BackendFlag {
        self.backend.unwrap_or(default)
    }

    /// The checks clap's attributes cannot state, for program `C` whose backend is
    /// `backend`.
    pub fn validate<C: CommandFactory>(&self, backend: BackendFlag) -> Result<(), clap::Error> {
        if self.world_size.is_some() && backend != BackendFlag::Threads {
            return Err(conflict::<C>(
                "--world-size is for the threads backend; mpi, nccl and gloo take the world size from their launcher".into(),
            ));
        }
        if self.collective_timeout.is_some() && backend == BackendFlag::Mpi {
            return Err(conflict::<C>(
                "--collective-timeout is for threads, nccl and gloo; under mpirun a rank that dies ends the whole job (docs/distributed.md, running on a cluster)".into(),
            ));
        }
        if self.micro_shards.is_some() && !self.invariant {
            return Err(conflict::<C>("--micro-shards needs --invariant".into()));
        }
        Ok(())
    }

    /// The reduce mode the flags ask for: invariant with `--invariant` (8 micro-shards
    /// unless `--micro-shards` says otherwise), otherwise none (a fresh run then sums
    /// fast, a resume continues the saved mode).
    pub fn asked_mode(&self) -> Option<ReduceMode> {
        self.invariant.then(|| ReduceMode::Invariant {
            micro_shards: self.micro_shards.unwrap_or(8),
        })
    }
}

/// A program's work on one rank: given the rank's process group, its exit code.
pub type RankMain<'a> =
    dyn Fn(Arc<dyn ProcessGroup>) -> Result<ExitCode, Box<dyn Error>> + Sync + 'a;

/// Starts the ranks on `backend` and returns rank 0's exit code. `batch` is a fresh
/// run's global batch (`None` on a resume, which takes its batch from the checkpoint),
/// checked in fast mode to divide among the ranks before they meet (the invariant mode
/// deals whole micro-shards, any batch size), so a bad launch is an error on
/// every rank at once rather than a hang in a collective. `program` names the example
/// in the hint to build it with a missing feature.
pub fn launch<C: CommandFactory>(
    flags: &DdpFlags,
    backend: BackendFlag,
    batch: Option<usize>,
    program: &str,
    run_rank: &RankMain<'_>,
) -> Result<ExitCode, Box<dyn Error>> {
    let batch = batch.filter(|_| !flags.invariant);
    let timeout = match flags.collective_timeout {
        Some(seconds) => Duration::from_secs(seconds),
        None => distributed::collective_timeout_from_env()?,
    };
    match backend {
        BackendFlag::Threads => {
            let world = flags.world_size.unwrap_or(1);
            check_batch_divides::<C>(batch, world, "--world-size")?;
            // Each rank runs in its own thread; rank 0's exit code is the program's.
            let codes = ThreadGroup::run_with_timeout(world, timeout, |pg| {
                let rank = pg.rank();
                run_rank(Arc::new(pg)).map_err(|e| distributed::DistError::RemoteFailure {
                    rank,
                    message: e.to_string(),
                })
            });
            Ok(codes?.swap_remove(0))
        }
        BackendFlag::Mpi => mpi_group(program).and_then(run_rank),
        BackendFlag::Nccl | BackendFlag::Gloo => {
            // torchrun's variables, checked before the rendezvous (typed errors naming
            // the variable and its range).
            let env = distributed::LaunchEnv::from_env()?;
            check_batch_divides::<C>(batch, env.world_size, "WORLD_SIZE")?;
            torchrun_group(backend, timeout, program).and_then(run_rank)
        }
    }
}

/// Rank 0, the only rank that writes, checks every path the run writes
/// ([`outputs::check`]) before anything else, and every rank learns the outcome: a bad
/// path ends all ranks now, not after the training. A collective.
pub fn check_outputs_on_rank0(
    flags: &RunFlags,
    group: &dyn ProcessGroup,
) -> Result<(), Box<dyn Error>> {
    let checked = match group.rank() {
        0 => outputs::check(flags),
        _ => Ok(()),
    };
    if !distributed::broadcast_flag(group, checked.is_ok(), 0)? {
        checked?;
        return Err(distributed::DistError::RemoteFailure {
            rank: 0,
            message: "cannot write the run's outputs (its error names the path)".into(),
        }
        .into());
    }
    Ok(())
}

/// A fresh run's global batch must divide among the ranks.
fn check_batch_divides<C: CommandFactory>(
    batch: Option<usize>,
    world: usize,
    source: &str,
) -> Result<(), Box<dyn Error>> {
    match batch {
        Some(batch) if !batch.is_multiple_of(world) => Err(conflict::<C>(format!(
            "--batch-size {batch} (the global batch) does not divide among the {world} ranks of {source}: expected a multiple of {world}"
        ))
        .into()),
        _ => Ok(()),
    }
}

#[cfg(feature = "mpi")]
fn mpi_group(_program: &str) -> Result<Arc<dyn ProcessGroup>, Box<dyn Error>> {
    Ok(Arc::new(distributed::MpiGroup::init()?))
}

#[cfg(not(feature = "mpi"))]
fn mpi_group(program: &str) -> Result<Arc<dyn ProcessGroup>, Box<dyn Error>> {
    Err(format!(
        "this binary was built without MPI: cargo build --release --features mpi --example {program}"
    )
    .into())
}

/// How long a torchrun-style job may take to form.
const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(300);

/// Joins the NCCL or Gloo job, each collective bounded by `collective_timeout`, or says
/// which feature this binary lacks.
#[cfg_attr(not(any(feature = "nccl", feature = "gloo")), allow(unused_variables))]
fn torchrun_group(
    backend: BackendFlag,
    collective_timeout: Duration,
    program: &str,
) -> Result<Arc<dyn ProcessGroup>, Box<dyn Error>> {
    match backend {
        #[cfg(feature = "nccl")]
        BackendFlag::Nccl => Ok(Arc::new(
            distributed::NcclGroup::from_env(RENDEZVOUS_TIMEOUT)?.with_timeout(collective_timeout),
        )),
        #[cfg(feature = "gloo")]
        BackendFlag::Gloo => Ok(Arc::new(
            distributed::GlooGroup::from_env(RENDEZVOUS_TIMEOUT)?.with_timeout(collective_timeout),
        )),
        _ => {
            let (feature, needs) = match backend {
                BackendFlag::Gloo => ("gloo", " (Gloo's headers: apt-get install libgloo-dev)"),
                _ => ("nccl", ""),
            };
            Err(format!(
                "this binary was built without {feature}: cargo build --release --features {feature} --example {program}{needs}"
            )
            .into())
        }
    }
}
