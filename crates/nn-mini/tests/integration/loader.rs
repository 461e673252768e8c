//! The data loader: same batches for any worker count, in order, resumable mid-epoch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nn_mini::data::{epoch_order, sample_key, DataLoader, Dataset, LoaderState, Sample, SampleRng};
use nn_mini::NnError;
use rand_core::RngCore;
use rng_gen::{fold_in, Generator, Key, PhiloxRng};
use tensor_core::{Device, Tensor};

/// Sample `i` is `[i, first word of its SampleRng, second word]` (as f64, exact), so a
/// batch shows both which samples it holds and what randomness each was given. Loads
/// take a pseudo-random few hundred microseconds so workers finish out of order.
struct Probe {
    len: usize,
    jitter: bool,
    loads: AtomicUsize,
    fail_at: Option<usize>,
    panic_at: Option<usize>,
}

impl Probe {
    fn new(len: usize) -> Self {
        Probe {
            len,
            jitter: false,
            loads: AtomicUsize::new(0),
            fail_at: None,
            panic_at: None,
        }
    }
}

impl Dataset for Probe {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize, rng: &mut SampleRng) -> nn_mini::Result<Sample> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        if self.jitter {
            std::thread::sleep(Duration::from_micros((index as u64 * 7919) % 400));
        }
        if self.fail_at == Some(index) {
            return Err(NnError::InvalidArgument {
                op: "Probe::get",
                message: format!("sample {index} is bad"),
            });
        }
        if self.panic_at == Some(index) {
            panic!("sample {index} panics");
        }
        let input = vec![
            index as f64,
            f64::from(rng.next_u32()),
            f64::from(rng.next_u32()),
        ];
        Ok(Sample {
            input: Tensor::from_vec(input, &[3], Device::Cpu)?,
            target: Tensor::from_vec(vec![index as i64], &[], Device::Cpu)?,
        })
    }
}

/// What a batch contains, comparable bit for bit: epoch, index, sample indices, input
/// bits, targets.
type Content = (u64, u64, Vec<usize>, Vec<u64>, Vec<i64>);

fn content(batch: &nn_mini::Batch) -> Content {
    let input = batch
        .input
        .to_vec::<f64>()
        .unwrap()
        .into_iter()
        .map(f64::to_bits)
        .collect();
    (
        batch.epoch,
        batch.index,
        batch.indices.clone(),
        input,
        batch.target.to_vec::<i64>().unwrap(),
    )
}

fn loader(
    dataset: Probe,
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
    workers: usize,
) -> DataLoader {
    DataLoader::builder(Arc::new(dataset))
        .batch_size(batch_size)
        .shuffle(shuffle)
        .drop_last(drop_last)
        .num_workers(workers)
        .seed(1234)
        .build()
        .unwrap()
}

fn draw(loader: &mut DataLoader, n: usize) -> Vec<Content> {
    (0..n)
        .map(|_| content(&loader.next_batch().unwrap()))
        .collect()
}

#[test]
fn batches_are_identical_for_0_1_and_3_workers() {
    for (shuffle, drop_last) in [(true, false), (true, true), (false, false)] {
        let runs: Vec<_> = [0, 1, 3]
            .into_iter()
            .map(|workers| {
                let mut dataset = Probe::new(23);
                dataset.jitter = true;
                let mut l = loader(dataset, 5, shuffle, drop_last, workers);
                let n = 3 * l.batches_per_epoch() + 2;
                draw(&mut l, n)
            })
            .collect();
        assert_eq!(
            runs[0], runs[1],
            "shuffle {shuffle} drop_last {drop_last}: 1 worker"
        );
        assert_eq!(
            runs[0], runs[2],
            "shuffle {shuffle} drop_last {drop_last}: 3 workers"
        );
    }
}

#[test]
fn epochs_follow_the_documented_key_tree() {
    let len = 23;
    let mut l = loader(Probe::new(len), 5, true, false, 2);
    let key = Key::new(1234);
    assert_eq!(l.key(), key);
    let mut orders = Vec::new();
    for epoch in 0..3u64 {
        let batches: Vec<_> = l.iter_epoch().map(Result::unwrap).collect();
        assert_eq!(batches.len(), 5, "ceil(23 / 5) batches");
        assert_eq!(
            batches.last().unwrap().indices.len(),
            3,
            "the last batch keeps the remainder"
        );
        let order: Vec<usize> = batches.iter().flat_map(|b| b.indices.clone()).collect();
        assert_eq!(
            order,
            epoch_order(key, epoch, len, true)
                .unwrap()
                .to_vec()
                .unwrap()
        );
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..len).collect::<Vec<_>>(),
            "an epoch visits every sample once"
        );
        // Each sample's randomness is the stream of fold_in(fold_in(fold_in(key, epoch), 1), i).
        for b in &batches {
            let input = b.input.to_vec::<f64>().unwrap();
            for (row, &i) in b.indices.iter().enumerate() {
                let mut rng = PhiloxRng::from_key(sample_key(key, epoch, i as u64));
                assert_eq!(
                    sample_key(key, epoch, i as u64),
                    fold_in(fold_in(fold_in(key, epoch), 1), i as u64)
                );
                assert_eq!(input[row * 3 + 1], f64::from(rng.next_u32()));
                assert_eq!(input[row * 3 + 2], f64::from(rng.next_u32()));
            }
        }
        orders.push(order);
        assert_eq!((l.epoch(), l.position()), (epoch + 1, 0));
    }
    assert_ne!(orders[0], orders[1]);
    assert_ne!(orders[1], orders[2]);
    // Without shuffle the order is the identity, and augmentation still changes per epoch.
    let mut plain = loader(Probe::new(6), 6, false, false, 0);
    let e0 = plain.next_batch().unwrap();
    let e1 = plain.next_batch().unwrap();
    assert_eq!(e0.indices, (0..6).collect::<Vec<_>>());
    assert_eq!(e0.indices, e1.indices);
    assert_ne!(
        e0.input.to_vec::<f64>().unwrap(),
        e1.input.to_vec::<f64>().unwrap()
    );
}

