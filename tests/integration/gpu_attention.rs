//! The fused causal attention (issue 43, `crates/kernels/cuda/attention.cu`) against the
//! unfused tensor ops it replaces on CUDA.
//!
//! The promise that matters is the dropout mask: element `(b, h, i, j)` of the
//! probabilities is kept or dropped by its coordinates alone (docs/contract.md §5.11), so
//! the fused kernel, the unfused ops on `cuda:0` and the unfused ops on the CPU drop the
//! same elements. The tests make the mask visible in the output: with `v` the identity
//! (`v_j` = the unit vector `j`), row `i` of the output is row `i` of the dropped-out
//! probabilities, whose zeros are exactly the dropped elements (a kept probability is
//! never 0). The values themselves agree to rounding only: the fused kernel sums in
//! another order (an online softmax over key tiles).
//!
//! Captured into a CUDA graph (`rng_gen::graph::Graph`) the fused kernels draw a fresh
//! mask on every replay, the one eager calls at that point draw, bit for bit.
use crate::support;

use ditto::rng_gen::graph::Graph;
use ditto::rng_gen::{
    causal_attention, causal_attention_backward, causal_attention_unfused, AttentionDropout,
    AttentionSaved, Generator, Key, RngError,
};
use ditto::tensor_core::{Device, Tensor};
use support::{assert_same, cpu_tensor, gpu};

/// A capture claims the whole device (work from other threads is refused meanwhile), so
/// the tests of this file, threads of one process, take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Two tiles of 32 queries and keys, a ragged last tile, three entries of two heads.
const DIMS: [usize; 4] = [3, 2, 37, 40];
const SCALE: f64 = 0.158_113_883_008_418_98; // 1 / sqrt(40)

/// `[b, h, t, d]` with `v[.., j, :]` the unit vector `j` (t <= d).
fn identity_values([b, h, t, d]: [usize; 4]) -> Tensor {
    let mut values = vec![0.0f32; b * h * t * d];
    for (row, chunk) in values.chunks_mut(d).enumerate() {
        chunk[row % t] = 1.0;
    }
    Tensor::from_vec(values, &[b, h, t, d], Device::Cpu).unwrap()
}

/// Which output elements are exactly zero.
fn zeros(y: &Tensor) -> Vec<bool> {
    let y = y.to_device(Device::Cpu).unwrap().contiguous().unwrap();
    y.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&x| x == 0.0)
        .collect()
}

fn on(device: Device, t: &Tensor) -> Tensor {
    t.to_device(device).unwrap()
}

/// The attention of `q`, `k`, `v` on `device` with dropout `p` drawn from a generator
/// at `key`: the output, whether the fused kernel ran, and the generator's offset after.
fn attend(device: Device, fused: bool, qkv: [&Tensor; 3], p: f64, key: Key) -> (Tensor, bool, u64) {
    let [q, k, v] = qkv.map(|t| on(device, t));
    let generator = Generator::from_key(device, key);
    let dropout = Some(AttentionDropout::Draw {
        p,
        generator: &generator,
    });
    let (y, saved) = if fused {
        causal_attention(&q, &k, &v, SCALE, dropout).unwrap()
    } else {
        causal_attention_unfused(&q, &k, &v, SCALE, dropout).unwrap()
    };
    (y, saved.is_fused(), generator.offset())
}

