//! Graph-safe random numbers (`rng_gen::graph::Graph`, issue 18): a replayed dropout
//! draws, replay after replay, exactly what eager dropout draws from a twin generator;
//! replays, eager draws and checkpoints mix; each capture rule is a typed error. Runs on
//! any GPU and on the CUDA stand-in (which records and replays graphs).

mod support;

use ditto::rng_gen::graph::Graph;
use ditto::rng_gen::{self, dropout_with_mask, Generator, RngError};
use ditto::tensor_core::{Device, Tensor, TensorError};
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
        RngError::Capture { .. } | RngError::Tensor(TensorError::Capture { .. })
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
