//! Every collective of a `ProcessGroup` against a serial reference, run by each rank of
//! any backend (the threads test calls it from threads, the MPI tests from processes
//! under `mpirun`). Each rank can compute every other rank's input, so the expected
//! output is computed locally, element by element, and compared bit for bit.
//!
//! Values are small integers, so a sum is exact in every dtype whatever order the
//! backend adds in (MPI and NCCL choose their own); the order itself is tested where it
//! is defined (the threads backend folds in rank order).

use std::time::Duration;

use distributed::{even_counts, DistError, ProcessGroup, ReduceOp};
use tensor_core::{bf16, f16, DType, Device, Tensor};

/// Element counts: empty, single, uneven against 2 and 4 ranks, and larger.
pub const LENGTHS: [usize; 6] = [0, 1, 3, 7, 1000, 4099];

/// `error`'s fields `(op, sequence, timeout, missing)` if it is a
/// [`DistError::CollectiveTimeout`], to compare in one `assert_eq!`; any other error
/// fails the test, naming it.
pub fn timeout_fields(error: &DistError) -> (&'static str, u64, Duration, Option<Vec<usize>>) {
    match error {
        DistError::CollectiveTimeout {
            op,
            sequence,
            timeout,
            missing,
        } => (op, *sequence, *timeout, missing.clone()),
        other => panic!("expected a collective timeout, got {other}"),
    }
}

/// Rank `rank`'s input of `n` elements of `dtype` for test case `salt`: integers in
/// [-100, 100] (exact in every dtype; bool is odd/even, unsigned types take abs).
pub fn input(rank: usize, n: usize, dtype: DType, salt: usize) -> Tensor {
    let ints: Vec<i64> = (0..n)
        .map(|i| ((rank * 7919 + i * 31 + salt * 101) % 201) as i64 - 100)
        .collect();
    let t = match dtype {
        DType::F32 => Tensor::from_vec(ints.iter().map(|&v| v as f32).collect(), &[n], Device::Cpu),
        DType::F64 => Tensor::from_vec(ints.iter().map(|&v| v as f64).collect(), &[n], Device::Cpu),
        DType::F16 => Tensor::from_vec(
            ints.iter().map(|&v| f16::from_f32(v as f32)).collect(),
            &[n],
            Device::Cpu,
        ),
        DType::BF16 => Tensor::from_vec(
            ints.iter().map(|&v| bf16::from_f32(v as f32)).collect(),
            &[n],
            Device::Cpu,
        ),
        DType::I64 => Tensor::from_vec(ints.clone(), &[n], Device::Cpu),
        DType::U32 => Tensor::from_vec(
            ints.iter().map(|&v| v.unsigned_abs() as u32).collect(),
            &[n],
            Device::Cpu,
        ),
        DType::U8 => Tensor::from_vec(
            ints.iter().map(|&v| v.unsigned_abs() as u8).collect(),
            &[n],
            Device::Cpu,
        ),
        DType::Bool => Tensor::from_vec(
            ints.iter().map(|&v| v % 2 != 0).collect(),
            &[n],
            Device::Cpu,
        ),
    };
    t.unwrap()
}

/// `t` on the rank's device (NCCL moves device memory only; the CPU backends take it as is).
pub fn on(pg: &dyn ProcessGroup, t: Tensor) -> Tensor {
    t.to_device(pg.device()).unwrap()
}

/// The elements of a tensor as bit patterns, so floats compare bit for bit (and -0.0,
/// NaN are not smoothed over).
pub fn bits(t: &Tensor) -> Vec<u64> {
    t.to_bits().unwrap()
}

