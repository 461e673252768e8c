//! `index_add` and `scatter_add`: adding many contributions into shared targets, the ops
//! behind an embedding's backward pass and segment sums, with PyTorch's semantics.
//!
//! Both have a nondeterministic fast path (threads or GPU atomics adding in arrival
//! order) and a deterministic path (each target owned by one thread, contributions in
//! index order); [`Algorithm`] and the deterministic-algorithms switch pick one (see
//! [`crate::determinism`]). The deterministic paths give the bits of a serial loop in
//! index order, so they agree across thread counts, launch configurations and devices:
//! the CUDA kernels add in the same order with the same unfused operations.

use crate::determinism::paths::INDEX_ADD_CPU;
#[cfg(feature = "cuda")]
use crate::determinism::paths::{INDEX_ADD_CUDA, SCATTER_ADD_CUDA};
use crate::determinism::{Algorithm, Chosen};
use crate::ops::accumulate::arrival_order;
use crate::ops::accumulate::{self, IndexAddShape, ScatterArgs, ScatterLanes};
use crate::{DType, Device, Element, Result, Tensor, TensorError};

/// The checked values of an index tensor, each `< size`.
pub(crate) fn index_values(
    op: &'static str,
    index: &Tensor,
    dim: usize,
    size: usize,
) -> Result<Vec<usize>> {
    if index.dtype() != DType::I64 {
        return Err(TensorError::DTypeMismatch {
            op,
            expected: DType::I64,
            got: index.dtype(),
        });
    }
    let host = index.moved_to(Device::Cpu)?;
    let values = host.values::<i64>()?;
    let mut checked = Vec::with_capacity(values.len());
    for (position, &value) in values.iter().enumerate() {
        match usize::try_from(value) {
            Ok(v) if v < size => checked.push(v),
            _ => {
                return Err(TensorError::IndexValueOutOfRange {
                    op,
                    position,
                    value,
                    dim,
                    size,
                })
            }
        }
    }
    Ok(checked)
}

/// The checks `index_add` and `scatter_add` share: `dim` names a dimension of `this`,
/// `source` has its dtype and device, and `index` is on its device.
fn check_operands(
    op: &'static str,
    this: &Tensor,
    dim: usize,
    index: &Tensor,
    source: &Tensor,
) -> Result<()> {
    this.check_dim(op, dim)?;
    this.require_compatible(op, source)?;
    if this.device() != index.device() {
        return Err(TensorError::DeviceMismatch {
            op,
            lhs: this.device(),
            rhs: index.device(),
        });
    }
    Ok(())
}

/// The checked arguments of `index_add`: its shape and index values.
pub struct IndexAddArgs {
    /// The op as `[outer, size, inner]` targets and `[outer, n, inner]` contributions.
    pub shape: IndexAddShape,
    /// The index values, each checked `< size`.
    pub index: Vec<usize>,
}

/// PyTorch's rules: `index` is a 1-D (or 0-D) i64 tensor, `source` has `self`'s dims
/// except `index.len()` along `dim`, and both live on `self`'s device with its dtype.
pub fn check_index_add(
    op: &'static str,
    this: &Tensor,
    dim: usize,
    index: &Tensor,
    source: &Tensor,
) -> Result<IndexAddArgs> {
    check_operands(op, this, dim, index, source)?;
    if index.rank() > 1 {
        return Err(TensorError::RankMismatch {
            op,
            expected: 1,
            got: index.rank(),
        });
    }
    let shape = index_add_shape(op, this.dims(), dim, index.elem_count(), source)?;
    let index = index_values(op, index, dim, shape.size)?;
    Ok(IndexAddArgs { shape, index })
}

/// The shape of an `index_add` into `dims` of `n` contributions along `dim` (checked
/// against the rank), checking `source`'s dims against it.
fn index_add_shape(
    op: &'static str,
    dims: &[usize],
    dim: usize,
    n: usize,
    source: &Tensor,
) -> Result<IndexAddShape> {
    if dim >= dims.len() {
        return Err(TensorError::DimOutOfRange {
            op,
            dim,
            rank: dims.len(),
        });
    }
    let mut expected = dims.to_vec();
    expected[dim] = n;
    if source.dims() != expected {
        return Err(TensorError::InvalidArgument {
            op,
            message: format!(
                "source must have dims {expected:?} (self's dims {dims:?} with the {n} index \
                 elements along dim {dim}), got {:?}",
                source.dims()
            ),
        });
    }
    let shape = IndexAddShape {
        outer: dims[..dim].iter().product(),
        size: dims[dim],
        inner: dims[dim + 1..].iter().product(),
        n,
    };
    Ok(shape)
}

