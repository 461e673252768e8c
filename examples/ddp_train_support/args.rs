//! Command-line flags of `ddp_train`: its own (`--backend`, `--world-size`,
//! `--invariant`, `--micro-shards`), peeled off first, then `train_resume`'s, parsed by
//! `train_resume`'s own parser so the two programs share one definition of them.

use super::train_args::{self, ArgError};

pub use super::train_args::Args as TrainArgs;

/// The usage message (ddp_train's flags, then the ones it shares with train_resume).
pub fn usage() -> String {
    format!(
        "\
usage: ddp_train [options]

Data parallel training of train_resume's MLP; the loss curve does not depend on the
number of ranks with --invariant.

  --backend B         threads (default), mpi (build with --features mpi, start with
                      mpirun) or nccl (build with --features nccl, one process per GPU
                      with torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
                      MASTER_PORT)
  --world-size N      ranks for the threads backend (default 1); mpi and nccl take
                      theirs from the launcher
  --invariant         world-size-invariant gradient sums (fixed micro-shards, fixed
                      tree); without it the backend's all-reduce (fast, reproducible
                      only at a fixed world size)
  --micro-shards N    micro-shards of --invariant (a power of two, default 8); the
                      world size must be a power of two dividing it
  --batch-size N      the global batch (all ranks together), divided among the ranks
  --demo              threads: a straight run on 1 rank, the same on 4 ranks, a run on
                      4 ranks killed at --save-at and resumed on 2, each compared with
                      the first (--invariant is implied)

train_resume's flags, shared (except --device: the backend picks it):
{}",
        train_args::USAGE
            .split_once("\n\n")
            .map_or(train_args::USAGE, |(_, flags)| flags)
    )
}

/// Which engine runs the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendFlag {
    Threads,
    Mpi,
    Nccl,
}

/// ddp_train's flags.
#[derive(Clone, Debug)]
pub struct Args {
    pub backend: BackendFlag,
    pub world_size: Option<usize>,
    pub invariant: bool,
    pub micro_shards: Option<usize>,
    /// train_resume's flags (`--demo` and `--help` included).
    pub train: TrainArgs,
}

/// Parses the command line.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, ArgError> {
    let mut backend = None;
    let mut world_size = None;
    let mut invariant = false;
    let mut micro_shards = None;
    let mut rest = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |flag: &str| match inline.clone() {
            Some(v) => Ok(v),
            None => args
                .next()
                .ok_or_else(|| ArgError::MissingValue(flag.to_string())),
        };
        let invalid = |flag: &str, value: &str, expected| ArgError::InvalidValue {
            flag: flag.to_string(),
            value: value.to_string(),
            expected,
        };
        match flag.as_str() {
            "--backend" => {
                let v = value(&flag)?;
                let parsed = match v.as_str() {
                    "threads" => BackendFlag::Threads,
                    "mpi" => BackendFlag::Mpi,
                    "nccl" => BackendFlag::Nccl,
                    _ => return Err(invalid(&flag, &v, "threads, mpi or nccl")),
                };
                if backend.replace(parsed).is_some() {
                    return Err(ArgError::Repeated(flag));
                }
            }
            "--world-size" | "--micro-shards" => {
                let v = value(&flag)?;
                let n: usize = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0 && n <= 1024)
                    .ok_or_else(|| invalid(&flag, &v, "a positive integer up to 1024"))?;
                let slot = if flag == "--world-size" {
                    &mut world_size
                } else {
                    &mut micro_shards
                };
                if slot.replace(n).is_some() {
                    return Err(ArgError::Repeated(flag));
                }
            }
            "--invariant" => {
                if inline.is_some() {
                    return Err(invalid(&flag, inline.as_deref().unwrap_or(""), "no value"));
                }
                if std::mem::replace(&mut invariant, true) {
                    return Err(ArgError::Repeated(flag));
                }
            }
            _ => rest.push(arg),
        }
    }
    let train = train_args::parse(rest)?;
    let backend = backend.unwrap_or(BackendFlag::Threads);
    let conflict = |m: &str| Err(ArgError::Conflict(m.to_string()));
    if train.device.is_some() {
        return conflict("--device is not a ddp_train flag: threads and mpi run on the CPU, nccl on GPU LOCAL_RANK");
    }
    if world_size.is_some() && backend != BackendFlag::Threads {
        return conflict("--world-size is for the threads backend; mpi and nccl take the world size from their launcher");
    }
    if micro_shards.is_some() && !invariant && !train.demo {
        return conflict("--micro-shards needs --invariant");
    }
    if train.demo && (backend != BackendFlag::Threads || world_size.is_some()) {
        return conflict("--demo runs on the threads backend with 1, 4 and 2 ranks itself");
    }
    Ok(Args {
        backend,
        world_size,
        invariant: invariant || train.demo,
        micro_shards,
        train,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Args, ArgError> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn peels_off_its_flags_and_passes_the_rest_on() {
        let a = parse_str(
            "--backend threads --world-size 4 --seed 7 --steps 100 --invariant --out w4.csv",
        )
        .unwrap();
        assert_eq!(
            (a.backend, a.world_size, a.invariant),
            (BackendFlag::Threads, Some(4), true)
        );
        assert_eq!((a.train.seed, a.train.steps), (Some(7), Some(100)));
        assert_eq!(
            parse_str("--backend=mpi").unwrap().backend,
            BackendFlag::Mpi
        );
        assert!(parse_str("--demo").unwrap().invariant);
        for (line, want) in [
            ("--backend gloo", "threads, mpi or nccl"),
            ("--backend mpi --world-size 2", "threads backend"),
            ("--world-size 0", "positive"),
            ("--device cpu", "not a ddp_train flag"),
            ("--micro-shards 4", "needs --invariant"),
            ("--invariant --invariant", "more than once"),
            ("--frobnicate", "unknown"),
            ("--demo --backend mpi", "threads backend"),
        ] {
            let err = parse_str(line).unwrap_err().to_string();
            assert!(err.contains(want), "{line}: {err}");
        }
        assert!(usage().contains("--seed N"));
    }
}
