//! ditto's own CPU matmul with one defined order of operations (docs/contract.md §14).
//!
//! Every output element is one chain of fused multiply-adds over `k` in ascending order,
//! starting from `+0.0`:
//!
//! ```text
//! acc = 0;  for p in 0..k { acc = fma(a[i, p], b[p, j], acc) };  c[i, j] = acc
//! ```
//!
//! whatever the blocking, the SIMD level ([`SimdLevel`]) or the thread count. The loops
//! are the usual packed, register-blocked ones (GotoBLAS): `k` is cut into blocks of
//! [`KC`]; for each block, A and B are packed into panels and a micro-kernel updates each
//! `MR x NR` tile of C. The chain continues across `k`-blocks through C itself: a tile
//! *loads* its partial sums (exact f32 values), goes on with the next `k`, and stores
//! them; block sums are never added to each other. Threads split the tiles of one
//! `k`-block, and every tile is updated by one thread, so the thread count changes
//! nothing. Any strided view is read through its strides while packing, so transposes
//! (the backward passes' `grad^T * x`, `x * w^T`) are never copied first.

mod kernels;
mod pack;
#[cfg(test)]
mod tests;

use std::ops::Range;

use rayon::prelude::*;

use kernels::{ARows, Microkernel};
use pack::{pack_a, pack_b, round_up};

use crate::{DType, Result, SimdRequest, TensorError};

/// Depth of a `k`-block: a packed B micro-panel (`KC x NR`) stays in L1.
pub const KC: usize = 256;
/// Rows of C per task (a multiple of every kernel's `MR`).
const MC: usize = 96;
/// Columns of C per task (a multiple of every kernel's `NR`). Narrow enough that the
/// demo's 256-column products make two column blocks, so its two row blocks of unequal
/// height (96 + 32 rows) still split evenly over two threads.
const NC: usize = 128;
/// A is packed when B has more than this many `NR`-column panels (each packed A panel is
/// then reused often enough to pay for the copy).
const PACK_A_MIN_PANELS: usize = 4;
/// Below this many multiply-adds a `k`-block runs on the calling thread. The demo MLP's
/// products (at most 128 x 256 x 256, 2^23) stay there, as in the default matmul
/// (`ops/matmul/gemm_blocks.rs`): fanned out from 2^18, the portable demo step ran no faster on
/// 2 threads than on 1 (benches/RESULTS.md, issue 29).
const PAR_MIN_WORK: usize = 1 << 24;
/// Below this many packed elements a panel set is packed on the calling thread: the demo's
/// panels (at most 256 x 256) copy in microseconds, less than a hand-off to the pool.
const PACK_PAR_MIN: usize = 1 << 17;

/// f32 or f64: what the portable matmul needs of an element.
pub trait PortableElement: Copy + Default + Send + Sync + 'static {
    /// Its dtype (for allocation errors).
    const DTYPE: DType;
    /// `self * a + b` with one rounding (IEEE-754 fusedMultiplyAdd).
    fn mul_add(self, a: Self, b: Self) -> Self;
}

impl PortableElement for f32 {
    const DTYPE: DType = DType::F32;
    fn mul_add(self, a: f32, b: f32) -> f32 {
        f32::mul_add(self, a, b)
    }
}

impl PortableElement for f64 {
    const DTYPE: DType = DType::F64;
    fn mul_add(self, a: f64, b: f64) -> f64 {
        f64::mul_add(self, a, b)
    }
}

/// Which micro-kernel runs. All give the same bits; only speed differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimdLevel {
    /// `mul_add` on scalars (any CPU).
    Scalar,
    /// AVX2 with FMA (x86-64).
    Avx2Fma,
    /// AVX-512F (x86-64).
    Avx512,
}

impl SimdLevel {
    /// The fastest level this CPU runs.
    #[must_use]
    pub fn detected() -> SimdLevel {
        [SimdLevel::Avx512, SimdLevel::Avx2Fma]
            .into_iter()
            .find(|l| l.is_available())
            .unwrap_or(SimdLevel::Scalar)
    }

    /// [`SimdLevel::detected`], narrowed to what `DITTO_SIMD` allows
    /// ([`crate::simd_request`]): how the AVX2 kernel is measured on an AVX-512 machine.
    #[must_use]
    pub fn chosen() -> SimdLevel {
        let detected = SimdLevel::detected();
        match crate::simd_request() {
            SimdRequest::Avx512 => detected,
            SimdRequest::Avx2 if detected != SimdLevel::Scalar => SimdLevel::Avx2Fma,
            _ => SimdLevel::Scalar,
        }
    }

