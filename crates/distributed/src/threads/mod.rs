//! The threads backend: ranks are threads of one process.
//!
//! For tests, and for data parallel over the cores of one machine without MPI. Each
//! collective is a round at a shared [`hub::Hub`]: every rank posts its tensor, waits for
//! the others, then computes its own result from all posts. Sums run in rank order
//! (`((x0 + x1) + x2) + ...`), so the threads backend is deterministic at a fixed world
//! size, like the others, and no more world-size invariant than they are.

mod hub;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tensor_core::{Device, Tensor};

use crate::engine::{AllGather, AllToAll, Broadcast, Engine, GroupInfo, Sum};
use crate::group::offsets;
use crate::host::{add_assign, like, with_element, with_summable, Summable};
use crate::{Backend, DistError, Result, DEFAULT_TIMEOUT};
use hub::{Args, Hub, Post, Round};

/// One rank of a group of threads. Create all ranks with [`ThreadGroup::new`] and move
/// each into its own thread, or let [`ThreadGroup::run`] do that.
///
/// Dropping a handle tells the others this rank has left: a collective waiting for it
/// fails with [`DistError::PeerExited`] at once instead of hanging. A collective that
/// waits longer than the timeout ([`DEFAULT_TIMEOUT`] unless
/// [`with_timeout`](Self::with_timeout) says otherwise) fails on every waiting rank with
/// [`DistError::CollectiveTimeout`] naming the collective, its sequence number and the
/// ranks that did not arrive. After either, the group is broken and every later call fails.
#[derive(Debug)]
pub struct ThreadGroup {
    info: GroupInfo,
    hub: Arc<Hub>,
    timeout: Duration,
    /// Collectives this rank has called (its round number).
    calls: AtomicU64,
}

impl ThreadGroup {
    /// The `world_size` ranks of a new group, in rank order.
    pub fn new(world_size: usize) -> Result<Vec<ThreadGroup>> {
        if world_size == 0 {
            return Err(DistError::invalid(
                "ThreadGroup::new",
                "world_size must be > 0",
            ));
        }
        let hub = Arc::new(Hub::new(world_size));
        Ok((0..world_size)
            .map(|rank| ThreadGroup {
                info: GroupInfo {
                    rank,
                    world_size,
                    backend: Backend::Threads,
                    device: Device::Cpu,
                },
                hub: Arc::clone(&hub),
                timeout: DEFAULT_TIMEOUT,
                calls: AtomicU64::new(0),
            })
            .collect())
    }

    /// Sets how long this rank waits in one collective.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs `body` on `world_size` scoped threads, one per rank, and returns their
    /// results in rank order, or the first error in rank order. A rank that panics
    /// becomes [`DistError::RankPanicked`] (its handle is dropped during the unwind, so
    /// the others fail with [`DistError::PeerExited`] instead of waiting).
    pub fn run<T, F>(world_size: usize, body: F) -> Result<Vec<T>>
    where
        T: Send,
        F: Fn(ThreadGroup) -> Result<T> + Sync,
    {
        ThreadGroup::run_with_timeout(world_size, DEFAULT_TIMEOUT, body)
    }

