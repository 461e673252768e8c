//! The crate's one error type.

use std::time::Duration;

use nn_mini::NnError;
use tensor_core::TensorError;

use crate::Backend;

/// Shorthand for results in `distributed`.
pub type Result<T, E = DistError> = std::result::Result<T, E>;

/// Everything that can go wrong in a process group, the rendezvous, DDP or the
/// distributed sampler. Every variant says what happened and, where it applies, which
/// ranks were involved, so a failure on one rank of many can be read from its log alone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DistError {
    /// A tensor operation rejected its input.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// A layer, loss, optimiser, loader or checkpoint call failed.
    #[error(transparent)]
    Nn(#[from] NnError),
    /// An argument outside its valid range (a bad split, a rank past the world size, ...).
    #[error("{op}: invalid argument: {message}")]
    InvalidArgument {
        /// Where.
        op: &'static str,
        /// What was wrong and what was expected.
        message: String,
    },
    /// Invariant mode on more ranks than micro-shards: each rank needs at least one
    /// micro-shard (a subtree of the fixed sum, docs/contract.md §9.3).
    #[error(
        "invariant mode: a world size of {world_size} is more than the {micro_shards} \
         micro-shards; each rank holds at least one, so use at most {micro_shards} ranks \
         or at least {world_size} micro-shards (a power of two)"
    )]
    TooManyRanks {
        /// The ranks of the group.
        world_size: usize,
        /// The run's micro-shard count.
        micro_shards: usize,
    },
    /// The ranks called a collective with arguments that do not fit together (another
    /// collective, dtype, element count or root), so no rank can complete it.
    #[error("{op}: the ranks disagree: {message}")]
    Mismatch {
        /// The collective.
        op: &'static str,
        /// Which ranks passed what.
        message: String,
    },
    /// A collective did not complete within the collective timeout
    /// ([`crate::DEFAULT_TIMEOUT`], `DITTO_COLLECTIVE_TIMEOUT_S`): a rank died, stopped
    /// or is stuck. Every surviving rank ends with this error, and the group is unusable
    /// afterwards (NCCL: the communicator was aborted).
    #[error(
        "{op} (collective #{sequence} of this group) did not complete within {timeout:?}; {}",
        describe_missing(.missing)
    )]
    CollectiveTimeout {
        /// The collective.
        op: &'static str,
        /// Its number among this group's collectives, counting from 0 (the same on
        /// every rank, since all ranks call the same collectives in the same order).
        sequence: u64,
        /// The limit that expired.
        timeout: Duration,
        /// The ranks that did not arrive, where the backend can know them (the threads
        /// backend does; NCCL does not say which peer it waits for).
        missing: Option<Vec<usize>>,
    },
    /// A collective did not complete within the collective timeout, and the ranks'
    /// progress in the job's store ([`crate::ProgressBoard`]) names the rank(s) that did
    /// not arrive and where they stopped. Like [`DistError::CollectiveTimeout`] (which
    /// it replaces when the store can tell), the group is unusable afterwards.
    #[error("{op} #{sequence} timed out after {timeout:?}: {}", describe_stragglers(.stragglers))]
    CollectiveTimeoutNamed {
        /// The collective.
        op: &'static str,
        /// Its number among this group's collectives, counting from 0.
        sequence: u64,
        /// The limit that expired.
        timeout: Duration,
        /// The ranks that did not arrive, with where they stopped.
        stragglers: Vec<Straggler>,
    },
    /// Some ranks left (their handle was dropped, their process exited or their
    /// connection closed) before they took part.
    #[error("{op}{}: rank(s) {ranks:?} exited before taking part", describe_sequence(.sequence))]
    PeerExited {
        /// What was being waited for.
        op: String,
        /// The collective's number among the group's collectives, when it was one.
        sequence: Option<u64>,
        /// The ranks that are gone.
        ranks: Vec<usize>,
    },
    /// A rank's thread panicked (threads backend); the message is the panic's.
    #[error("rank {rank} panicked: {message}")]
    RankPanicked {
        /// The rank.
        rank: usize,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// An earlier collective failed; the group cannot be used any more (its ranks no
    /// longer agree on which collective comes next).
    #[error("the process group is unusable after an earlier failure: {reason}")]
    Broken {
        /// The first failure.
        reason: String,
    },
    /// Another rank failed at a step every rank takes part in (rank 0 writing or reading
    /// the checkpoint); the others learn it through the group and report it.
    #[error("rank {rank} failed: {message}")]
    RemoteFailure {
        /// The rank that failed.
        rank: usize,
        /// What it failed to do.
        message: String,
    },
    /// A backend was asked for that this build or machine does not have.
    #[error("the {backend} backend is not available: {reason}")]
    BackendUnavailable {
        /// The backend.
        backend: Backend,
        /// Why, and what would make it available.
        reason: String,
    },
    /// Forming the job failed: a launch variable, the rendezvous or its store. Wrapped
    /// whole, so code that only forms jobs matches [`launch::LaunchError`] alone, and a
    /// log reads the same whichever crate returned it.
    #[error(transparent)]
    Launch(#[from] launch::LaunchError),
    /// An operating-system error (files, threads).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The NCCL library reported an error.
    #[error("NCCL {op}: {message}")]
    Nccl {
        /// The call.
        op: &'static str,
        /// NCCL's message.
        message: String,
    },
    /// A Gloo collective or connection failed (Gloo's own message).
    #[error("Gloo {op}: {message}")]
    Gloo {
        /// The call.
        op: &'static str,
        /// Gloo's message.
        message: String,
    },
}

fn describe_missing(missing: &Option<Vec<usize>>) -> String {
    match missing {
        Some(ranks) => format!("rank(s) {ranks:?} did not arrive"),
        None => "the backend does not say which rank(s) did not arrive".into(),
    }
}

fn describe_stragglers(stragglers: &[Straggler]) -> String {
    let named: Vec<String> = stragglers.iter().map(ToString::to_string).collect();
    named.join("; ")
}

fn describe_sequence(sequence: &Option<u64>) -> String {
    sequence.map_or_else(String::new, |n| format!(" (collective #{n} of this group)"))
}

impl DistError {
    /// A [`DistError::InvalidArgument`].
    pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        DistError::InvalidArgument {
            op,
            message: message.into(),
        }
    }
}

impl From<nn_mini::CheckpointError> for DistError {
    /// A checkpoint error arrives the way nn-mini reports it (inside [`NnError`]), so a
    /// caller matches one path whether it came from nn-mini or from here.
    fn from(e: nn_mini::CheckpointError) -> Self {
        DistError::Nn(e.into())
    }
}

/// A rank that did not arrive at a collective that timed out, from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Straggler {
    /// The rank.
    pub rank: usize,
    /// The last collective it entered (`None`: none, or nothing was published).
    pub last_entered: Option<u64>,
    /// How long its record has not changed, when it stopped publishing (a dead rank);
    /// `None` for a rank that is alive but elsewhere.
    pub silent_for: Option<Duration>,
}

impl std::fmt::Display for Straggler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.last_entered {
            Some(n) => write!(f, "rank {} last entered collective #{n}", self.rank)?,
            None => write!(f, "rank {} entered no collective", self.rank)?,
        }
        match self.silent_for {
            Some(d) => write!(
                f,
                " and has shown no sign of life for {:.1}s",
                d.as_secs_f64()
            ),
            None => write!(f, " (it is alive)"),
        }
    }
}
