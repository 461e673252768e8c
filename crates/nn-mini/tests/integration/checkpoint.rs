//! Checkpoint files: round trips, determinism, PyTorch-compatible layout, and a typed
//! error for every kind of damage.

use std::collections::HashMap;

use nn_mini::{Checkpoint, CheckpointError, Linear, Module, ReLU, Sequential, Sgd, SgdConfig};
use rng_gen::{Generator, Key};
use safetensors::SafeTensors;
use tensor_core::{bf16, f16, DType, Device, Tensor};

fn sample() -> Checkpoint {
    let mut ck = Checkpoint::new();
    let t = |v: Vec<f32>, d: &[usize]| Tensor::from_vec(v, d, Device::Cpu).unwrap();
    ck.insert(
        "a.f32",
        &t(
            vec![1.5, -2.0, f32::MIN_POSITIVE, 3.25e-8, 7.0, 0.1],
            &[2, 3],
        ),
    )
    .unwrap();
    ck.insert(
        "b.f64",
        &Tensor::from_vec(vec![0.1f64, -0.0], &[2], Device::Cpu).unwrap(),
    )
    .unwrap();
    ck.insert(
        "c.i64",
        &Tensor::from_vec(vec![-7i64], &[], Device::Cpu).unwrap(),
    )
    .unwrap();
    ck.insert(
        "d.f16",
        &Tensor::from_vec(vec![f16::from_f32(0.5)], &[1], Device::Cpu).unwrap(),
    )
    .unwrap();
    ck.insert(
        "e.bf16",
        &Tensor::from_vec(vec![bf16::from_f32(-3.0)], &[1, 1], Device::Cpu).unwrap(),
    )
    .unwrap();
    ck.insert(
        "f.u32",
        &Tensor::from_vec(vec![u32::MAX, 1], &[2], Device::Cpu).unwrap(),
    )
    .unwrap();
    ck.insert(
        "g.bool",
        &Tensor::from_vec(vec![true, false, true], &[3], Device::Cpu).unwrap(),
    )
    .unwrap();
    ck.insert_bytes("h.u8", b"ditto").unwrap();
    ck.set_metadata("note", "a \"quoted\" value, with unicode: \u{e9}")
        .unwrap();
    ck
}

fn assert_same(a: &Checkpoint, b: &Checkpoint) {
    assert_eq!(a.names().collect::<Vec<_>>(), b.names().collect::<Vec<_>>());
    for name in a.names() {
        let (x, y) = (a.tensor(name).unwrap(), b.tensor(name).unwrap());
        assert_eq!((x.dims(), x.dtype()), (y.dims(), y.dtype()), "{name}");
        let bytes = |t: &Tensor| {
            t.to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bytes(x), bytes(y), "{name}");
    }
    assert_eq!(a.metadata("note"), b.metadata("note"));
}

#[test]
fn round_trips_every_dtype_and_is_byte_deterministic() {
    let ck = sample();
    let bytes = ck.to_bytes().unwrap();
    assert_same(&ck, &Checkpoint::from_bytes(&bytes).unwrap());
    assert_eq!(
        bytes,
        sample().to_bytes().unwrap(),
        "same contents, same bytes"
    );
    assert_eq!(
        bytes,
        Checkpoint::from_bytes(&bytes).unwrap().to_bytes().unwrap()
    );
}

#[test]
fn is_a_standard_safetensors_file() {
    let bytes = sample().to_bytes().unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let a = file.tensor("a.f32").unwrap();
    assert_eq!(a.dtype(), safetensors::Dtype::F32);
    assert_eq!(a.shape(), &[2, 3]);
    assert_eq!(&a.data()[..4], &1.5f32.to_le_bytes());
    assert_eq!(file.tensor("h.u8").unwrap().data(), b"ditto");
    assert_eq!(
        file.tensor("g.bool").unwrap().dtype(),
        safetensors::Dtype::BOOL
    );
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().as_ref().unwrap();
    assert_eq!(meta["ditto.format_version"], "2");
    assert!(meta["ditto.checksum"].starts_with("sha256:"));
    assert_eq!(meta["ditto.checksum"].len(), "sha256:".len() + 64);
    // Every tensor starts at a multiple of its element size.
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!(header_len % 8, 0);
    for (_, view) in file.tensors() {
        let offset = view.data().as_ptr() as usize - bytes.as_ptr() as usize;
        assert_eq!(offset % (view.dtype().bitsize() / 8), 0);
    }
}

