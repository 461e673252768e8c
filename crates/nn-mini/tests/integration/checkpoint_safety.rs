//! Checkpoint API safety: format version 1 is refused unless asked for (and converts),
//! generator names cannot collide with the default generators, the defaults are saved
//! and restored only when asked, a save's temporary file is never loaded, and a resume
//! cross-checks what it can before allocating or changing anything.
//!
//! Some tests move the process-wide default CPU generator, so those take `LOCK`.

use std::sync::{Mutex, MutexGuard};

use nn_mini::train::{Run, RunConfig, TrainConfig, Trainer, TrainingRun};
use nn_mini::{Checkpoint, CheckpointError, NnError};
use rng_gen::{default_generator, Generator, Key, RngError};
use tensor_core::Device;

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A format-version-1 checkpoint written by the last build that wrote version 1: a
/// trainer (seed 11, layers [3, 5, 2], batches of 4 from 20 samples) after 3 steps.
const V1_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/v1_trainer_step3.safetensors"
);
/// The losses of steps 4, 5 and 6 of that run, as f32 bits (recorded with it).
const V1_NEXT_LOSSES: [u32; 3] = [1_058_064_282, 1_060_792_716, 1_058_147_130];

fn small_config(seed: u64) -> TrainConfig {
    TrainConfig {
        seed,
        ..TrainConfig::mlp(vec![3, 5, 2], 20, 4)
    }
}

fn trained(seed: u64, steps: usize) -> Trainer {
    let mut t = Trainer::new(small_config(seed)).unwrap();
    for _ in 0..steps {
        t.step().unwrap();
    }
    t
}

#[test]
fn version_1_is_refused_by_default_and_converts_on_request() {
    test_support::own_process!(version_1_is_refused_by_default_and_converts_on_request);
    let _guard = lock();
    let err = Checkpoint::load(V1_FIXTURE).unwrap_err();
    assert!(
        matches!(err, CheckpointError::WeakFormatVersion { found: 1 }),
        "{err}"
    );
    assert!(err.to_string().contains("load_allowing_v1"), "{err}");

    let old = Checkpoint::load_allowing_v1(V1_FIXTURE).unwrap();
    assert_eq!(old.format_version(), 1);
    let mut resumed = Trainer::from_checkpoint(&old, None, None).unwrap();
    assert_eq!(resumed.step_count(), 3);
    let next: Vec<u32> = (0..3).map(|_| resumed.step().unwrap().to_bits()).collect();
    assert_eq!(
        next, V1_NEXT_LOSSES,
        "a converted run continues bit for bit"
    );

    // Saving writes version 2, which the default load reads.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("converted.safetensors");
    old.save(&path).unwrap();
    let new = Checkpoint::load(&path).unwrap();
    assert_eq!(new.format_version(), 2);
    let mut resumed = Trainer::from_checkpoint(&new, None, None).unwrap();
    let next: Vec<u32> = (0..3).map(|_| resumed.step().unwrap().to_bits()).collect();
    assert_eq!(next, V1_NEXT_LOSSES);

    // Version 1's CRC-32 is still verified...
    let bytes = std::fs::read(V1_FIXTURE).unwrap();
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert!(matches!(
        Checkpoint::from_bytes_allowing_v1(&flipped),
        Err(CheckpointError::ChecksumMismatch { .. })
    ));
    // ...but it cannot see two generator states swapped: why version 1 is refused.
    let swapped = swap_tensors(&bytes, "rng.default.cpu", "rng.dropout");
    assert!(Checkpoint::from_bytes_allowing_v1(&swapped).is_ok());
    assert!(matches!(
        Checkpoint::from_bytes(&swapped),
        Err(CheckpointError::WeakFormatVersion { .. })
    ));
}

/// `bytes` with the data of tensors `a` and `b` (of equal length) exchanged.
fn swap_tensors(bytes: &[u8], a: &str, b: &str) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let range = |name: &str| {
        let offsets = &header[name]["data_offsets"];
        let (s, e) = (offsets[0].as_u64().unwrap(), offsets[1].as_u64().unwrap());
        8 + n + s as usize..8 + n + e as usize
    };
    let (ra, rb) = (range(a), range(b));
    assert_eq!(ra.len(), rb.len());
    let mut out = bytes.to_vec();
    out[ra.clone()].copy_from_slice(&bytes[rb.clone()]);
    out[rb].copy_from_slice(&bytes[ra]);
    out
}

#[test]
fn user_generators_cannot_use_the_default_generators_names() {
    test_support::own_process!(user_generators_cannot_use_the_default_generators_names);
    let g = Generator::from_key(Device::Cpu, Key::new(1));
    let mut ck = Checkpoint::new();
    for reserved in [
        "default",
        "default.cpu",
        "default.cuda:0",
        "default.cuda_count",
    ] {
        let err = ck.put_generators(&[(reserved, &g)]).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::ReservedGeneratorName { name } if name == reserved),
            "{err}"
        );
        assert!(ck.restore_generators(&[(reserved, &g)]).is_err());
    }
    assert_eq!(ck.names().count(), 0, "a refused call stores nothing");
    ck.put_generators(&[("defaults", &g), ("dropout.default", &g)])
        .unwrap();
}

