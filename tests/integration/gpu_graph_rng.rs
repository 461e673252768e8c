//! Graph-safe random numbers (`rng_gen::graph::Graph`, issue 18): a replayed dropout
//! draws, replay after replay, exactly what eager dropout draws from a twin generator;
//! replays, eager draws and checkpoints mix; each capture rule is a typed error. Runs on
//! any GPU and on the CUDA stand-in (which records and replays graphs).

use crate::support;

use ditto::rng_gen::graph::Graph;
use ditto::rng_gen::{self, dropout_with_mask, DropoutState, Generator, RngError};
use ditto::tensor_core::{CudaError, DType, Device, Tensor, TensorError};
use support::{assert_same, cpu_tensor, gpu};

const GPU: Device = Device::Cuda(0);
const P: f64 = 0.3;

/// A capture claims the whole device, so this file's tests take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn generator(seed: u64) -> Generator {
    let g = Generator::new(GPU);
    g.manual_seed(seed);
    g
}

/// Dropout of `x` (mask kept on the device) and the packed mask's words.
fn drop(x: &Tensor, g: &Generator) -> Result<(Tensor, Vec<u32>), RngError> {
    let (y, state) = dropout_with_mask(x, P, true, Some(g))?;
    let mask = state.packed_mask.as_ref().map(|m| m.words()).transpose()?;
    Ok((y, mask.unwrap_or_default()))
}

fn is_capture_error(e: &RngError) -> bool {
    matches!(
        e,
        RngError::Capture { .. } | RngError::Tensor(TensorError::Cuda(CudaError::Capture { .. }))
    )
}

#[test]
fn replays_draw_what_eager_dropout_draws() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = cpu_tensor(&[6, 50], 1).to_device(GPU).unwrap();
    let (graphed, eager) = (generator(5), generator(5));
    let ((graph, (y, _state)), before) = (
        Graph::capture(GPU, || dropout_with_mask(&x, P, true, Some(&graphed))).unwrap(),
        graphed.offset(),
    );
    assert_eq!(before, 0, "a capture does not move the host offset");
    assert!(graph.increment_of(&graphed) > 0);
    for step in 0..4 {
        if step == 2 {
            // An eager draw between replays moves the generator; the next replay follows.
            rng_gen::rand(&[7], ditto::tensor_core::DType::F32, GPU, Some(&graphed)).unwrap();
            rng_gen::rand(&[7], ditto::tensor_core::DType::F32, GPU, Some(&eager)).unwrap();
        }
        graph.replay().unwrap();
        let (want, _) = drop(&x, &eager).unwrap();
        assert_same(&format!("replay {step}"), &y, &want);
        assert_eq!(
            graphed.offset(),
            eager.offset(),
            "offset after replay {step}"
        );
    }
    // A checkpoint between replays resumes eagerly with the same numbers.
    let resumed = Generator::new(GPU);
    resumed.set_state(&graphed.get_state()).unwrap();
    graph.replay().unwrap();
    let (want, _) = drop(&x, &resumed).unwrap();
    assert_same("resumed from the state between replays", &y, &want);
}

/// A call on a generator that a capture draws from.
type Misuse = dyn Fn(&Generator) -> Result<(), RngError>;

#[test]
fn seeding_or_reading_a_captured_generator_fails_the_capture() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = cpu_tensor(&[4, 40], 2).to_device(GPU).unwrap();
    let g = generator(9);
    let misuses: [(&str, Box<Misuse>); 5] = [
        (
            "manual_seed",
            Box::new(|g| {
                g.manual_seed(1);
                Ok(())
            }),
        ),
        (
            "get_state",
            Box::new(|g| {
                let _ = g.get_state();
                Ok(())
            }),
        ),
        (
            "try_manual_seed",
            Box::new(|g| g.try_manual_seed(1).map(|_| ())),
        ),
        ("try_get_state", Box::new(|g| g.try_get_state().map(|_| ()))),
        (
            "set_state",
            Box::new(|g| g.set_state(&Generator::new(GPU).get_state())),
        ),
    ];
    for (what, misuse) in &misuses {
        let before = g.key();
        let err = Graph::capture(GPU, || {
            dropout_with_mask(&x, P, true, Some(&g))?;
            misuse(&g)
        })
        .unwrap_err();
        assert!(matches!(err, RngError::Capture { .. }), "{what}: {err}");
        assert_eq!(g.key(), before, "{what} changed nothing");
    }
    // Outside a capture every call works again.
    g.try_manual_seed(3).unwrap();
    g.try_get_state().unwrap();
}