/// `a + b` element-wise for the summable dtypes (the serial reference of all_reduce).
fn add(a: &Tensor, b: &Tensor) -> Tensor {
    let n = a.elem_count();
    let t = match a.dtype() {
        DType::F32 => {
            let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
            Tensor::from_vec(
                a.iter().zip(&b).map(|(x, y)| x + y).collect(),
                &[n],
                Device::Cpu,
            )
        }
        DType::F64 => {
            let (a, b) = (a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
            Tensor::from_vec(
                a.iter().zip(&b).map(|(x, y)| x + y).collect(),
                &[n],
                Device::Cpu,
            )
        }
        _ => {
            let (a, b) = (a.to_vec::<i64>().unwrap(), b.to_vec::<i64>().unwrap());
            Tensor::from_vec(
                a.iter().zip(&b).map(|(x, y)| x + y).collect(),
                &[n],
                Device::Cpu,
            )
        }
    };
    t.unwrap()
}

/// Rank-order concatenation of 1-D tensors (an empty list gives an empty tensor).
fn concat(parts: &[Tensor], dtype: DType) -> Tensor {
    if parts.is_empty() {
        return input(0, 0, dtype, 0);
    }
    Tensor::cat(parts, 0).unwrap()
}

/// How many elements rank `from` sends rank `to` in all_to_all case `salt`: 0 to 3, so
/// some pairs send nothing and the splits are uneven.
pub fn pair_count(from: usize, to: usize, salt: usize) -> usize {
    (from + 2 * to + salt) % 4
}

/// Runs every check on this rank; panics with a message on the first wrong element.
pub fn check_all(pg: &dyn ProcessGroup) {
    check_all_reduce(pg);
    check_broadcast(pg);
    check_all_gather(pg);
    check_all_to_all(pg);
    check_local_errors(pg);
    pg.barrier().unwrap();
}

fn check_all_reduce(pg: &dyn ProcessGroup) {
    let world = pg.world_size();
    for dtype in [DType::F32, DType::F64, DType::I64] {
        for (salt, &n) in LENGTHS.iter().enumerate() {
            let mut t = on(pg, input(pg.rank(), n, dtype, salt));
            pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
            let expected = (1..world).fold(input(0, n, dtype, salt), |acc, q| {
                add(&acc, &input(q, n, dtype, salt))
            });
            assert_eq!(
                bits(&t),
                bits(&expected),
                "all_reduce {dtype} n {n} rank {}",
                pg.rank()
            );
            assert_eq!(t.dims(), [n]);
        }
    }
}

fn check_broadcast(pg: &dyn ProcessGroup) {
    for dtype in DType::ALL {
        for (salt, n) in [0usize, 5, 1000].into_iter().enumerate() {
            for src in 0..pg.world_size() {
                let mut t = on(
                    pg,
                    input(pg.rank(), n, dtype, salt).reshape(&[n, 1]).unwrap(),
                );
                pg.broadcast(&mut t, src).unwrap();
                assert_eq!(t.dims(), [n, 1]);
                let expected = input(src, n, dtype, salt);
                assert_eq!(
                    bits(&t),
                    bits(&expected),
                    "broadcast {dtype} n {n} from {src}"
                );
            }
        }
    }
}

fn check_all_gather(pg: &dyn ProcessGroup) {
    let world = pg.world_size();
    let cases: Vec<Vec<usize>> = vec![
        even_counts(7 * world, world),
        (0..world).map(|q| (q * 3 + 1) % 5).collect(),
        vec![0; world],
        (0..world)
            .map(|q| if q == world - 1 { 1001 } else { 0 })
            .collect(),
    ];
    for dtype in DType::ALL {
        for (salt, counts) in cases.iter().enumerate() {
            let mine = on(pg, input(pg.rank(), counts[pg.rank()], dtype, salt));
            let total: usize = counts.iter().sum();
            let mut out = on(pg, input(0, total, dtype, 99));
            pg.all_gather(&mut out, &mine, counts).unwrap();
            let parts: Vec<Tensor> = (0..world)
                .map(|q| input(q, counts[q], dtype, salt))
                .collect();
            assert_eq!(
                bits(&out),
                bits(&concat(&parts, dtype)),
                "all_gather {dtype} {counts:?}"
            );
        }
    }
}

fn check_all_to_all(pg: &dyn ProcessGroup) {
    let (world, rank) = (pg.world_size(), pg.rank());
    for dtype in DType::ALL {
        for salt in 0..4 {
            let input_counts: Vec<usize> =
                (0..world).map(|to| pair_count(rank, to, salt)).collect();
            let output_counts: Vec<usize> = (0..world)
                .map(|from| pair_count(from, rank, salt))
                .collect();
            // Rank q's input is input(q, its total): run `to` of it goes to rank `to`.
            let sent = |q: usize| {
                let counts: Vec<usize> = (0..world).map(|to| pair_count(q, to, salt)).collect();
                (input(q, counts.iter().sum(), dtype, salt), counts)
            };
            let mine = on(pg, sent(rank).0);
            let mut out = on(pg, input(0, output_counts.iter().sum(), dtype, 98));
            pg.all_to_all(&mut out, &mine, &output_counts, &input_counts)
                .unwrap();
            let parts: Vec<Tensor> = (0..world)
                .map(|q| {
                    let (data, counts) = sent(q);
                    let start: usize = counts[..rank].iter().sum();
                    data.narrow(0, start, counts[rank])
                        .unwrap()
                        .contiguous()
                        .unwrap()
                })
                .collect();
            assert_eq!(
                bits(&out),
                bits(&concat(&parts, dtype)),
                "all_to_all {dtype} salt {salt}"
            );
        }
    }
}

/// Bad arguments are refused on the rank that passed them, before anything moves (so
/// every rank, passing the same bad argument, gets the error and none hangs).
fn check_local_errors(pg: &dyn ProcessGroup) {
    let world = pg.world_size();
    let invalid = |r: distributed::Result<()>| matches!(r, Err(DistError::InvalidArgument { .. }));
    let mut t = on(pg, input(pg.rank(), 4, DType::U8, 0));
    assert!(invalid(pg.all_reduce(&mut t, ReduceOp::Sum)), "u8 sum");
    assert!(invalid(pg.broadcast(&mut t, world)), "root past the world");
    let strided = on(pg, input(pg.rank(), 6, DType::F32, 0))
        .reshape(&[2, 3])
        .unwrap()
        .t()
        .unwrap();
    let mut strided_mut = strided.clone();
    assert!(
        invalid(pg.all_reduce(&mut strided_mut, ReduceOp::Sum)),
        "strided"
    );
    let mut out = on(pg, input(0, 4 * world, DType::F32, 0));
    let four = on(pg, input(pg.rank(), 4, DType::F32, 0));
    assert!(
        invalid(pg.all_gather(&mut out, &four, &vec![4; world + 1])),
        "counts length"
    );
    assert!(
        invalid(pg.all_gather(&mut out, &four, &vec![3; world])),
        "counts sum"
    );
    let mut wrong_dtype = on(pg, input(0, 4 * world, DType::F64, 0));
    assert!(
        invalid(pg.all_gather(&mut wrong_dtype, &four, &vec![4; world])),
        "dtype"
    );
    let mut a2a_out = on(pg, input(0, 4 * world, DType::F32, 0));
    let a2a_in = on(pg, input(pg.rank(), 4 * world, DType::F32, 0));
    let mut counts = vec![4; world];
    counts[0] = 5;
    assert!(
        invalid(pg.all_to_all(&mut a2a_out, &a2a_in, &vec![4; world], &counts)),
        "a2a sum"
    );
}