#[test]
fn the_fused_mask_is_the_unfused_mask_bit_for_bit() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let (q, k) = (cpu_tensor(&DIMS, 1), cpu_tensor(&DIMS, 2));
    let v = identity_values(DIMS);
    let key = Key {
        seed: 2024,
        offset: 17,
    };
    let cuda = Device::Cuda(0);
    let (fused, was_fused, fused_offset) = attend(cuda, true, [&q, &k, &v], 0.3, key);
    assert!(
        was_fused,
        "f32 on CUDA in default arithmetic takes the fused kernel"
    );
    let (unfused, was_fused, unfused_offset) = attend(cuda, false, [&q, &k, &v], 0.3, key);
    assert!(!was_fused);
    let (cpu, _, cpu_offset) = attend(Device::Cpu, false, [&q, &k, &v], 0.3, key);
    // The same reservation: everything drawn afterwards is the same on both paths.
    assert_eq!(fused_offset, unfused_offset);
    assert_eq!(fused_offset, cpu_offset);
    let (f, u, c) = (zeros(&fused), zeros(&unfused), zeros(&cpu));
    assert_eq!(f, u, "fused and unfused masks on cuda:0");
    assert_eq!(f, c, "the fused mask on cuda:0 and the CPU's");
    // A mask that can fail the test: some of the causal elements dropped, most kept.
    let [_, _, t, d] = DIMS;
    let causal = f
        .iter()
        .enumerate()
        .filter(|(e, _)| (e % d) <= (e / d) % t)
        .map(|(_, &zero)| zero)
        .collect::<Vec<_>>();
    let dropped = causal.iter().filter(|&&z| z).count();
    assert!(
        dropped > causal.len() / 5 && dropped < causal.len() / 2,
        "{dropped} of {}",
        causal.len()
    );
}

#[test]
fn global_rows_key_the_mask_by_the_batch_row() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let (q, k) = (cpu_tensor(&DIMS, 3), cpu_tensor(&DIMS, 4));
    let v = identity_values(DIMS);
    let key = Key { seed: 7, offset: 0 };
    let rows = [5u64, 0, 3];
    let run = |device: Device, fused: bool| {
        let [q, k, v] = [&q, &k, &v].map(|t| on(device, t));
        let dropout = Some(AttentionDropout::Rows {
            p: 0.5,
            key,
            batch_rows: 6,
            rows: &rows,
        });
        let (y, saved) = if fused {
            causal_attention(&q, &k, &v, SCALE, dropout).unwrap()
        } else {
            causal_attention_unfused(&q, &k, &v, SCALE, dropout).unwrap()
        };
        assert_eq!(saved.is_fused(), fused);
        zeros(&y)
    };
    let fused = run(Device::Cuda(0), true);
    assert_eq!(fused, run(Device::Cuda(0), false));
    assert_eq!(fused, run(Device::Cpu, false));
    // Entry 1 is global row 0: the mask a single-row batch at row 0 draws.
    let entry = DIMS[1] * DIMS[2] * DIMS[3];
    let alone = {
        let first = |t: &Tensor| on(Device::Cuda(0), &t.narrow(0, 1, 1).unwrap());
        let dropout = Some(AttentionDropout::Rows {
            p: 0.5,
            key,
            batch_rows: 6,
            rows: &[0],
        });
        let (y, _) = causal_attention(&first(&q), &first(&k), &first(&v), SCALE, dropout).unwrap();
        zeros(&y)
    };
    assert_eq!(&fused[entry..2 * entry], &alone[..]);
}

/// The largest difference between `a` and `b` relative to `b`'s largest magnitude.
fn relative_distance(a: &Tensor, b: &Tensor) -> f64 {
    let vec = |t: &Tensor| {
        let t = t.to_device(Device::Cpu).unwrap().contiguous().unwrap();
        t.to_vec::<f32>().unwrap()
    };
    let (a, b) = (vec(a), vec(b));
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(f32::MIN_POSITIVE, |m, x| m.max(x.abs()));
    a.iter()
        .zip(&b)
        .map(|(x, y)| f64::from((x - y).abs() / scale))
        .fold(0.0, f64::max)
}