#[test]
fn another_thread_and_uncapturable_ops_are_refused() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = cpu_tensor(&[4, 40], 3).to_device(GPU).unwrap();
    let g = generator(11);
    let other_thread = Graph::capture(GPU, || {
        dropout_with_mask(&x, P, true, Some(&g))?;
        std::thread::scope(|s| {
            s.spawn(|| dropout_with_mask(&x, P, true, Some(&g)).map(|_| ()))
                .join()
                .unwrap()
        })
    })
    .unwrap_err();
    assert!(is_capture_error(&other_thread), "{other_thread}");
    let rand = Graph::capture(GPU, || {
        rng_gen::rand(&[16], ditto::tensor_core::DType::F32, GPU, Some(&g))
    })
    .unwrap_err();
    assert!(matches!(rand, RngError::Capture { .. }), "{rand}");
    let nested = Graph::capture(GPU, || Graph::capture(GPU, || Ok(())).map(|_| ())).unwrap_err();
    assert!(is_capture_error(&nested), "{nested}");
    let cpu = Graph::capture(Device::Cpu, || Ok(())).unwrap_err();
    assert!(matches!(cpu, RngError::Capture { .. }), "{cpu}");
    // Failed captures leave the generator where it was: a capture reserves within the
    // graph, never on the host.
    assert_eq!(g.offset(), 0);
}

// ---- issue 33, item 1: a generator's device words are never a block the capture writes.
// The words (seed and base offset, 16 bytes) are made at a generator's first capture.
// Each test below frees, inside the capture and before the first draw, 16-byte blocks
// that a node of the same capture writes; a replay runs that node after the words'
// upload, so words placed in such a block would be overwritten and every replay would
// draw from garbage (100-120 of 300 values differed before the fix).

/// Two 16-byte temporaries (the size of the device words), written by nodes of the
/// capture (a memset of `dtype` zeros, a kernel's f32 sum) and freed inside it, so their
/// blocks are free again in the graph's private pool.
fn written_and_freed(dtype: DType) -> Result<(), RngError> {
    let zeros = Tensor::zeros(&[16 / dtype.size_in_bytes()], dtype, GPU)?;
    let sum = Tensor::zeros(&[4], DType::F32, GPU)?.add_scalar(1.0)?;
    std::mem::drop((zeros, sum));
    Ok(())
}

/// What a capture returns: each dropout's output and state (its mask on the device).
type Dropped = Vec<(Tensor, DropoutState)>;

/// Captures `region`, then checks that each of 4 replays gives the outputs and masks
/// that `eager` (the same dropouts, run eagerly from identically seeded twins) gives.
fn replays_match_eager(
    what: &str,
    region: impl FnOnce() -> Result<Dropped, RngError>,
    eager: impl Fn() -> Result<Dropped, RngError>,
) {
    let (graph, captured) = Graph::capture(GPU, region).unwrap();
    let mask = |state: &DropoutState| {
        let words = state.packed_mask.as_ref().map(|m| m.words()).transpose();
        words.unwrap().unwrap_or_default()
    };
    for replay in 0..4 {
        graph.replay().unwrap();
        let want = eager().unwrap();
        assert_eq!(captured.len(), want.len());
        for (i, ((y, state), (want_y, want_state))) in captured.iter().zip(&want).enumerate() {
            let label = format!("{what}: replay {replay}, dropout {i}");
            assert_same(&label, y, want_y);
            assert_eq!(mask(state), mask(want_state), "{label}: mask");
        }
    }
}