impl Tensor {
    /// `self` with `alpha * source` added at `index` along `dim`, like
    /// `torch.index_add(self, dim, index, source, alpha=alpha)`: for every `k`,
    /// `out[.., index[k], ..] += alpha * source[.., k, ..]`, repeated indices accumulating.
    ///
    /// `index` is a 1-D i64 tensor of values in `0..self.dims()[dim]`; `source` has
    /// `self`'s dims except `index.len()` along `dim`; all three on one device, `self`
    /// and `source` of one float dtype. Runs [`Algorithm::Auto`]: see
    /// [`Tensor::index_add_with`].
    #[track_caller]
    pub fn index_add(
        &self,
        dim: usize,
        index: &Tensor,
        source: &Tensor,
        alpha: f64,
    ) -> Result<Tensor> {
        self.index_add_with(dim, index, source, alpha, Algorithm::Auto)
    }

    /// [`Tensor::index_add`] with the path chosen by `algorithm` and the
    /// deterministic-algorithms switch. The deterministic path adds each target's
    /// contributions in index order (`acc + alpha * x`, a multiply then an add), the same
    /// bits as a serial loop, on every thread count and launch configuration, CPU and
    /// CUDA alike. The fast path (CPU: threads under per-row locks, with 2+ threads;
    /// CUDA: `atomicAdd`) adds them in arrival order. Errors: `NondeterministicOp` for
    /// `Algorithm::Fast` in `Error` mode; `IndexValueOutOfRange`, shape, dtype and
    /// device errors for bad arguments.
    #[track_caller]
    pub fn index_add_with(
        &self,
        dim: usize,
        index: &Tensor,
        source: &Tensor,
        alpha: f64,
        algorithm: Algorithm,
    ) -> Result<Tensor> {
        audited!("index_add", [self, index, source], {
            const OP: &str = "index_add";
            let args = check_index_add(OP, self, dim, index, source)?;
            on_cuda!(self => {
                let chosen = INDEX_ADD_CUDA.choose(algorithm, self.device(), true)?;
                let rows = crate::ops::accumulate::cuda::IndexSource::Tensor(index, &args.index);
                let start = crate::ops::accumulate::cuda::Start::Tensor(self);
                crate::ops::cuda::index_add(start, rows, source, args.shape, alpha, chosen)
            });
            self.index_add_on_cpu(OP, source, &args, alpha, algorithm)
        })
    }

    /// [`Tensor::index_add_with`] with indices checked already against `self`'s size
    /// along `dim` ([`CheckedIndex`](crate::CheckedIndex), placed on `self`'s device with
    /// their sort by target): on CUDA nothing is read back or uploaded, on either path.
    /// The same sums, bit for bit, as `index_add_with` given the same indices.
    #[track_caller]
    pub fn index_add_checked(
        &self,
        dim: usize,
        index: &crate::CheckedIndex,
        source: &Tensor,
        alpha: f64,
        algorithm: Algorithm,
    ) -> Result<Tensor> {
        audited!("index_add", [self, source], {
            const OP: &str = "index_add";
            self.check_dim(OP, dim)?;
            self.require_compatible(OP, source)?;
            index.require_fits(OP, self.dims()[dim], self.device())?;
            let shape = index_add_shape(OP, self.dims(), dim, index.len(), source)?;
            on_cuda!(self => {
                // The sort is on the device already: the owner path costs no more.
                let chosen = INDEX_ADD_CUDA.choose(algorithm, self.device(), false)?;
                let rows = crate::ops::accumulate::cuda::IndexSource::Checked(index);
                let start = crate::ops::accumulate::cuda::Start::Tensor(self);
                crate::ops::cuda::index_add(start, rows, source, shape, alpha, chosen)
            });
            let args = IndexAddArgs {
                shape,
                index: index.as_slice().to_vec(),
            };
            self.index_add_on_cpu(OP, source, &args, alpha, algorithm)
        })
    }

    /// The CPU path of the `index_add` ops, with checked arguments.
    fn index_add_on_cpu(
        &self,
        op: &'static str,
        source: &Tensor,
        args: &IndexAddArgs,
        alpha: f64,
        algorithm: Algorithm,
    ) -> Result<Tensor> {
        self.require_cpu(op)?;
        let pays = arrival_order::private_copies_pay(args.shape);
        let chosen = INDEX_ADD_CPU.choose(algorithm, Device::Cpu, pays)?;
        with_float_dtype!(self.dtype(), op, T => {
            let mut out = self.values::<T>()?.into_owned();
            index_add_cpu::<T>(&mut out, source, args, T::from_f64(alpha), chosen)?;
            Tensor::from_cpu_storage(T::into_storage(out), self.dims())
        })
    }