#[test]
fn fused_values_and_gradients_are_the_unfused_ones_to_rounding() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let cuda = Device::Cuda(0);
    let [q, k, v, dy] = [5, 6, 7, 8].map(|salt| on(cuda, &cpu_tensor(&DIMS, salt)));
    for p in [None, Some(0.2)] {
        let generator = |seed| Generator::from_key(cuda, Key { seed, offset: 3 });
        let (g1, g2) = (generator(99), generator(99));
        let dropout = |g| p.map(|p| AttentionDropout::Draw { p, generator: g });
        let (y_fused, fused) = causal_attention(&q, &k, &v, SCALE, dropout(&g1)).unwrap();
        let (y_ref, reference) = causal_attention_unfused(&q, &k, &v, SCALE, dropout(&g2)).unwrap();
        assert!(fused.is_fused());
        let tolerance = 2e-6;
        let d = relative_distance(&y_fused, &y_ref);
        assert!(d < tolerance, "p {p:?}: output differs by {d:e}");
        assert!(
            d > 0.0,
            "identical sums: the comparison would prove nothing"
        );
        let grads = causal_attention_backward(&dy, fused).unwrap();
        let want = causal_attention_backward(&dy, reference).unwrap();
        for (name, (g, w)) in ["dq", "dk", "dv"].iter().zip(grads.iter().zip(&want)) {
            assert_eq!(g.dims(), w.dims(), "{name}");
            let d = relative_distance(g, w);
            assert!(d < 1e-5, "p {p:?}: {name} differs by {d:e}");
        }
    }
    // Under bf16 autocast both paths attend over the rounded operands: still one
    // function, to rounding, and not the f32 one.
    let f32_output = causal_attention(&q, &k, &v, SCALE, None).unwrap().0;
    let _bf16 = ditto::tensor_core::autocast(ditto::tensor_core::DType::BF16).unwrap();
    let (y_fused, fused) = causal_attention(&q, &k, &v, SCALE, None).unwrap();
    let (y_ref, reference) = causal_attention_unfused(&q, &k, &v, SCALE, None).unwrap();
    assert!(fused.is_fused());
    let d = relative_distance(&y_fused, &y_ref);
    assert!(d < 2e-6, "bf16: output differs by {d:e}");
    assert!(
        relative_distance(&y_fused, &f32_output) > 1e-4,
        "bf16 rounds the operands"
    );
    let grads = causal_attention_backward(&dy, fused).unwrap();
    let want = causal_attention_backward(&dy, reference).unwrap();
    for (name, (g, w)) in ["dq", "dk", "dv"].iter().zip(grads.iter().zip(&want)) {
        let d = relative_distance(g, w);
        assert!(d < 1e-5, "bf16: {name} differs by {d:e}");
    }
}

#[test]
fn bad_operands_are_typed_errors() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let cuda = Device::Cuda(0);
    let q = on(cuda, &cpu_tensor(&DIMS, 9));
    let short = q.narrow(2, 0, 5).unwrap();
    assert!(causal_attention(&q, &short, &q, SCALE, None).is_err());
    let wide = on(cuda, &cpu_tensor(&[1, 1, 4, 65], 1));
    // Wider than the fused kernel: the unfused path serves it.
    let (_, saved) = causal_attention(&wide, &wide, &wide, 0.1, None).unwrap();
    assert!(!saved.is_fused());
    let rows = [0u64, 1];
    let dropout = Some(AttentionDropout::Rows {
        p: 0.1,
        key: Key::new(1),
        batch_rows: 2,
        rows: &rows,
    });
    let err = causal_attention(&q, &q, &q, SCALE, dropout).unwrap_err();
    assert!(
        err.to_string().contains("2 global rows for a batch of 3"),
        "{err}"
    );
}

const CUDA: Device = Device::Cuda(0);
const GRAPH_P: f64 = 0.2;

/// The forward with dropout `GRAPH_P` drawn from `generator`: the output and what
/// backward needs.
fn attend_drawing(
    [q, k, v]: [&Tensor; 3],
    generator: &Generator,
) -> Result<(Tensor, AttentionSaved), RngError> {
    let dropout = AttentionDropout::Draw {
        p: GRAPH_P,
        generator,
    };
    causal_attention(q, k, v, SCALE, Some(dropout))
}

/// A training step's attention, forward and backward of `dy`: `[y, dq, dk, dv]`, and
/// whether the fused kernels ran.
fn step(
    qkv: [&Tensor; 3],
    dy: &Tensor,
    generator: &Generator,
) -> Result<([Tensor; 4], bool), RngError> {
    let (y, saved) = attend_drawing(qkv, generator)?;
    let fused = saved.is_fused();
    let [dq, dk, dv] = causal_attention_backward(dy, saved)?;
    Ok(([y, dq, dk, dv], fused))
}

