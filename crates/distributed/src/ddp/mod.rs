//! `DistributedDataParallel`: one model replica per rank, gradients summed across ranks.
//!
//! Like PyTorch's DDP, each rank holds the whole model and a share of every global
//! batch; after backward, every rank holds the same gradient (the global batch's mean)
//! and takes the same optimiser step, so the replicas never drift apart. Unlike
//! PyTorch's, the result can be made independent of the number of ranks:
//!
//! | mode | sum | reproducible across |
//! |---|---|---|
//! | [`ReduceMode::Fast`] | the backend's all-reduce of each bucket | runs at the same world size |
//! | [`ReduceMode::Invariant`] | micro-shards summed in one fixed tree ([`tree`]) | runs at any world size up to the shard count |
//!
//! Use the fast mode for throughput when the world size never changes during a
//! project; use the invariant mode when runs must compare across world sizes (1 GPU vs
//! 4, a resume on fewer machines, a debug run on one process) or a checkpoint must move
//! between them. The invariant mode needs each micro-shard's gradient on its own, and
//! two collectives instead of one (moving the same bytes). How it gets the shards'
//! gradients depends on the arithmetic:
//!
//! - **Portable arithmetic on** ([`rows_are_batch_independent`]) and a model whose
//!   layers all support [gradient row groups](nn_mini::GradRowGroups) (every nn-mini
//!   layer does): one forward and one backward over the rank's rows, ordered shard by
//!   shard. Each matmul output element is then one fma chain over its own row
//!   (docs/contract.md §14), so a row's activations and input gradient do not depend on
//!   the rows beside it; only the parameter gradients mix rows, and the layers compute
//!   those per shard, from the shard's rows, with the ops a pass over the shard alone
//!   runs. Each shard's loss and output gradient come from `loss_fn` on the shard's
//!   output rows, as before. The bits are those of one pass per shard
//!   (`tests/integration/ddp_single_pass.rs` compares the two at 1, 2 and 4 ranks).
//! - **Otherwise** one forward and backward per micro-shard (smaller matrix products).
//!   gemm and cuBLAS pick blockings and split-k by the matrix sizes, so outside portable
//!   arithmetic a row's bits may depend on its batch, and the shard passes are what
//!   the micro-shard tree is defined on. A model with a layer that does not support row
//!   groups (the trait's default, e.g. a downstream crate's own module) also runs this
//!   way.
//!
//! Randomness does not depend on the rank layout either way: layers see
//! [`GlobalRows`](nn_mini::GlobalRows), so dropout draws each row at its global position (see
//! [`nn_mini::GlobalRows`]).

mod buckets;
mod overlap;
mod reduce;
mod single_pass;
mod step;
pub mod tree;

use std::sync::Arc;

use nn_mini::Module;
use tensor_core::{DType, Device, Tensor};

pub use buckets::{Buckets, DEFAULT_BUCKET_CAP_BYTES};
pub use reduce::{fast_sum, invariant_sum};
pub use step::LocalRows;
pub use tensor_core::portable::rows_are_batch_independent;

use crate::{DistError, ProcessGroup, Result};

/// How gradients are summed across ranks (see the module docs for when to use which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceMode {
    /// The backend's own all-reduce: one collective per bucket, reproducible at a fixed
    /// world size only.
    Fast,
    /// The global batch is cut into `micro_shards` shards (rows `i % micro_shards`),
    /// each shard's gradient computed as if alone (see the module docs for how) and all
    /// of them summed in one fixed tree: bit-identical for every world size from 1 to
    /// `micro_shards` (rank `r` holds [`tree::shards_of_rank`]'s shards).
    Invariant {
        /// The number of micro-shards, a power of two, fixed for the whole run.
        micro_shards: usize,
    },
}

impl std::fmt::Display for ReduceMode {
    /// `fast` or `invariant:<micro_shards>`, the form checkpoints store.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReduceMode::Fast => write!(f, "fast"),
            ReduceMode::Invariant { micro_shards } => write!(f, "invariant:{micro_shards}"),
        }
    }
}

impl std::str::FromStr for ReduceMode {
    type Err = DistError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            DistError::invalid(
                "ReduceMode::from_str",
                format!("{s:?} is not a mode; expected fast or invariant:<power of two>"),
            )
        };
        match s.split_once(':') {
            None if s == "fast" => Ok(ReduceMode::Fast),
            Some(("invariant", n)) => {
                let micro_shards: usize = n.parse().map_err(|_| bad())?;
                if micro_shards.is_power_of_two() {
                    Ok(ReduceMode::Invariant { micro_shards })
                } else {
                    Err(bad())
                }
            }
            _ => Err(bad()),
        }
    }
}

/// Options of [`DistributedDataParallel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdpConfig {
    /// How gradients are summed.
    pub mode: ReduceMode,
    /// Bucket size cap in bytes (PyTorch's `bucket_cap_mb`).
    pub bucket_cap_bytes: usize,
}

impl DdpConfig {
    /// `mode` with PyTorch's default 25 MiB buckets.
    #[must_use]
    pub fn new(mode: ReduceMode) -> Self {
        DdpConfig {
            mode,
            bucket_cap_bytes: DEFAULT_BUCKET_CAP_BYTES,
        }
    }
}

/// A model replica on one rank.
pub struct DistributedDataParallel<M: Module> {
    module: M,
    group: Arc<dyn ProcessGroup>,
    config: DdpConfig,
    buckets: Buckets,
    dtype: DType,
    device: Device,
    /// Numbers the global batches, for [`GlobalRows`](nn_mini::GlobalRows).
    batches: u64,
}