    /// [`run`](Self::run) with every rank's collective timeout set to `timeout`.
    pub fn run_with_timeout<T, F>(world_size: usize, timeout: Duration, body: F) -> Result<Vec<T>>
    where
        T: Send,
        F: Fn(ThreadGroup) -> Result<T> + Sync,
    {
        let ranks: Vec<ThreadGroup> = ThreadGroup::new(world_size)?
            .into_iter()
            .map(|g| g.with_timeout(timeout))
            .collect();
        let results: Vec<Result<T>> = std::thread::scope(|scope| {
            let handles: Vec<_> = ranks
                .into_iter()
                .map(|group| {
                    let body = &body;
                    let rank = group.info.rank;
                    scope.spawn(move || {
                        catch_unwind(AssertUnwindSafe(|| body(group))).unwrap_or_else(|payload| {
                            Err(DistError::RankPanicked {
                                rank,
                                message: panic_message(payload.as_ref()),
                            })
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| panic_unreachable(p.as_ref())))
                .collect()
        });
        results.into_iter().collect()
    }

    /// Posts this rank's part of a collective and waits for the round.
    fn exchange(&self, op: &'static str, data: Tensor, args: Args) -> Result<Arc<Round>> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let round =
            self.hub
                .exchange(self.info.rank, call, Post { op, data, args }, self.timeout)?;
        agree(op, &round)?;
        Ok(round)
    }
}

impl Drop for ThreadGroup {
    fn drop(&mut self) {
        self.hub.leave(self.info.rank);
    }
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// `join` fails only if the thread panicked, and `catch_unwind` already caught that.
fn panic_unreachable<T>(payload: &(dyn std::any::Any + Send)) -> T {
    unreachable!(
        "rank thread panicked outside catch_unwind: {}",
        panic_message(payload)
    )
}

/// Checks that every rank of `round` called `op` with fitting arguments; every rank
/// runs the same check on the same posts, so all of them report the same mismatch.
fn agree(op: &'static str, round: &Round) -> Result<()> {
    let mismatch = |message: String| Err(DistError::Mismatch { op, message });
    let first = &round.posts[0];
    for (q, post) in round.posts.iter().enumerate() {
        if post.op != op {
            return mismatch(format!(
                "rank {q} called {} while rank 0 called {op}",
                post.op
            ));
        }
        if post.data.dtype() != first.data.dtype() {
            return mismatch(format!(
                "rank {q} passed {} while rank 0 passed {}",
                post.data.dtype(),
                first.data.dtype()
            ));
        }
    }
    let world = round.posts.len();
    match &first.args {
        Args::Reduce | Args::Broadcast { .. } => {
            for (q, post) in round.posts.iter().enumerate() {
                if post.args != first.args || post.data.elem_count() != first.data.elem_count() {
                    return mismatch(format!(
                        "rank {q} passed {:?} with {} elements, rank 0 {:?} with {}",
                        post.args,
                        post.data.elem_count(),
                        first.args,
                        first.data.elem_count()
                    ));
                }
            }
        }
        Args::Gather { counts } => {
            for (q, post) in round.posts.iter().enumerate() {
                if post.args != first.args {
                    return mismatch(format!(
                        "rank {q} passed {:?}, rank 0 counts {counts:?}",
                        post.args
                    ));
                }
            }
        }
        Args::AllToAll { .. } => {
            // What q sends to r must be what r expects from q.
            for r in 0..world {
                for q in 0..world {
                    let (Args::AllToAll { output_counts, .. }, Args::AllToAll { input_counts, .. }) =
                        (&round.posts[r].args, &round.posts[q].args)
                    else {
                        return mismatch(format!("rank {q} did not call all_to_all"));
                    };
                    if output_counts[q] != input_counts[r] {
                        return mismatch(format!(
                            "rank {q} sends {} elements to rank {r}, which expects {}",
                            input_counts[r], output_counts[q]
                        ));
                    }
                }
            }
        }
        Args::Barrier => {}
    }
    Ok(())
}

/// The sum of every post, folded in rank order.
fn sum_posts<T: Summable>(round: &Round) -> Result<Vec<T>> {
    let mut acc = round.posts[0].data.as_slice::<T>()?.to_vec();
    for post in &round.posts[1..] {
        add_assign(&mut acc, post.data.as_slice::<T>()?);
    }
    Ok(acc)
}

/// Rank `rank`'s `all_to_all` output: from each rank `q`, the run of `q`'s input that
/// `q` addressed to `rank`.
fn gather_addressed<T: tensor_core::Element>(round: &Round, rank: usize) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for post in &round.posts {
        let Args::AllToAll { input_counts, .. } = &post.args else {
            unreachable!("agree() checked every post is all_to_all")
        };
        let start = offsets(input_counts)[rank];
        let values = post.data.as_slice::<T>()?;
        out.extend_from_slice(&values[start..start + input_counts[rank]]);
    }
    Ok(out)
}

impl Engine for ThreadGroup {
    fn info(&self) -> GroupInfo {
        self.info
    }

    fn run_sum(&self, args: Sum<'_>) -> Result<()> {
        let Sum { tensor, dtype } = args;
        let round = self.exchange("all_reduce", tensor.clone(), Args::Reduce)?;
        *tensor = with_summable!(dtype, T => like(tensor, sum_posts::<T>(&round)?)?);
        Ok(())
    }

    fn run_broadcast(&self, args: Broadcast<'_>) -> Result<()> {
        let Broadcast { tensor, src } = args;
        let round = self.exchange("broadcast", tensor.clone(), Args::Broadcast { src })?;
        *tensor = round.posts[src].data.reshape(tensor.dims())?;
        Ok(())
    }

    fn run_all_gather(&self, args: AllGather<'_>) -> Result<()> {
        let counts = Args::Gather {
            counts: args.counts.to_vec(),
        };
        let round = self.exchange("all_gather", args.input.clone(), counts)?;
        let output = args.output;
        *output = with_element!(output.dtype(), T => {
            let mut values = Vec::with_capacity(output.elem_count());
            for post in &round.posts {
                values.extend_from_slice(post.data.as_slice::<T>()?);
            }
            like(output, values)?
        });
        Ok(())
    }

    fn run_all_to_all(&self, args: AllToAll<'_>) -> Result<()> {
        let counts = Args::AllToAll {
            output_counts: args.output_counts.to_vec(),
            input_counts: args.input_counts.to_vec(),
        };
        let round = self.exchange("all_to_all", args.input.clone(), counts)?;
        let output = args.output;
        *output = with_element!(output.dtype(), T => like(output, gather_addressed::<T>(&round, self.info.rank)?)?);
        Ok(())
    }

    fn run_barrier(&self) -> Result<()> {
        let empty = Tensor::from_vec(Vec::<u8>::new(), &[0], Device::Cpu)?;
        self.exchange("barrier", empty, Args::Barrier).map(drop)
    }
}