#[test]
fn every_single_bit_flip_is_detected() {
    let bytes = sample().to_bytes().unwrap();
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    for bit in 0..bytes.len() * 8 {
        let mut damaged = bytes.clone();
        damaged[bit / 8] ^= 1 << (bit % 8);
        match Checkpoint::from_bytes(&damaged) {
            Ok(_) => panic!("flipping bit {bit} (byte {}) went unnoticed", bit / 8),
            Err(CheckpointError::ChecksumMismatch { expected, found }) => {
                assert_ne!(expected, found)
            }
            Err(e) => assert!(bit / 8 < header_end, "data byte {}: {e}", bit / 8),
        }
    }
}

#[test]
fn every_truncation_is_detected() {
    let bytes = sample().to_bytes().unwrap();
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    for len in 0..bytes.len() {
        match Checkpoint::from_bytes(&bytes[..len]) {
            Err(CheckpointError::Truncated { reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("cut at {len} of {}: {e}", bytes.len()),
            Ok(_) => panic!("cut at {len} went unnoticed"),
        }
    }
    assert!(header_end < bytes.len());
}

/// Replaces `from` by `to` (same length) in the header.
fn patch_header(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..header_end]).unwrap();
    assert!(header.contains(from), "{from} not in header");
    let mut out = bytes[..8].to_vec();
    out.extend_from_slice(header.replacen(from, to, 1).as_bytes());
    out.extend_from_slice(&bytes[header_end..]);
    out
}

#[test]
fn other_versions_and_other_files_are_rejected_by_name() {
    let bytes = sample().to_bytes().unwrap();
    let future = patch_header(
        &bytes,
        "\"ditto.format_version\":\"2\"",
        "\"ditto.format_version\":\"3\"",
    );
    match Checkpoint::from_bytes(&future) {
        Err(CheckpointError::UnsupportedVersion {
            found,
            supported: 2,
        }) => assert_eq!(found, "3"),
        other => panic!("{other:?}"),
    }
    // A valid safetensors file that is not a ditto checkpoint.
    let data = [1.0f32, 2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &data).unwrap();
    let plain = safetensors::serialize(
        [("x", view)],
        Some(HashMap::from([("format".to_string(), "pt".to_string())])),
    )
    .unwrap();
    assert!(matches!(
        Checkpoint::from_bytes(&plain),
        Err(CheckpointError::Malformed { .. })
    ));
    assert!(matches!(
        Checkpoint::from_bytes(b"not a checkpoint at all"),
        Err(CheckpointError::Truncated { .. } | CheckpointError::Malformed { .. })
    ));
    // Renaming a tensor keeps the file valid safetensors but breaks the checksum.
    let renamed = patch_header(&bytes, "\"a.f32\"", "\"z.f32\"");
    assert!(matches!(
        Checkpoint::from_bytes(&renamed),
        Err(CheckpointError::ChecksumMismatch { .. })
    ));
}

fn model(seed: u64, hidden: usize) -> Sequential {
    let g = Generator::from_key(Device::Cpu, Key::new(seed));
    Sequential::new()
        .push(Linear::new(4, hidden, &g).unwrap())
        .push(ReLU::new())
        .push(Linear::new(hidden, 2, &g).unwrap())
}

fn params(m: &dyn Module) -> Vec<Vec<f32>> {
    m.parameters()
        .iter()
        .map(|p| p.value.to_vec::<f32>().unwrap())
        .collect()
}