    /// `Tensor::zeros(dims)` (of `source`'s dtype and device) with
    /// [`index_add_checked`](Self::index_add_checked) applied: an embedding's table
    /// gradient. On CUDA's deterministic path each target's sum starts from +0.0 in the
    /// kernel, so no zeros are written first; the bits are the same either way.
    #[track_caller]
    pub fn zeros_index_add_checked(
        dims: &[usize],
        dim: usize,
        index: &crate::CheckedIndex,
        source: &Tensor,
        alpha: f64,
        algorithm: Algorithm,
    ) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if source.device().is_cuda() {
            const OP: &str = "index_add";
            crate::Shape::new(dims)?;
            let shape = index_add_shape(OP, dims, dim, index.len(), source)?;
            index.require_fits(OP, dims[dim], source.device())?;
            // The sort is on the device already: the owner path costs no more.
            let chosen = INDEX_ADD_CUDA.choose(algorithm, source.device(), false)?;
            let rows = crate::ops::accumulate::cuda::IndexSource::Checked(index);
            let start = crate::ops::accumulate::cuda::Start::Zeros(dims);
            let recorder = crate::audit::OpRecorder::begin("index_add", &[source]);
            return recorder.finish_result(crate::ops::cuda::index_add(
                start, rows, source, shape, alpha, chosen,
            ));
        }
        let zeros = Tensor::zeros(dims, source.dtype(), source.device())?;
        zeros.index_add_checked(dim, index, source, alpha, algorithm)
    }

    /// [`Tensor::index_add`] in place (`torch.Tensor.index_add_`), with
    /// [`Algorithm::Auto`]. A contiguous CPU tensor is updated where it lies (after a
    /// copy if its storage is shared, as every in-place op does).
    #[track_caller]
    pub fn index_add_(
        &mut self,
        dim: usize,
        index: &Tensor,
        source: &Tensor,
        alpha: f64,
    ) -> Result<()> {
        audited_in_place!("index_add_", self, [index, source], {
            const OP: &str = "index_add_";
            if self.device() == Device::Cpu && self.is_contiguous() {
                let args = check_index_add(OP, self, dim, index, source)?;
                let pays = arrival_order::private_copies_pay(args.shape);
                let chosen = INDEX_ADD_CPU.choose(Algorithm::Auto, Device::Cpu, pays)?;
                return with_float_dtype!(self.dtype(), OP, T => {
                    let alpha = T::from_f64(alpha);
                    index_add_cpu::<T>(self.as_mut_slice::<T>()?, source, &args, alpha, chosen)
                });
            }
            let sum = self.index_add(dim, index, source, alpha)?;
            self.copy_from_(&sum)
        })
    }
}

/// The CPU paths of `index_add` into the dense `dst`.
fn index_add_cpu<T: crate::ops::Float>(
    dst: &mut [T],
    source: &Tensor,
    args: &IndexAddArgs,
    alpha: T,
    chosen: Chosen,
) -> Result<()> {
    let src = source.values::<T>()?;
    match chosen {
        Chosen::Deterministic => crate::ops::accumulate::grouped::index_add_deterministic(
            dst,
            &src,
            &args.index,
            args.shape,
            alpha,
        ),
        Chosen::Fast => arrival_order::index_add_fast(dst, &src, &args.index, args.shape, alpha),
    }
    Ok(())
}

/// PyTorch's rules: `self`, `index` and `src` have one rank; `index` is i64 with
/// `index.dims()[d] <= src.dims()[d]` for every `d` and `<= self.dims()[d]` for
/// `d != dim`; `src` has `self`'s float dtype; all on one device. `self` and `src` are
/// taken as dense row-major (the caller passes dense copies' strides).
pub fn check_scatter_add(
    op: &'static str,
    this: &Tensor,
    dim: usize,
    index: &Tensor,
    src: &Tensor,
) -> Result<ScatterArgs> {
    check_operands(op, this, dim, index, src)?;
    for (what, other) in [("index", index), ("src", src)] {
        if other.rank() != this.rank() {
            return Err(TensorError::InvalidArgument {
                op,
                message: format!(
                    "{what} must have self's rank {} (dims {:?}), got dims {:?}",
                    this.rank(),
                    this.dims(),
                    other.dims()
                ),
            });
        }
    }
    let (i_dims, s_dims, d_dims) = (index.dims(), src.dims(), this.dims());
    let fits =
        (0..i_dims.len()).all(|d| i_dims[d] <= s_dims[d] && (d == dim || i_dims[d] <= d_dims[d]));
    if !fits {
        return Err(TensorError::InvalidArgument {
            op,
            message: format!(
                "index dims {i_dims:?} must be <= src dims {s_dims:?} in every dimension and \
                 <= self dims {d_dims:?} in every dimension but {dim}"
            ),
        });
    }
    let values = index_values(op, index, dim, d_dims[dim])?;
    let (dst_strides, src_strides) = (
        this.shape().contiguous_strides(),
        src.shape().contiguous_strides(),
    );
    let n = i_dims[dim];
    let lane_count = values.len().checked_div(n).unwrap_or(0);
    let lane_dims: Vec<usize> = (0..i_dims.len())
        .map(|d| if d == dim { 1 } else { i_dims[d] })
        .collect();
    let mut bases = Vec::with_capacity(lane_count);
    for lane in 0..lane_count {
        let (mut rest, mut dst_base, mut src_base) = (lane, 0, 0);
        for d in (0..lane_dims.len()).rev() {
            let coord = rest % lane_dims[d];
            rest /= lane_dims[d];
            dst_base += coord * dst_strides[d];
            src_base += coord * src_strides[d];
        }
        bases.push((dst_base, src_base));
    }
    let lanes = ScatterLanes {
        bases,
        n,
        index_step: i_dims[dim + 1..].iter().product(),
        dst_step: dst_strides[dim],
        src_step: src_strides[dim],
    };
    Ok(ScatterArgs {
        lanes,
        index: values,
    })
}