impl<M: Module> std::fmt::Debug for DistributedDataParallel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedDataParallel")
            .field("rank", &self.group.rank())
            .field("world_size", &self.group.world_size())
            .field("config", &self.config)
            .field("buckets", &self.buckets.sizes())
            .finish()
    }
}

/// FNV-1a, 64 bit: a cheap fingerprint to compare ranks' models (not a security hash).
fn fnv1a(bytes: impl IntoIterator<Item = u8>, mut hash: u64) -> u64 {
    for b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module` on this rank. A collective: every rank calls it. Checks that every
    /// rank has the same parameter names, shapes and dtypes, replaces every rank's
    /// parameters with rank 0's (broadcast, bucket by bucket), then checks that all
    /// ranks now hold identical bytes. Parameters must share one float dtype and one
    /// device.
    pub fn new(module: M, group: Arc<dyn ProcessGroup>, config: DdpConfig) -> Result<Self> {
        const OP: &str = "DistributedDataParallel::new";
        if let ReduceMode::Invariant { micro_shards } = config.mode {
            tree::check_layout(micro_shards, group.world_size())?;
        }
        let params = module.named_parameters();
        let (dtype, device) = match params.first() {
            Some((_, p)) => (p.value.dtype(), p.value.device()),
            None => (DType::F32, Device::Cpu),
        };
        if !matches!(dtype, DType::F32 | DType::F64) {
            return Err(DistError::invalid(
                OP,
                format!("parameters must be f32 or f64, got {dtype}"),
            ));
        }
        let mut layout = FNV_OFFSET;
        for (name, p) in &params {
            if p.value.dtype() != dtype || p.value.device() != device {
                return Err(DistError::invalid(
                    OP,
                    format!(
                        "parameter {name} is {} on {}, the first is {dtype} on {device}; all must match",
                        p.value.dtype(),
                        p.value.device()
                    ),
                ));
            }
            let text = format!("{name}:{:?}:{};", p.value.dims(), p.value.dtype());
            layout = fnv1a(text.into_bytes(), layout);
        }
        let numels: Vec<usize> = params.iter().map(|(_, p)| p.value.elem_count()).collect();
        let buckets = Buckets::new(&numels, dtype.size_in_bytes(), config.bucket_cap_bytes);
        drop(params);
        agree_on(&*group, layout, "parameter names, shapes and dtypes")?;
        let mut ddp = DistributedDataParallel {
            module,
            group,
            config,
            buckets,
            dtype,
            device,
            batches: 0,
        };
        ddp.broadcast_parameters()?;
        let values = ddp
            .module
            .parameters()
            .iter()
            .try_fold(FNV_OFFSET, |h, p| {
                Ok::<_, DistError>(fnv1a(value_bytes(&p.value)?, h))
            })?;
        agree_on(
            &*ddp.group,
            values,
            "parameter values after the broadcast from rank 0",
        )?;
        Ok(ddp)
    }

    /// Replaces this rank's parameters with rank 0's.
    fn broadcast_parameters(&mut self) -> Result<()> {
        let values: Vec<Tensor> = self
            .module
            .parameters()
            .iter()
            .map(|p| p.value.clone())
            .collect();
        let refs: Vec<Option<&Tensor>> = values.iter().map(Some).collect();
        let none = Tensor::zeros(&[0], self.dtype, self.device)?;
        let mut flat = self
            .buckets
            .flatten(&refs, &none, self.dtype, self.device)?;
        for bucket in &mut flat {
            self.group.broadcast(bucket, 0)?;
        }
        let dims: Vec<Vec<usize>> = values.iter().map(|v| v.dims().to_vec()).collect();
        let dims: Vec<&[usize]> = dims.iter().map(Vec::as_slice).collect();
        let (values, _) = self.buckets.unflatten(&flat, &dims)?;
        for (p, v) in self.module.parameters_mut().into_iter().zip(values) {
            p.value = v;
            p.grad = None;
        }
        Ok(())
    }

    /// The wrapped model.
    #[must_use]
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The wrapped model, mutably (for the optimiser step).
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }

    /// The process group.
    #[must_use]
    pub fn group(&self) -> &Arc<dyn ProcessGroup> {
        &self.group
    }

    /// The options.
    #[must_use]
    pub fn config(&self) -> &DdpConfig {
        &self.config
    }

    /// The fixed bucket layout.
    #[must_use]
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// Unwraps the model.
    pub fn into_inner(self) -> M {
        self.module
    }
}

/// The bytes of a tensor's values, for fingerprints.
fn value_bytes(t: &Tensor) -> Result<Vec<u8>> {
    Ok(match t.dtype() {
        DType::F64 => t
            .to_vec::<f64>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        _ => t
            .to_dtype(DType::F32)?
            .to_vec::<f32>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    })
}

/// All-gathers `fingerprint` and errors (on every rank alike) naming the ranks whose
/// value differs from rank 0's.
fn agree_on(group: &dyn ProcessGroup, fingerprint: u64, what: &str) -> Result<()> {
    let world = group.world_size();
    // On the group's device: NCCL moves only tensors on its GPU (the first H100 run of
    // `ddp_train --backend nccl` failed here with CPU tensors).
    let device = group.device();
    let mine = Tensor::from_vec(vec![fingerprint as i64], &[1], Device::Cpu)?.to_device(device)?;
    let mut all = Tensor::zeros(&[world], DType::I64, device)?;
    group.all_gather(&mut all, &mine, &vec![1; world])?;
    let all = all.to_vec::<i64>()?;
    let differ: Vec<usize> = (0..world).filter(|&q| all[q] != all[0]).collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(DistError::Mismatch {
            op: "DistributedDataParallel::new",
            message: format!("rank(s) {differ:?} differ from rank 0 in their {what}"),
        })
    }
}