#[test]
fn modules_restore_and_wrong_shapes_or_missing_tensors_are_named() {
    let saved = model(1, 8);
    let mut ck = Checkpoint::new();
    ck.put_module("model.", &saved).unwrap();
    let ck = Checkpoint::from_bytes(&ck.to_bytes().unwrap()).unwrap();
    assert_eq!(
        ck.names().collect::<Vec<_>>(),
        [
            "model.0.bias",
            "model.0.weight",
            "model.2.bias",
            "model.2.weight"
        ]
    );
    let mut fresh = model(2, 8);
    assert_ne!(params(&fresh), params(&saved));
    ck.restore_module("model.", &mut fresh).unwrap();
    assert_eq!(params(&fresh), params(&saved));

    let mut wider = model(3, 9);
    let before = params(&wider);
    match ck.restore_module("model.", &mut wider) {
        Err(CheckpointError::ShapeMismatch {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "model.0.weight");
            assert_eq!((expected, found), (vec![9, 4], vec![8, 4]));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(params(&wider), before, "a failed restore changes nothing");
    let mut deeper = model(4, 8)
        .push(ReLU::new())
        .push(Linear::new(2, 2, &Generator::default()).unwrap());
    assert!(
        matches!(ck.restore_module("model.", &mut deeper), Err(CheckpointError::MissingTensor { name }) if name == "model.4.weight")
    );
    let g = Generator::default();
    let mut f64_model =
        Sequential::new().push(Linear::with_options(4, 8, true, DType::F64, &g).unwrap());
    assert!(matches!(
        ck.restore_module("model.", &mut f64_model),
        Err(CheckpointError::DTypeMismatch {
            expected: DType::F64,
            found: DType::F32,
            ..
        })
    ));
}

#[test]
fn optimizer_buffers_and_generators_restore() {
    let mut m = model(5, 6);
    let mut sgd = Sgd::new(SgdConfig::new(0.1).momentum(0.9)).unwrap();
    for p in m.parameters_mut() {
        p.grad = Some(p.value.ones_like().unwrap());
    }
    sgd.step(&mut m).unwrap();
    let g = Generator::from_key(
        Device::Cpu,
        Key {
            seed: 3,
            offset: 14,
        },
    );
    let mut ck = Checkpoint::new();
    ck.put_sgd("optim.", &sgd).unwrap();
    ck.put_generators(&[("dropout", &g)]).unwrap();
    let ck = Checkpoint::from_bytes(&ck.to_bytes().unwrap()).unwrap();

    let mut restored = Sgd::new(SgdConfig::new(0.1).momentum(0.9)).unwrap();
    ck.restore_sgd("optim.", &mut restored, &m).unwrap();
    assert_eq!(restored.momentum_buffers().len(), 4);
    for (name, buf) in sgd.momentum_buffers() {
        assert_eq!(
            buf.to_vec::<f32>().unwrap(),
            restored.momentum_buffers()[name].to_vec::<f32>().unwrap()
        );
    }
    let other = Generator::from_key(Device::Cpu, Key::new(0));
    ck.restore_generators(&[("dropout", &other)]).unwrap();
    assert_eq!(other.key(), g.key());
    // Buffers are checked against the model they belong to.
    let mut wrong = Sgd::new(SgdConfig::new(0.1).momentum(0.9)).unwrap();
    assert!(matches!(
        ck.restore_sgd("optim.", &mut wrong, &model(6, 7)),
        Err(CheckpointError::ShapeMismatch { .. })
    ));
    // A generator state that fails its own checks is named, with rng-gen's error as
    // the source.
    let mut bad = Checkpoint::new();
    let mut state = g.get_state();
    state[12] ^= 1;
    bad.insert_bytes("rng.dropout", &state).unwrap();
    let before = other.key();
    match bad.restore_generators(&[("dropout", &other)]) {
        Err(err @ CheckpointError::Generator { .. }) => {
            assert!(err.to_string().contains("rng.dropout"), "{err}");
            let source = std::error::Error::source(&err).expect("a source");
            assert!(matches!(
                source.downcast_ref::<rng_gen::RngError>(),
                Some(rng_gen::RngError::ChecksumMismatch { .. })
            ));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(other.key(), before);
    assert!(matches!(
        bad.restore_generators(&[("init", &other)]),
        Err(CheckpointError::MissingTensor { .. })
    ));
}

#[test]
fn files_save_atomically_and_load_with_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    sample().save(&path).unwrap();
    assert_same(&sample(), &Checkpoint::load(&path).unwrap());
    // Overwriting leaves no temporary files behind.
    sample().save(&path).unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    assert!(matches!(
        Checkpoint::load(&path),
        Err(CheckpointError::Truncated { .. })
    ));
    assert!(matches!(
        Checkpoint::load(dir.path().join("missing")),
        Err(CheckpointError::Io { .. })
    ));
    assert!(matches!(
        sample().save(dir.path().join("no/such/dir/ck")),
        Err(CheckpointError::Io { .. })
    ));
    let mut ck = Checkpoint::new();
    assert!(ck.set_metadata("ditto.checksum", "x").is_err());
}
