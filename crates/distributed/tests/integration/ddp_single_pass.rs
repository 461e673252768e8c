//! Invariant mode under portable arithmetic runs one forward and one backward per rank
//! (row groups, `nn_mini::GradRowGroups`) instead of one per micro-shard; this checks
//! that it gives the very bits of the per-shard passes at every world size 1..=8 on
//! the threads backend, a 5-row batch (empty micro-shards) included, and that each path
//! really runs the number of forwards it claims.
//!
//! Portable arithmetic is a process-wide switch: every test here turns it on, each in
//! a process of its own (`own_process!`), and no test here wants it off.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use distributed::{ProcessGroup, ReduceMode, ThreadGroup};
use nn_mini::{GlobalRows, GradRowGroups, Module, Parameter, Sequential};
use support::ddp_model::{self, model, Trace};
use tensor_core::Tensor;

const MICRO_SHARDS: usize = 8;

/// The test model behind a switch: with `row_groups` off it answers
/// `supports_grad_row_groups() == false`, as a downstream module written without them
/// does, so DDP must fall back to one pass per micro-shard. Counts its forwards.
struct Switched {
    inner: Sequential,
    row_groups: bool,
    forwards: Arc<AtomicUsize>,
}

impl Module for Switched {
    fn forward(&mut self, input: &Tensor, train: bool) -> nn_mini::Result<Tensor> {
        self.forwards.fetch_add(1, Ordering::Relaxed);
        self.inner.forward(input, train)
    }
    fn backward(&mut self, grad_output: &Tensor) -> nn_mini::Result<Tensor> {
        self.inner.backward(grad_output)
    }
    fn backward_params(&mut self, grad_output: &Tensor) -> nn_mini::Result<()> {
        self.inner.backward_params(grad_output)
    }
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        self.inner.visit_parameters(prefix, f);
    }
    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        self.inner.visit_parameters_mut(prefix, f);
    }
    fn set_global_rows(&mut self, rows: Option<&GlobalRows>) {
        self.inner.set_global_rows(rows);
    }
    fn supports_grad_row_groups(&self) -> bool {
        self.row_groups && self.inner.supports_grad_row_groups()
    }
    fn set_grad_row_groups(&mut self, groups: Option<&GradRowGroups>) {
        if self.row_groups {
            self.inner.set_grad_row_groups(groups);
        }
    }
}

/// Every rank's trace at `world` ranks, and the forwards rank 0 ran.
fn train(world: usize, row_groups: bool) -> (Vec<Trace>, usize) {
    tensor_core::use_portable_arithmetic(true);
    let forwards = Arc::new(AtomicUsize::new(0));
    let traces = ThreadGroup::run(world, |pg| {
        let rank = pg.rank();
        let module = Switched {
            inner: model(1 + rank as u64, 16),
            row_groups,
            forwards: if rank == 0 {
                Arc::clone(&forwards)
            } else {
                Arc::new(AtomicUsize::new(0))
            },
        };
        let mode = ReduceMode::Invariant {
            micro_shards: MICRO_SHARDS,
        };
        ddp_model::train_module(Arc::new(pg), mode, module)
    })
    .unwrap();
    (traces, forwards.load(Ordering::Relaxed))
}

#[test]
fn one_pass_gives_the_bits_of_one_pass_per_micro_shard() {
    test_support::own_process!(one_pass_gives_the_bits_of_one_pass_per_micro_shard);
    let (reference, _) = train(1, false);
    // 8 ranks: on the 5-row batch, the ranks of shards 5..7 hold no rows at all.
    for world in 1..=MICRO_SHARDS {
        let (per_shard, shard_forwards) = train(world, false);
        let (single, single_forwards) = train(world, true);
        // 4 steps: one forward per step on the single pass, one per held shard else.
        assert_eq!(single_forwards, 4, "world {world}");
        let rank0_shards = distributed::ddp::tree::shards_of_rank(0, world, MICRO_SHARDS).len();
        assert_eq!(shard_forwards, 4 * rank0_shards, "world {world}");
        for rank in 0..world {
            let (a, b) = (&single[rank], &per_shard[rank]);
            assert_eq!(a.losses, b.losses, "losses, world {world} rank {rank}");
            for (step, (ga, gb)) in a.grads.iter().zip(&b.grads).enumerate() {
                assert_eq!(ga, gb, "gradients, step {step}, world {world} rank {rank}");
            }
            assert_eq!(a.params, b.params, "parameters, world {world} rank {rank}");
            assert_eq!(*a, reference[0], "world {world} rank {rank} against 1 rank");
        }
    }
}

/// The check above can fail: a different micro-shard count sums in another tree and
/// gives other bits, which the comparison sees.
#[test]
fn another_tree_gives_other_bits() {
    test_support::own_process!(another_tree_gives_other_bits);
    tensor_core::use_portable_arithmetic(true);
    let other = ThreadGroup::run(1, |pg| {
        let module = model(1, 16);
        ddp_model::train_module(
            Arc::new(pg),
            ReduceMode::Invariant { micro_shards: 2 },
            module,
        )
    })
    .unwrap();
    let (eight, _) = train(1, true);
    assert_ne!(other[0].grads, eight[0].grads);
}
