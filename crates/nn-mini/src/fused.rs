//! CPU fast paths for the two per-layer reductions/broadcasts that tensor-core's general
//! ops make slow at MLP sizes: adding a bias row to every row of a matrix, and summing
//! a gradient over the batch. Each computes exactly what the general op computes (same
//! operations, same order, same rounding; tests check bit equality) and falls back to
//! the general op for other devices, dtypes or layouts.
//!
//! Why here and not in tensor-core? Measured on the benchmark machine (see
//! `benches/RESULTS.md`), tensor-core's broadcasting `add` walks a generic strided index
//! (about 260 us for a 128 x 256 bias add versus 19 us for a same-shape add) and
//! `sum_dim(0)` reduces lane by lane with a strided stride (about 105 us). These helpers
//! remove ~800 us from a 64-256-256-10 training step until tensor-core grows fast paths.

use tensor_core::{DType, Device, Tensor};

use crate::Result;

/// Rows per block of tensor-core's fixed-order sums (`tensor_core::ops::reduce`):
/// each block is summed in f64 left to right, then the block sums, then one rounding.
const REDUCE_BLOCK: usize = 1024;

/// True when `t` is a contiguous CPU tensor of `dtype`.
fn cpu_contiguous(t: &Tensor, dtype: DType) -> bool {
    t.device() == Device::Cpu && t.dtype() == dtype && t.is_contiguous()
}

/// `m + bias` for `m: [rows, cols]` and `bias: [cols]`, written into `m`'s buffer when it
/// is not shared (a fresh matmul output never is). Same result as `m.add(bias)`.
pub(crate) fn add_row_vector(mut m: Tensor, bias: &Tensor) -> Result<Tensor> {
    let cols = bias.elem_count();
    let fits = m.rank() == 2 && bias.rank() == 1 && m.dims()[1] == cols && cols > 0;
    macro_rules! fast {
        ($t:ty, $dtype:expr) => {
            if fits && cpu_contiguous(&m, $dtype) && cpu_contiguous(bias, $dtype) {
                let b = bias.as_slice::<$t>()?.to_vec();
                for row in m.as_mut_slice::<$t>()?.chunks_exact_mut(cols) {
                    for (x, &b) in row.iter_mut().zip(&b) {
                        *x += b;
                    }
                }
                return Ok(m);
            }
        };
    }
    fast!(f32, DType::F32);
    fast!(f64, DType::F64);
    Ok(m.add(bias)?)
}

/// `g.sum_dim(0, false)` for a 2-D `g`, bit for bit: per column, rows are added in f64
/// in blocks of 1024, block sums added in order, one rounding at the end. Walks `g` row
/// by row (contiguous) instead of column by column.
pub(crate) fn sum_rows(g: &Tensor) -> Result<Tensor> {
    macro_rules! fast {
        ($t:ty, $dtype:expr) => {
            if g.rank() == 2 && cpu_contiguous(g, $dtype) && g.dims()[1] > 0 {
                let cols = g.dims()[1];
                let values = g.as_slice::<$t>()?;
                let mut total = vec![0.0f64; cols];
                let mut block = vec![0.0f64; cols];
                for rows in values.chunks(REDUCE_BLOCK * cols) {
                    block.iter_mut().for_each(|b| *b = 0.0);
                    for row in rows.chunks_exact(cols) {
                        for (b, &x) in block.iter_mut().zip(row) {
                            *b += f64::from(x);
                        }
                    }
                    for (t, b) in total.iter_mut().zip(&block) {
                        *t += b;
                    }
                }
                let out: Vec<$t> = total.into_iter().map(|t| t as $t).collect();
                return Ok(Tensor::from_vec(out, &[cols], Device::Cpu)?);
            }
        };
    }
    fast!(f32, DType::F32);
    fast!(f64, DType::F64);
    Ok(g.sum_dim(0, false)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rng_gen::{Generator, Key};

    fn random(dims: &[usize], dtype: DType, seed: u64) -> Tensor {
        let g = Generator::from_key(Device::Cpu, Key::new(seed));
        rng_gen::randn(dims, dtype, Device::Cpu, Some(&g)).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u64> {
        let t = t.to_dtype(DType::F64).unwrap();
        t.to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(f64::to_bits)
            .collect()
    }

    #[test]
    fn fast_paths_equal_the_general_ops_bit_for_bit() {
        for dtype in [DType::F32, DType::F64] {
            // 2500 rows: three blocks, the last one partial.
            for (rows, cols) in [(1, 1), (128, 256), (2500, 3)] {
                let m = random(&[rows, cols], dtype, 1);
                let b = random(&[cols], dtype, 2);
                let general = m.add(&b).unwrap();
                let shared = m.clone();
                assert_eq!(
                    bits(&add_row_vector(m.clone(), &b).unwrap()),
                    bits(&general)
                );
                assert_eq!(
                    bits(&shared),
                    bits(&m),
                    "a shared buffer is copied, not written"
                );
                assert_eq!(
                    bits(&sum_rows(&m).unwrap()),
                    bits(&m.sum_dim(0, false).unwrap())
                );
            }
        }
        // Strided views take the general path and still agree.
        let m = random(&[7, 5], DType::F32, 3);
        let t = m.t().unwrap();
        assert_eq!(
            bits(&sum_rows(&t).unwrap()),
            bits(&t.sum_dim(0, false).unwrap())
        );
        let b = random(&[7], DType::F32, 4);
        assert_eq!(
            bits(&add_row_vector(t.clone(), &b).unwrap()),
            bits(&t.add(&b).unwrap())
        );
    }
}