#[test]
fn a_captured_fused_attention_replays_what_eager_calls_draw() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let [q, k, v, dy] = [21, 22, 23, 24].map(|salt| on(CUDA, &cpu_tensor(&DIMS, salt)));
    let key = Key {
        seed: 77,
        offset: 5,
    };
    let (graphed, eager) = (
        Generator::from_key(CUDA, key),
        Generator::from_key(CUDA, key),
    );
    let (graph, (captured, fused)) =
        Graph::capture(CUDA, || step([&q, &k, &v], &dy, &graphed)).unwrap();
    assert!(fused, "the fused kernels are captured, not the unfused ops");
    assert_eq!(
        graphed.offset(),
        key.offset,
        "a capture reserves within the graph"
    );
    for replay in 0..3 {
        graph.replay().unwrap();
        let (want, fused) = step([&q, &k, &v], &dy, &eager).unwrap();
        assert!(fused);
        for (name, (got, want)) in ["y", "dq", "dk", "dv"]
            .iter()
            .zip(captured.iter().zip(&want))
        {
            assert_same(&format!("replay {replay}: {name}"), got, want);
        }
        assert_eq!(
            graphed.offset(),
            eager.offset(),
            "offset after replay {replay}"
        );
    }
}

#[test]
fn each_replay_of_a_captured_attention_draws_a_new_mask() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let (q, k) = (
        on(CUDA, &cpu_tensor(&DIMS, 25)),
        on(CUDA, &cpu_tensor(&DIMS, 26)),
    );
    let v = on(CUDA, &identity_values(DIMS));
    let generator = Generator::from_key(CUDA, Key::new(8));
    let (graph, y) = Graph::capture(CUDA, || {
        let (y, saved) = attend_drawing([&q, &k, &v], &generator)?;
        assert!(saved.is_fused());
        Ok::<_, RngError>(y)
    })
    .unwrap();
    let mut masks = Vec::new();
    for _ in 0..3 {
        graph.replay().unwrap();
        masks.push(zeros(&y));
    }
    // Row i of y is row i of the dropped-out probabilities (identity v): its zeros past
    // the causal ones are the dropped elements.
    assert_ne!(masks[0], masks[1], "replay 1 froze replay 0's mask");
    assert_ne!(masks[1], masks[2], "replay 2 froze replay 1's mask");
}

/// The capture error a refused call gives.
fn is_capture_error(e: &RngError) -> bool {
    matches!(e, RngError::Capture { .. })
}

#[test]
fn capture_refuses_given_stretches_and_a_backward_elsewhere() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let [q, k, v, dy] = [27, 28, 29, 30].map(|salt| on(CUDA, &cpu_tensor(&DIMS, salt)));
    let generator = Generator::from_key(CUDA, Key::new(9));
    // Rows of a batch reserved at a given key: a graph would freeze their mask.
    let rows = Graph::capture(CUDA, || {
        let dropout = AttentionDropout::Rows {
            p: GRAPH_P,
            key: Key::new(1),
            batch_rows: 3,
            rows: &[0, 1, 2],
        };
        causal_attention(&q, &k, &v, SCALE, Some(dropout)).map(|_| ())
    })
    .unwrap_err();
    assert!(is_capture_error(&rows), "{rows}");
    // A captured forward's mask is keyed within its graph: no backward outside it.
    let (_graph, saved) = Graph::capture(CUDA, || {
        attend_drawing([&q, &k, &v], &generator).map(|(_, saved)| saved)
    })
    .unwrap();
    let outside = causal_attention_backward(&dy, saved).unwrap_err();
    assert!(is_capture_error(&outside), "{outside}");
    // Nor an eager forward's backward inside one: the graph would freeze its mask.
    let (_, saved) = attend_drawing([&q, &k, &v], &generator).unwrap();
    let inside =
        Graph::capture(CUDA, || causal_attention_backward(&dy, saved).map(|_| ())).unwrap_err();
    assert!(is_capture_error(&inside), "{inside}");
}