#[test]
fn resuming_mid_epoch_continues_exactly() {
    let reference = draw(&mut loader(Probe::new(23), 4, true, false, 0), 20);
    for k in 0..14 {
        let mut first = loader(Probe::new(23), 4, true, false, k % 3);
        assert_eq!(draw(&mut first, k), reference[..k]);
        let bytes = first.state().unwrap().to_bytes();
        drop(first);
        let state = LoaderState::from_bytes(&bytes).unwrap();
        let mut resumed = DataLoader::builder(Arc::new(Probe::new(23)))
            .batch_size(4)
            .shuffle(true)
            .num_workers((k + 1) % 4)
            .seed(999) // overwritten by the state's key
            .build()
            .unwrap();
        resumed.set_state(&state).unwrap();
        assert_eq!(
            draw(&mut resumed, 20 - k),
            reference[k..],
            "resumed after {k} batches"
        );
    }
}

#[test]
fn resuming_without_the_loader_state_diverges() {
    let reference = draw(&mut loader(Probe::new(23), 4, true, false, 0), 10);
    // A restart that rebuilds the loader from the seed but forgets its position replays
    // the first batches instead of continuing mid-epoch.
    let mut forgetful = loader(Probe::new(23), 4, true, false, 0);
    assert_ne!(draw(&mut forgetful, 3), reference[7..10]);
}

#[test]
fn set_state_checks_the_loader_it_came_from() {
    let state = loader(Probe::new(23), 4, true, false, 0).state().unwrap();
    for (mut other, what) in [
        (loader(Probe::new(24), 4, true, false, 0), "dataset length"),
        (loader(Probe::new(23), 5, true, false, 0), "batch_size"),
        (loader(Probe::new(23), 4, false, false, 0), "shuffle"),
        (loader(Probe::new(23), 4, true, true, 0), "drop_last"),
    ] {
        let before = other.state().unwrap();
        let err = other.set_state(&state).unwrap_err();
        assert!(
            matches!(&err, NnError::InvalidLoaderState { reason } if reason.contains(what)),
            "{err}"
        );
        assert_eq!(
            other.state().unwrap(),
            before,
            "a rejected state changes nothing"
        );
    }
    let mut l = loader(Probe::new(23), 4, true, false, 0);
    let past_end = LoaderState {
        position: 6,
        ..state
    };
    assert!(l.set_state(&past_end).is_err());
}

#[test]
fn dataset_errors_and_panics_are_reported_in_order() {
    for workers in [0, 2] {
        let mut dataset = Probe::new(12);
        dataset.fail_at = Some(5);
        let mut l = loader(dataset, 4, false, false, workers);
        l.next_batch().unwrap();
        for _ in 0..2 {
            // The failing batch fails every time and the position stays on it.
            assert!(matches!(
                l.next_batch(),
                Err(NnError::InvalidArgument { .. })
            ));
            assert_eq!((l.epoch(), l.position()), (0, 1));
        }
        let mut dataset = Probe::new(12);
        dataset.panic_at = Some(9);
        let mut l = loader(dataset, 4, false, false, workers);
        l.next_batch().unwrap();
        l.next_batch().unwrap();
        let err = l.next_batch().unwrap_err();
        assert!(
            matches!(&err, NnError::WorkerPanicked { batch: 2, message, .. } if message.contains("sample 9")),
            "{err}"
        );
    }
}

#[test]
fn prefetch_is_bounded() {
    let dataset = Arc::new(Probe::new(1000));
    let mut l = DataLoader::builder(dataset.clone())
        .batch_size(10)
        .num_workers(2)
        .prefetch_factor(2)
        .seed(5)
        .build()
        .unwrap();
    l.next_batch().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // One delivered batch plus at most prefetch_factor * num_workers = 4 in flight.
    let loads = dataset.loads.load(Ordering::SeqCst);
    assert!((10..=50).contains(&loads), "{loads} samples loaded");
}

#[test]
fn builder_validates_and_derives_keys_from_generators() {
    let empty = || Arc::new(Probe::new(3));
    assert!(DataLoader::builder(empty()).batch_size(0).build().is_err());
    assert!(DataLoader::builder(empty())
        .prefetch_factor(0)
        .build()
        .is_err());
    assert!(DataLoader::builder(empty())
        .batch_size(4)
        .drop_last(true)
        .build()
        .is_err());
    let g = Generator::from_key(
        Device::Cpu,
        Key {
            seed: 77,
            offset: 10,
        },
    );
    let l = DataLoader::builder(empty()).generator(&g).build().unwrap();
    assert_eq!(
        l.key(),
        fold_in(
            Key {
                seed: 77,
                offset: 10
            },
            0
        )
    );
    assert_eq!(g.offset(), 11, "one block reserved");
}
