//! The meeting point of a [`ThreadGroup`](super::ThreadGroup)'s ranks: each collective
//! is a round in which every rank posts its contribution and then reads everyone's.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tensor_core::Tensor;

use crate::{DistError, Result};

/// What one rank brings to a round.
#[derive(Debug)]
pub(crate) struct Post {
    /// The collective's name; every rank of a round must name the same one.
    pub(crate) op: &'static str,
    /// The rank's data (a contiguous CPU tensor, shared, never written).
    pub(crate) data: Tensor,
    /// The collective's other arguments.
    pub(crate) args: Args,
}

/// The arguments of a collective besides the data, checked for agreement across ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Args {
    /// `all_reduce` (sum).
    Reduce,
    /// `broadcast` from `src`.
    Broadcast { src: usize },
    /// `all_gather` with every rank's count.
    Gather { counts: Vec<usize> },
    /// `all_to_all`: what this rank receives from and sends to each rank.
    AllToAll {
        output_counts: Vec<usize>,
        input_counts: Vec<usize>,
    },
    /// `barrier`.
    Barrier,
}

/// A completed round: every rank's post, in rank order.
#[derive(Debug)]
pub(crate) struct Round {
    number: u64,
    pub(crate) posts: Vec<Post>,
}

#[derive(Debug)]
struct State {
    /// The round being collected.
    round: u64,
    posts: Vec<Option<Post>>,
    posted: usize,
    /// The last completed round. One slot is enough: round `k + 1` cannot complete
    /// before every rank has posted to it, so every rank has read round `k` by then.
    done: Option<Arc<Round>>,
    /// Ranks whose handle was dropped.
    left: Vec<bool>,
    /// Why the group stopped working, once a rank timed out or saw a peer leave.
    broken: Option<Failure>,
}

/// The failure that broke a group, kept so that every rank waiting in the same round
/// reports the same typed error, and later calls report [`DistError::Broken`].
#[derive(Clone, Debug)]
struct Failure {
    round: u64,
    op: &'static str,
    kind: FailureKind,
}

#[derive(Clone, Debug)]
enum FailureKind {
    PeerExited(Vec<usize>),
    Timeout(Duration, Vec<usize>),
}

impl Failure {
    /// The error a rank sees: the failure itself in the round it happened, `Broken` in
    /// any later call.
    fn error(&self, round: u64) -> DistError {
        let error = match &self.kind {
            FailureKind::PeerExited(ranks) => DistError::PeerExited {
                op: self.op.to_string(),
                sequence: Some(self.round),
                ranks: ranks.clone(),
            },
            FailureKind::Timeout(timeout, missing) => DistError::CollectiveTimeout {
                op: self.op,
                sequence: self.round,
                timeout: *timeout,
                missing: Some(missing.clone()),
            },
        };
        if round == self.round {
            error
        } else {
            DistError::Broken {
                reason: error.to_string(),
            }
        }
    }
}

/// Shared by the `world` handles of one thread group.
#[derive(Debug)]
pub(crate) struct Hub {
    world: usize,
    state: Mutex<State>,
    changed: Condvar,
}

impl Hub {
    pub(crate) fn new(world: usize) -> Self {
        Hub {
            world,
            state: Mutex::new(State {
                round: 0,
                posts: (0..world).map(|_| None).collect(),
                posted: 0,
                done: None,
                left: vec![false; world],
                broken: None,
            }),
            changed: Condvar::new(),
        }
    }

    /// The state, recovered if a panicking rank poisoned the lock: every update below
    /// leaves it consistent before anything can panic.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Posts `post` as `rank`'s contribution to the current round (its collective number
    /// `call`, counting from 0) and waits (at most
    /// `timeout`) until every rank has posted. Fails, and marks the group broken for
    /// every rank, when a rank that has not posted left or the time runs out.
    pub(crate) fn exchange(
        &self,
        rank: usize,
        call: u64,
        post: Post,
        timeout: Duration,
    ) -> Result<Arc<Round>> {
        let op = post.op;
        let started = Instant::now();
        let mut state = self.lock();
        // `call` counts this rank's collectives: a rank arriving for the round that
        // failed (after the failure was seen by another) gets the same error.
        if let Some(failure) = &state.broken {
            return Err(failure.error(call));
        }
        let mine = state.round;
        debug_assert_eq!(mine, call, "ranks complete rounds together");
        state.posts[rank] = Some(post);
        state.posted += 1;
        if state.posted == self.world {
            let posts = state
                .posts
                .iter_mut()
                .map(|p| p.take())
                .collect::<Option<Vec<_>>>();
            let posts = posts.expect("every rank posted");
            state.done = Some(Arc::new(Round {
                number: mine,
                posts,
            }));
            state.posted = 0;
            state.round += 1;
            self.changed.notify_all();
        }
        loop {
            if state.round > mine {
                let round = state.done.clone().expect("a completed round");
                debug_assert_eq!(round.number, mine);
                return Ok(round);
            }
            if let Some(failure) = &state.broken {
                return Err(failure.error(mine));
            }
            let absent = |state: &State, also_left: bool| -> Vec<usize> {
                (0..self.world)
                    .filter(|&q| state.posts[q].is_none() && (!also_left || state.left[q]))
                    .collect()
            };
            let gone = absent(&state, true);
            let elapsed = started.elapsed();
            let kind = if !gone.is_empty() {
                Some(FailureKind::PeerExited(gone))
            } else if elapsed >= timeout {
                Some(FailureKind::Timeout(timeout, absent(&state, false)))
            } else {
                None
            };
            if let Some(kind) = kind {
                let failure = Failure {
                    round: mine,
                    op,
                    kind,
                };
                let error = failure.error(mine);
                state.broken = Some(failure);
                self.changed.notify_all();
                return Err(error);
            }
            state = self
                .changed
                .wait_timeout(state, timeout - elapsed)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Records that `rank`'s handle is gone, waking ranks that wait for it.
    pub(crate) fn leave(&self, rank: usize) {
        let mut state = self.lock();
        state.left[rank] = true;
        self.changed.notify_all();
    }
}
