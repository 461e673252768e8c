//! `in_order(false)`: the loader's nondeterministic fast path and the
//! deterministic-algorithms switch. One test, because the switch is process-wide.

use std::sync::Arc;
use std::time::Duration;

use nn_mini::data::{DataLoader, Dataset, Sample, SampleRng};
use nn_mini::NnError;
use rand_core::RngCore;
use tensor_core::{use_deterministic_algorithms, DeterministicMode, Device, Tensor, TensorError};

/// Sample `i` is `[i, a word of its own stream]`; early samples load slowly, so later
/// batches finish first and arrival order differs from sampling order.
struct Uneven(usize);

impl Dataset for Uneven {
    fn len(&self) -> usize {
        self.0
    }

    fn get(&self, index: usize, rng: &mut SampleRng) -> nn_mini::Result<Sample> {
        if index < 4 {
            std::thread::sleep(Duration::from_millis(100));
        }
        let input = vec![index as f64, f64::from(rng.next_u32())];
        Ok(Sample {
            input: Tensor::from_vec(input, &[2], Device::Cpu)?,
            target: Tensor::from_vec(vec![index as i64], &[], Device::Cpu)?,
        })
    }
}

fn build(in_order: bool, workers: usize) -> nn_mini::Result<DataLoader> {
    DataLoader::builder(Arc::new(Uneven(16)))
        .batch_size(2)
        .num_workers(workers)
        .prefetch_factor(4)
        .in_order(in_order)
        .seed(99)
        .build()
}

/// (epoch, batch index, input bits) of the next `n` batches.
fn draw(loader: &mut DataLoader, n: usize) -> Vec<(u64, u64, Vec<u64>)> {
    (0..n)
        .map(|_| {
            let batch = loader.next_batch().unwrap();
            let bits = batch.input.to_vec::<f64>().unwrap();
            (
                batch.epoch,
                batch.index,
                bits.into_iter().map(f64::to_bits).collect(),
            )
        })
        .collect()
}

#[test]
fn arrival_order_is_a_fast_path_the_switch_controls() {
    test_support::own_process!(arrival_order_is_a_fast_path_the_switch_controls);
    // Off (the default): allowed. Same batches as in order, delivered in another order,
    // and no checkpointable position while a batch is delivered ahead of an older one.
    let mut fast = build(false, 3).unwrap();
    let mut got = draw(&mut fast, 1);
    assert_ne!(
        got[0].1, 0,
        "batch 0 loads slowly, so another batch arrives first"
    );
    let state = fast.state().unwrap_err();
    assert!(state.to_string().contains("in_order(true)"), "{state}");
    // Keep drawing until every batch up to the newest delivered one has been delivered.
    while fast.state().is_err() {
        got.extend(draw(&mut fast, 1));
        assert!(got.len() < 64, "the slow batch never arrived");
    }
    let mut reference = build(true, 3).unwrap();
    let expected = draw(&mut reference, got.len());
    got.sort();
    assert_eq!(
        got, expected,
        "same batch contents, whatever the delivery order"
    );
    assert_eq!(
        fast.state().unwrap(),
        reference.state().unwrap(),
        "same position once caught up"
    );

    // Error: refused with an error that names the op and the alternative.
    use_deterministic_algorithms(DeterministicMode::Error);
    match build(false, 3) {
        Err(NnError::Tensor(TensorError::NondeterministicOp {
            op,
            device,
            alternative,
        })) => {
            assert_eq!(op, "DataLoader(in_order = false)");
            assert_eq!(device, Device::Cpu);
            assert!(alternative.contains("in_order(true)"));
        }
        other => panic!("expected a NondeterministicOp error, got {other:?}"),
    }
    // Without workers there is no fast path to refuse, and in-order loaders are fine.
    assert!(build(false, 0).is_ok());
    assert!(build(true, 3).is_ok());

    // Warn: allowed, with a warning on stderr.
    use_deterministic_algorithms(DeterministicMode::Warn);
    assert!(build(false, 2).is_ok());
    use_deterministic_algorithms(DeterministicMode::Off);
}