#[test]
fn graph_words_avoid_a_temporary_the_capture_freed() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = cpu_tensor(&[6, 50], 4).to_device(GPU).unwrap();
    let (graphed, eager) = (generator(5), generator(5));
    replays_match_eager(
        "one temporary",
        || {
            written_and_freed(DType::F32)?;
            Ok(vec![dropout_with_mask(&x, P, true, Some(&graphed))?])
        },
        || Ok(vec![dropout_with_mask(&x, P, true, Some(&eager))?]),
    );
}

#[test]
fn graph_words_avoid_several_temporaries_the_capture_freed() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = cpu_tensor(&[6, 50], 5).to_device(GPU).unwrap();
    let (graphed, eager) = (generator(6), generator(6));
    replays_match_eager(
        "several temporaries",
        || {
            for dtype in [DType::F32, DType::F64, DType::F16, DType::F32] {
                written_and_freed(dtype)?;
            }
            // Two live at once, freed together: two blocks of the class at the same time.
            let small = Tensor::zeros(&[4], DType::F32, GPU)?;
            let (a, b) = (small.add_scalar(2.0)?, small.mul_scalar(3.0)?);
            std::mem::drop((small, a, b));
            Ok(vec![dropout_with_mask(&x, P, true, Some(&graphed))?])
        },
        || Ok(vec![dropout_with_mask(&x, P, true, Some(&eager))?]),
    );
}

#[test]
fn graph_words_of_two_generators_avoid_freed_temporaries() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = cpu_tensor(&[6, 50], 6).to_device(GPU).unwrap();
    let x2 = cpu_tensor(&[3, 40], 7).to_device(GPU).unwrap();
    let (first, second) = (generator(7), generator(8));
    let (first_eager, second_eager) = (generator(7), generator(8));
    replays_match_eager(
        "two generators",
        || {
            written_and_freed(DType::F32)?;
            written_and_freed(DType::F32)?;
            let a = dropout_with_mask(&x, P, true, Some(&first))?;
            written_and_freed(DType::F16)?;
            let b = dropout_with_mask(&x2, P, true, Some(&second))?;
            let c = dropout_with_mask(&x, P, true, Some(&first))?;
            Ok(vec![a, b, c])
        },
        || {
            let a = dropout_with_mask(&x, P, true, Some(&first_eager))?;
            let b = dropout_with_mask(&x2, P, true, Some(&second_eager))?;
            let c = dropout_with_mask(&x, P, true, Some(&first_eager))?;
            Ok(vec![a, b, c])
        },
    );
}

#[test]
fn graph_words_avoid_freed_temporaries_in_an_f16_dropout() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = cpu_tensor(&[6, 50], 8).to_dtype(DType::F16).unwrap();
    let x = x.to_device(GPU).unwrap();
    let (graphed, eager) = (generator(9), generator(9));
    replays_match_eager(
        "f16",
        || {
            written_and_freed(DType::F16)?;
            Ok(vec![dropout_with_mask(&x, P, true, Some(&graphed))?])
        },
        || Ok(vec![dropout_with_mask(&x, P, true, Some(&eager))?]),
    );
}

/// A tensor made before the capture, overwritten by a copy the capture records and freed
/// inside it: a replay still writes its block (which went to the shared cache before
/// the allocator kept such blocks in the graph's pool). The words must not land there.
#[test]
fn graph_words_avoid_an_older_tensor_the_capture_wrote_and_freed() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = cpu_tensor(&[6, 50], 9).to_device(GPU).unwrap();
    let (graphed, eager) = (generator(10), generator(10));
    let mut older = Tensor::zeros(&[4], DType::F32, GPU).unwrap();
    let source = Tensor::ones(&[4], DType::F32, GPU).unwrap();
    let (x, graphed) = (&x, &graphed);
    replays_match_eager(
        "older tensor",
        move || {
            older.copy_from_(&source)?;
            std::mem::drop(older);
            Ok(vec![dropout_with_mask(x, P, true, Some(graphed))?])
        },
        || Ok(vec![dropout_with_mask(x, P, true, Some(&eager))?]),
    );
}