#[test]
fn default_generators_are_saved_and_restored_only_when_asked() {
    test_support::own_process!(default_generators_are_saved_and_restored_only_when_asked);
    let _guard = lock();
    let cpu = default_generator(Device::Cpu).unwrap();
    cpu.set_key(Key {
        seed: 21,
        offset: 4,
    });
    let dropout = Generator::from_key(Device::Cpu, Key::new(9));
    let mut ck = Checkpoint::new();
    ck.put_generators(&[("dropout", &dropout)]).unwrap();
    assert_eq!(ck.names().collect::<Vec<_>>(), ["rng.dropout"]);
    assert!(matches!(
        ck.restore_default_generators(&[Device::Cpu]),
        Err(CheckpointError::MissingTensor { name }) if name == "rng.default.cpu"
    ));
    ck.put_default_generators(&[Device::Cpu, Device::Cpu])
        .unwrap();
    assert_eq!(
        ck.names().collect::<Vec<_>>(),
        ["rng.default.cpu", "rng.dropout"]
    );

    cpu.set_key(Key::new(99));
    ck.restore_generators(&[("dropout", &dropout)]).unwrap();
    assert_eq!(
        cpu.key(),
        Key::new(99),
        "restore_generators leaves the defaults alone"
    );
    ck.restore_default_generators(&[Device::Cpu]).unwrap();
    assert_eq!(
        cpu.key(),
        Key {
            seed: 21,
            offset: 4
        }
    );

    // A CUDA device that does not exist: a typed error with rng-gen's as the source.
    let missing = Device::Cuda(tensor_core::cuda::device_count());
    let err = ck.put_default_generators(&[missing]).unwrap_err();
    let source = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<RngError>());
    assert!(
        matches!(source, Some(RngError::NoSuchDevice { .. })),
        "{err}: {source:?}"
    );
}

#[test]
fn a_temporary_file_is_never_loaded_as_a_checkpoint() {
    test_support::own_process!(a_temporary_file_is_never_loaded_as_a_checkpoint);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    trained(1, 1).save(&path).unwrap();
    let temp = dir.path().join(".ck.safetensors.tmp-4242-0");
    std::fs::copy(&path, &temp).unwrap();
    match Checkpoint::load(&temp) {
        Err(CheckpointError::TemporaryFile { target, .. }) => assert_eq!(target, path),
        other => panic!("{other:?}"),
    }
    assert!(Checkpoint::load_allowing_v1(&temp).is_err());
}

#[test]
fn a_resume_cross_checks_the_run_before_allocating() {
    test_support::own_process!(a_resume_cross_checks_the_run_before_allocating);
    let _guard = lock();
    let ck = trained(1, 5).checkpoint().unwrap();

    // A configuration edited to a huge model is refused before anything is built (an
    // allocation of 2.6e11 floats would abort this test process).
    let mut huge = ck.clone();
    let config = TrainConfig {
        layers: vec![64, 4_000_000_000, 10],
        ..small_config(1)
    };
    huge.set_metadata("train.config", config.to_json()).unwrap();
    let err = Trainer::from_checkpoint(&huge, None, None).unwrap_err();
    assert!(err.to_string().contains("MAX_PARAMETERS"), "{err}");
    // One within the limit but unlike the stored tensors: refused on the shapes.
    let mut wider = ck.clone();
    let config = TrainConfig {
        layers: vec![3, 50_000, 2],
        ..small_config(1)
    };
    wider
        .set_metadata("train.config", config.to_json())
        .unwrap();
    let err = Trainer::from_checkpoint(&wider, None, None).unwrap_err();
    assert!(
        matches!(&err, NnError::Checkpoint(CheckpointError::ShapeMismatch { name, .. }) if name == "model.0.weight"),
        "{err}"
    );

    // A loader state of another run (another seed) does not fit this one.
    let other = trained(2, 5).checkpoint().unwrap();
    let mut spliced = ck.clone();
    spliced
        .insert_bytes("loader.state", &other.bytes("loader.state").unwrap())
        .unwrap();
    let err = Trainer::from_checkpoint(&spliced, None, None).unwrap_err();
    assert!(
        matches!(&err, NnError::Checkpoint(CheckpointError::Inconsistent { name, .. }) if name == "loader.state"),
        "{err}"
    );
    assert!(err.to_string().contains("another run"), "{err}");

    // A loader state of the same run, but of another step.
    let later = trained(1, 7).checkpoint().unwrap();
    let mut spliced = ck.clone();
    spliced
        .insert_bytes("loader.state", &later.bytes("loader.state").unwrap())
        .unwrap();
    let err = Trainer::from_checkpoint(&spliced, None, None).unwrap_err();
    assert!(err.to_string().contains("after 5 steps"), "{err}");

    // One momentum buffer dropped, list and tensor alike.
    let mut partial = Checkpoint::new();
    for name in ck.names().filter(|n| *n != "optim.momentum_buffer.0.bias") {
        partial.insert(name, ck.tensor(name).unwrap()).unwrap();
    }
    partial
        .set_metadata("train.config", ck.metadata("train.config").unwrap())
        .unwrap();
    partial
        .set_metadata(
            "optim.momentum_buffers",
            r#"["0.weight","3.bias","3.weight"]"#,
        )
        .unwrap();
    let err = Trainer::from_checkpoint(&partial, None, None).unwrap_err();
    assert!(
        matches!(&err, NnError::Checkpoint(CheckpointError::Inconsistent { name, .. }) if name == "optim.momentum_buffers"),
        "{err}"
    );
    // The untouched checkpoint still resumes.
    Trainer::from_checkpoint(&ck, None, None).unwrap();
}
