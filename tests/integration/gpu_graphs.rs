//! CUDA graphs of tensor ops (`tensor_core::cuda::CudaGraph`, issue 18): a replay gives
//! the bits eager execution gives, inputs are fed in place, buffers made during a capture
//! stay the graph's, and each capture rule is a typed error. Runs on any GPU and on the
//! CUDA stand-in, which records and replays graphs (docs/cuda-standin.md).

use crate::support;

use ditto::tensor_core::cuda::{self, CudaGraph};
use ditto::tensor_core::{CudaError, DType, Device, Tensor, TensorError};
use support::{assert_same, cpu_tensor, gpu};

const GPU: Device = Device::Cuda(0);

/// A capture claims the whole device (work from other threads is refused meanwhile), so
/// the tests of this file, threads of one process, take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The region captured below, run on any input: elementwise, a reduction and a
/// log-softmax, so several kernels and temporaries are involved.
fn region(x: &Tensor) -> Result<(Tensor, Tensor), TensorError> {
    let y = x.mul_scalar(2.0)?.add_scalar(1.0)?.relu()?;
    let total = y.sum_all()?;
    let lsm = y.log_softmax(1)?;
    Ok((total, lsm))
}

fn is_capture_error(e: &TensorError) -> bool {
    matches!(e, TensorError::Cuda(CudaError::Capture { ordinal: 0, .. }))
}

#[test]
fn replays_match_eager_runs_on_new_inputs() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let input = cpu_tensor(&[4, 33], 1).to_device(GPU).unwrap();
    // Warm-up, as PyTorch recommends before a capture (fills the allocator's cache).
    region(&input).unwrap();
    let (graph, (total, lsm)) = CudaGraph::capture(0, || region(&input)).unwrap();
    for salt in 2..5 {
        let batch = cpu_tensor(&[4, 33], salt);
        input.copy_from_host_shared(&batch).unwrap();
        graph.replay().unwrap();
        let (want_total, want_lsm) = region(&batch.to_device(GPU).unwrap()).unwrap();
        assert_same(&format!("sum, batch {salt}"), &total, &want_total);
        assert_same(&format!("log_softmax, batch {salt}"), &lsm, &want_lsm);
    }
}

#[test]
fn buffers_made_during_a_capture_stay_with_the_graph() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let input = Tensor::ones(&[3, 5], DType::F32, GPU).unwrap();
    let (graph, out) = CudaGraph::capture(0, || input.mul_scalar(3.0)).unwrap();
    // The output's block goes back to the graph's pool, not to the shared cache: the
    // next eager tensor of its size must not be handed memory a replay overwrites.
    drop(out);
    let other = Tensor::full(&[3, 5], 7.0, DType::F32, GPU).unwrap();
    graph.replay().unwrap();
    assert_eq!(other.to_vec::<f32>().unwrap(), vec![7.0; 15]);
    drop(graph);
}

#[test]
fn host_reads_and_uploads_inside_a_capture_are_typed_errors() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = Tensor::ones(&[8], DType::F32, GPU).unwrap();
    let read = CudaGraph::capture(0, || x.mul_scalar(2.0)?.to_vec::<f32>()).unwrap_err();
    assert!(is_capture_error(&read), "{read}");
    let upload =
        CudaGraph::capture(0, || Tensor::from_vec(vec![1.0f32; 8], &[8], GPU)).unwrap_err();
    assert!(is_capture_error(&upload), "{upload}");
    let wait = CudaGraph::capture(0, || Ok(cuda::synchronize(0)?)).unwrap_err();
    assert!(is_capture_error(&wait), "{wait}");
    // The device is usable afterwards, eagerly and for a new capture.
    assert_eq!(
        x.mul_scalar(2.0).unwrap().to_vec::<f32>().unwrap(),
        [2.0; 8]
    );
    let (graph, y) = CudaGraph::capture(0, || x.add_scalar(1.0)).unwrap();
    graph.replay().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [2.0; 8]);
}

#[test]
fn nested_captures_replays_and_other_threads_are_refused() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = Tensor::ones(&[8], DType::F32, GPU).unwrap();
    let (inner, _) = CudaGraph::capture(0, || x.add_scalar(1.0)).unwrap();
    let nested = CudaGraph::capture(0, || {
        CudaGraph::capture(0, || x.add_scalar(1.0)).map(|_| ())
    });
    assert!(is_capture_error(&nested.unwrap_err()));
    let replay = CudaGraph::capture(0, || inner.replay());
    assert!(is_capture_error(&replay.unwrap_err()));
    let other_thread = CudaGraph::capture(0, || {
        std::thread::scope(|s| s.spawn(|| x.add_scalar(1.0)).join().unwrap())
    });
    assert!(is_capture_error(&other_thread.unwrap_err()));
    assert!(!cuda::is_capturing(0));
}

/// A tensor made before a capture, overwritten by the captured region and dropped in it:
/// every replay writes its block again, so no buffer made after the capture may get
/// that block while the graph lives (it stays the graph's, like the region's own
/// temporaries). Found with issue 33's graph-words tests.
#[test]
fn a_block_the_region_wrote_and_freed_is_not_handed_out_while_the_graph_lives() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let mut older = Tensor::zeros(&[3, 5], DType::F32, GPU).unwrap();
    let ones = Tensor::ones(&[3, 5], DType::F32, GPU).unwrap();
    let source = &ones;
    let (graph, ()) = CudaGraph::capture(0, move || {
        older.copy_from_(source)?;
        std::mem::drop(older);
        Ok(())
    })
    .unwrap();
    // Eager buffers of the same size, made while the graph lives.
    let fresh: Vec<Tensor> = (0..4)
        .map(|_| Tensor::full(&[3, 5], 7.0, DType::F32, GPU).unwrap())
        .collect();
    graph.replay().unwrap();
    for (i, t) in fresh.iter().enumerate() {
        assert_eq!(
            t.to_vec::<f32>().unwrap(),
            vec![7.0; 15],
            "buffer {i} was overwritten by the replay"
        );
    }
}

/// The same for a buffer an earlier, dropped graph made: its block belonged to that
/// graph's pool, which is gone when a second capture overwrites and drops it.
#[test]
fn a_block_of_a_dropped_graph_freed_in_a_capture_is_not_handed_out() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let x = Tensor::ones(&[2, 7], DType::F32, GPU).unwrap();
    let (first, mut made_by_first) = CudaGraph::capture(0, || x.add_scalar(1.0)).unwrap();
    first.replay().unwrap();
    std::mem::drop(first);
    let source = &x;
    let (graph, ()) = CudaGraph::capture(0, move || {
        made_by_first.copy_from_(source)?;
        std::mem::drop(made_by_first);
        Ok(())
    })
    .unwrap();
    let fresh: Vec<Tensor> = (0..4)
        .map(|_| Tensor::full(&[2, 7], 7.0, DType::F32, GPU).unwrap())
        .collect();
    graph.replay().unwrap();
    for (i, t) in fresh.iter().enumerate() {
        assert_eq!(
            t.to_vec::<f32>().unwrap(),
            vec![7.0; 14],
            "buffer {i} was overwritten by the replay"
        );
    }
}