impl Tensor {
    /// `self` with `src` added at the positions `index` gives along `dim`, like
    /// `torch.scatter_add(self, dim, index, src)`: for every position `p` of `index`,
    /// `out[p with p[dim] = index[p]] += src[p]`. `index` (i64) and `src` have `self`'s
    /// rank; `index` fits inside `src` and, except along `dim`, inside `self`. Runs
    /// [`Algorithm::Auto`]: see [`Tensor::scatter_add_with`].
    #[track_caller]
    pub fn scatter_add(&self, dim: usize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.scatter_add_with(dim, index, src, Algorithm::Auto)
    }

    /// [`Tensor::scatter_add`] with the path chosen by `algorithm` and the switch. The
    /// deterministic path adds each target's contributions in index order (the bits of a
    /// serial loop) on the CPU and on CUDA alike. CUDA's fast path is `atomicAdd` in
    /// arrival order; the CPU has none (a compare-and-swap version measured slower than
    /// the deterministic path, see `benches/RESULTS.md`), so `Fast` runs the
    /// deterministic path there.
    #[track_caller]
    pub fn scatter_add_with(
        &self,
        dim: usize,
        index: &Tensor,
        src: &Tensor,
        algorithm: Algorithm,
    ) -> Result<Tensor> {
        audited!("scatter_add", [self, index, src], {
            const OP: &str = "scatter_add";
            let args = check_scatter_add(OP, self, dim, index, src)?;
            on_cuda!(self => {
                let chosen = SCATTER_ADD_CUDA.choose(algorithm, self.device(), true)?;
                crate::ops::cuda::scatter_add(self, index, src, &args, chosen)
            });
            self.require_cpu(OP)?;
            let _ = algorithm; // the CPU has only the deterministic path
            with_float_dtype!(self.dtype(), OP, T => {
                let mut out = self.values::<T>()?.into_owned();
                let values = src.values::<T>()?;
                accumulate::scatter_add_deterministic(&mut out, &values, &args.index, &args.lanes);
                Tensor::from_cpu_storage(T::into_storage(out), self.dims())
            })
        })
    }

    /// [`Tensor::scatter_add`] in place (`torch.Tensor.scatter_add_`).
    #[track_caller]
    pub fn scatter_add_(&mut self, dim: usize, index: &Tensor, src: &Tensor) -> Result<()> {
        audited_in_place!("scatter_add_", self, [index, src], {
            let sum = self.scatter_add(dim, index, src)?;
            self.copy_from_(&sum)
        })
    }
}

/// The CPU arrival-order `scatter_add` (compare-and-swap per element), for the
/// benchmark that shows why no op takes it. Same arguments as [`Tensor::scatter_add`].
#[doc(hidden)]
pub fn scatter_add_atomic_cpu(
    this: &Tensor,
    dim: usize,
    index: &Tensor,
    src: &Tensor,
) -> Result<Tensor> {
    const OP: &str = "scatter_add";
    let args = check_scatter_add(OP, this, dim, index, src)?;
    this.require_cpu(OP)?;
    with_float_dtype!(this.dtype(), OP, T => {
        let mut out = this.values::<T>()?.into_owned();
        let values = src.values::<T>()?;
        arrival_order::scatter_add_atomic(&mut out, &values, &args.index, &args.lanes);
        Tensor::from_cpu_storage(T::into_storage(out), this.dims())
    })
}