    /// True when this CPU has the level's instructions.
    #[must_use]
    pub fn is_available(self) -> bool {
        match self {
            SimdLevel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx2Fma => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// A read-only 2-D operand: element `(r, c)` is `data[offset + r * row_stride + c *
/// col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a, T> {
    /// The buffer the view reads.
    pub data: &'a [T],
    /// Index of element `(0, 0)`.
    pub offset: usize,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Distance between rows, in elements.
    pub row_stride: usize,
    /// Distance between columns, in elements.
    pub col_stride: usize,
}

impl<'a, T> Operand<'a, T> {
    /// A dense row-major `rows x cols` matrix at the start of `data` (row stride `cols`,
    /// column stride 1). Whether it fits in `data` is checked by the matmul.
    #[must_use]
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Self {
        Operand {
            data,
            offset: 0,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// Checks that every element lies inside `data`.
    fn check(&self, which: &str) -> Result<()> {
        if self.rows == 0 || self.cols == 0 {
            return Ok(());
        }
        let last = (self.rows - 1)
            .checked_mul(self.row_stride)
            .and_then(|r| (self.cols - 1).checked_mul(self.col_stride)?.checked_add(r))
            .and_then(|x| x.checked_add(self.offset));
        match last {
            Some(last) if last < self.data.len() => Ok(()),
            _ => Err(TensorError::InvalidArgument {
                op: "portable matmul",
                message: format!(
                    "{which} ({} x {}, offset {}, strides ({}, {})) reaches past its buffer \
                     of {} elements; expected a view inside it",
                    self.rows,
                    self.cols,
                    self.offset,
                    self.row_stride,
                    self.col_stride,
                    self.data.len()
                ),
            }),
        }
    }

    /// Element `(r, c)`; the caller keeps `r < rows`, `c < cols` (the tests' reference).
    #[cfg(test)]
    fn at(&self, r: usize, c: usize) -> T
    where
        T: Copy,
    {
        self.data[self.offset + r * self.row_stride + c * self.col_stride]
    }
}

/// `a (m x k) * b (k x n)` as a row-major `m x n` vector, with the fastest kernel this
/// CPU has for `T` (AVX-512 / AVX2 for f32, `mul_add` for f64) that `DITTO_SIMD` allows
/// ([`SimdLevel::chosen`]), threads from rayon's current pool. Errors when the shapes
/// disagree or a view reaches past its buffer.
pub fn matmul<T: PortableElement>(a: Operand<'_, T>, b: Operand<'_, T>) -> Result<Vec<T>> {
    matmul_with(a, b, SimdLevel::chosen())
}

/// [`matmul`] with a chosen kernel (for tests and benchmarks: every level gives the same
/// bits). f64 always uses [`SimdLevel::Scalar`]; [`SimdLevel::Avx512`] uses the AVX2
/// tile when `n <= 16`; a level this CPU lacks is an error.
pub fn matmul_with<T: PortableElement>(
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    level: SimdLevel,
) -> Result<Vec<T>> {
    a.check("lhs")?;
    b.check("rhs")?;
    if a.cols != b.rows {
        return Err(TensorError::ShapeMismatch {
            op: "portable matmul",
            lhs: vec![a.rows, a.cols],
            rhs: vec![b.rows, b.cols],
        });
    }
    if !level.is_available() {
        return Err(TensorError::InvalidArgument {
            op: "portable matmul",
            message: format!("{level:?} kernels need CPU features this machine lacks"),
        });
    }
    let count = a
        .rows
        .checked_mul(b.cols)
        .ok_or(TensorError::InvalidArgument {
            op: "portable matmul",
            message: format!("{} x {} output elements overflow usize", a.rows, b.cols),
        })?;
    let mut c = crate::creation::try_with_capacity::<T>(count, T::DTYPE)?;
    if a.cols == 0 {
        // No k-block to start the output in `run`: the empty sums are +0.0.
        c.resize(count, T::default());
        return Ok(c);
    }
    // A narrow product (n <= 16, like the demo's 10-class layer) would fill the
    // AVX-512 tile's 32 columns mostly with padding; the AVX2 tile is 16 wide. Every
    // kernel gives the same bits, so this choice is about speed only.
    let level = if level == SimdLevel::Avx512 && b.cols <= 16 && SimdLevel::Avx2Fma.is_available() {
        SimdLevel::Avx2Fma
    } else {
        level
    };
    let out = Output(c.as_mut_ptr());
    match (as_f32(a), as_f32(b)) {
        (Some(a), Some(b)) => {
            // T is f32 (as_f32 checked its type id), so the buffer is one of f32.
            let out = Output(out.0.cast::<f32>());
            match level {
                #[cfg(target_arch = "x86_64")]
                SimdLevel::Avx512 => run::<f32, kernels::Avx512>(a, b, out),
                #[cfg(target_arch = "x86_64")]
                SimdLevel::Avx2Fma => run::<f32, kernels::Avx2Fma>(a, b, out),
                _ => run::<f32, kernels::Scalar>(a, b, out),
            }
        }
        _ => run::<T, kernels::Scalar>(a, b, out),
    }
    // SAFETY: `count` elements were reserved, and `run` wrote each of them: k > 0, so
    // its first k-block writes every tile of C (the blocks tile it) from +0.0.
    unsafe { c.set_len(count) };
    Ok(c)
}

/// `Some` (the same view) when `T` is f32.
fn as_f32<T: 'static>(o: Operand<'_, T>) -> Option<Operand<'_, f32>> {
    if std::any::TypeId::of::<T>() != std::any::TypeId::of::<f32>() {
        return None;
    }
    // SAFETY: T is f32 (same type id), so the slice is reinterpreted as itself.
    let data = unsafe { std::slice::from_raw_parts(o.data.as_ptr().cast::<f32>(), o.data.len()) };
    Some(Operand {
        data,
        offset: o.offset,
        rows: o.rows,
        cols: o.cols,
        row_stride: o.row_stride,
        col_stride: o.col_stride,
    })
}

/// The output's raw pointer, shared by tasks that write disjoint tiles.
#[derive(Clone, Copy)]
struct Output<T>(*mut T);
// SAFETY: tasks write disjoint tiles (each tile belongs to exactly one task).
unsafe impl<T: Send> Send for Output<T> {}
unsafe impl<T: Send> Sync for Output<T> {}

/// The blocked loops with micro-kernel `K`. B is packed. A is packed too when each of
/// its panels serves many column panels (`n > PACK_A_MIN_PANELS * NR`); otherwise (the
/// demo's narrow products) full `MR`-row panels are read in place through A's strides
/// and only the last partial one is packed, zero-padded. `out` is C's buffer, `m x n`
/// elements, not yet written: the first `k`-block's micro-kernels start their tiles at
/// +0.0 instead of reading them (`k` must be at least 1).
fn run<T: PortableElement, K: Microkernel<T>>(
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    out: Output<T>,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m == 0 || n == 0 {
        return;
    }
    let (mr, nr) = (K::MR, K::NR);
    let n_padded = round_up(n, nr);
    let pack_all = n > PACK_A_MIN_PANELS * nr;
    let full_rows = if pack_all { 0 } else { m - m % mr };
    let packed_rows = round_up(m - full_rows, mr);
    let mut a_tail = vec![T::default(); packed_rows * KC.min(k)];
    let mut b_packed = vec![T::default(); n_padded * KC.min(k)];
    let row_blocks: Vec<Range<usize>> = blocks(m, MC);
    let col_blocks: Vec<Range<usize>> = blocks(n, NC);
    // Column blocks outermost: rayon halves the list, and each half then holds every row
    // block (the last one is often short) of half the columns.
    let tasks: Vec<(Range<usize>, Range<usize>)> = col_blocks
        .iter()
        .flat_map(|c| row_blocks.iter().map(move |r| (r.clone(), c.clone())))
        .collect();
    debug_assert!(k > 0);
    for depth in blocks(k, KC) {
        let kc = depth.len();
        // A one-thread pool would only hand the tasks to its worker and wait (a thread
        // switch per call, for a caller outside the pool such as a data parallel rank's
        // thread); tiles belong to one task and panels to one packing call either way,
        // so this changes speed only.
        let parallel = m * n * kc >= PAR_MIN_WORK && rayon::current_num_threads() > 1;
        let pack_in_parallel = |len: usize| parallel && len >= PACK_PAR_MIN;
        if full_rows < m {
            let tail = Operand {
                offset: a.offset + full_rows * a.row_stride,
                rows: m - full_rows,
                ..a
            };
            let a_len = packed_rows * kc;
            pack_a(
                &tail,
                depth.clone(),
                mr,
                &mut a_tail[..a_len],
                pack_in_parallel(a_len),
            );
        }
        let b_len = n_padded * kc;
        pack_b(
            &b,
            depth.clone(),
            nr,
            &mut b_packed[..b_len],
            pack_in_parallel(b_len),
        );
        let panels = Panels {
            a: &a,
            a_tail: &a_tail[..packed_rows * kc],
            full_rows,
            depth: depth.clone(),
            b: &b_packed[..n_padded * kc],
        };
        let task = |(rows, cols): &(Range<usize>, Range<usize>)| {
            // SAFETY: the tiles of `rows x cols` lie inside C (m x n, row stride n) and
            // belong to this task alone; the panels cover `depth`.
            unsafe {
                update_block::<T, K>(
                    &panels,
                    out,
                    n,
                    rows.clone(),
                    cols.clone(),
                    depth.start == 0,
                );
            }
        };
        if parallel && tasks.len() > 1 {
            tasks.par_iter().for_each(task);
        } else {
            tasks.iter().for_each(task);
        }
    }
}

/// What the micro-kernels read for one `k`-block.
struct Panels<'p, 'a, T> {
    /// A, read in place for rows below `full_rows`.
    a: &'p Operand<'a, T>,
    /// A's rows from `full_rows` on, packed in `MR`-row panels, zero-padded.
    a_tail: &'p [T],
    full_rows: usize,
    depth: Range<usize>,
    /// B packed in `NR`-column panels.
    b: &'p [T],
}

/// `0..len` cut into consecutive ranges of `size` (the last shorter).
pub(crate) fn blocks(len: usize, size: usize) -> Vec<Range<usize>> {
    (0..len.div_ceil(size))
        .map(|i| i * size..((i + 1) * size).min(len))
        .collect()
}

/// Updates every `MR x NR` tile of C's `rows x cols` block for one `k`-block (`fresh`:
/// the first, which starts the tiles at +0.0 without reading them). Full tiles are
/// updated in place; edge tiles through a scratch tile (the packed padding is zero, and
/// its results are dropped).
///
/// # Safety
/// `rows` / `cols` start at multiples of MR / NR and lie inside C (row stride `ldc`);
/// no other thread touches them meanwhile.
unsafe fn update_block<T: PortableElement, K: Microkernel<T>>(
    panels: &Panels<'_, '_, T>,
    out: Output<T>,
    ldc: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    fresh: bool,
) {
    let (mr, nr) = (K::MR, K::NR);
    let kc = panels.depth.len();
    let a = panels.a;
    let mut scratch = [T::default(); 12 * 32];
    debug_assert!(mr * nr <= scratch.len());
    for j0 in cols.clone().step_by(nr) {
        let b_panel = panels.b[j0 * kc..(j0 + nr) * kc].as_ptr();
        let width = nr.min(cols.end - j0);
        for i0 in rows.clone().step_by(mr) {
            let a_rows = if i0 < panels.full_rows {
                // Rows i0 .. i0 + MR and depths `depth` lie inside the checked view.
                let start = a.offset + i0 * a.row_stride + panels.depth.start * a.col_stride;
                ARows {
                    ptr: a.data[start..].as_ptr(),
                    row: a.row_stride,
                    col: a.col_stride,
                }
            } else {
                let panel = (i0 - panels.full_rows) * kc;
                ARows {
                    ptr: panels.a_tail[panel..panel + mr * kc].as_ptr(),
                    row: 1,
                    col: mr,
                }
            };
            let height = mr.min(rows.end - i0);
            // SAFETY: see the function's contract; `a_rows` reads MR rows of `kc` depths
            // inside A's view or the tail panel.
            unsafe {
                let tile = out.0.add(i0 * ldc + j0);
                if height == mr && width == nr {
                    K::update(kc, a_rows, b_panel, tile, ldc, fresh);
                    continue;
                }
                for r in (0..height).filter(|_| !fresh) {
                    for j in 0..width {
                        scratch[r * nr + j] = *tile.add(r * ldc + j);
                    }
                }
                K::update(kc, a_rows, b_panel, scratch.as_mut_ptr(), nr, fresh);
                for r in 0..height {
                    for j in 0..width {
                        *tile.add(r * ldc + j) = scratch[r * nr + j];
                    }
                }
            }
        }
    }
}
