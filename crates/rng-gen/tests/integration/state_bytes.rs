//! Generator and PhiloxRng state bytes: round trips, moving a state between
//! generators of different devices, and typed errors for bad bytes.

use crate::common;

use rand_core::{RngCore, SeedableRng};
use rng_gen::state::{GENERATOR_STATE_LEN, WORD_RNG_STATE_LEN};
use rng_gen::{bits, fold_in, rand, Generator, Key, PhiloxRng, RngError, DEFAULT_SEED};
use tensor_core::{DType, Device};

use common::{generator, values, word};

fn draw(g: &Generator) -> Vec<f32> {
    values(&rand(&[9], DType::F32, Device::Cpu, Some(g)).unwrap())
}

#[test]
fn new_generator_defaults() {
    let g = Generator::new(Device::Cpu);
    assert_eq!(
        (g.initial_seed(), g.offset(), g.device()),
        (DEFAULT_SEED, 0, Device::Cpu)
    );
    assert_eq!(DEFAULT_SEED, 67_280_421_310_721);
    g.manual_seed(5).set_offset(12);
    assert_eq!(
        g.key(),
        Key {
            seed: 5,
            offset: 12
        }
    );
    let debug = format!("{g:?}");
    assert!(
        debug.contains("seed: 5") && debug.contains("offset: 12"),
        "{debug}"
    );
    // Clones share state.
    let h = g.clone();
    h.manual_seed(6);
    assert_eq!(g.initial_seed(), 6);
    assert_eq!(g.offset(), 0);
    let s = g.seed();
    assert_eq!(h.initial_seed(), s);
}

#[test]
fn cpu_state_round_trip() {
    let g = generator(1234, 0);
    draw(&g);
    let state = g.get_state();
    assert_eq!(state.len(), GENERATOR_STATE_LEN);
    let expected = draw(&g);
    let h = Generator::new(Device::Cpu);
    h.set_state(&state).unwrap();
    assert_eq!(
        h.key(),
        Key {
            seed: 1234,
            offset: 3
        }
    );
    assert_eq!(draw(&h), expected);
    // Setting the state back on the original replays the same numbers.
    g.set_state(&state).unwrap();
    assert_eq!(draw(&g), expected);
}

#[test]
fn state_moves_between_devices() {
    let cpu = generator(77, 40);
    draw(&cpu);
    let expected_next = draw(&Generator::from_key(Device::Cpu, cpu.key()));
    // A CUDA generator object needs no GPU to hold a state.
    let cuda = Generator::new(Device::Cuda(0));
    cuda.set_state(&cpu.get_state()).unwrap();
    assert_eq!(cuda.key(), cpu.key());
    // And back: the stream continues where the CPU generator left it.
    let back = Generator::new(Device::Cpu);
    back.set_state(&cuda.get_state()).unwrap();
    assert_eq!(draw(&back), expected_next);
}

#[test]
fn bad_states_are_typed_errors_and_change_nothing() {
    let g = generator(9, 9);
    let good = g.get_state();
    let target = generator(1, 1);
    let check = |bytes: &[u8]| {
        let err = target.set_state(bytes).unwrap_err();
        assert_eq!(
            target.key(),
            Key { seed: 1, offset: 1 },
            "failed set_state changed the generator"
        );
        err
    };
    assert!(matches!(
        check(&good[..good.len() - 1]),
        RngError::WrongLength {
            expected: 28,
            got: 27
        }
    ));
    assert!(matches!(check(&[]), RngError::WrongLength { got: 0, .. }));
    let mut longer = good.clone();
    longer.push(0);
    assert!(matches!(
        check(&longer),
        RngError::WrongLength { got: 29, .. }
    ));
    let mut magic = good.clone();
    magic[0] = b'X';
    assert!(matches!(check(&magic), RngError::BadMagic { .. }));
    assert!(matches!(
        check(b"PK\x03\x04 zip file"),
        RngError::BadMagic { .. }
    ));
    let mut version = good.clone();
    version[5] = 2;
    assert!(matches!(
        check(&version),
        RngError::UnsupportedVersion {
            found: 2,
            supported: 1
        }
    ));
    let mut corrupt = good.clone();
    corrupt[12] ^= 0x40;
    assert!(matches!(check(&corrupt), RngError::ChecksumMismatch { .. }));
    let word_rng = PhiloxRng::from_key(Key::new(3)).to_bytes();
    assert!(matches!(
        check(&word_rng),
        RngError::WrongStateKind {
            expected: 1,
            found: 2
        }
    ));
    // The messages say what was expected.
    let message = check(&version).to_string();
    assert!(
        message.contains("version 2") && message.contains('1'),
        "{message}"
    );
}

#[test]
fn philox_rng_follows_the_word_order() {
    let key = Key {
        seed: 99,
        offset: 5,
    };
    let mut rng = PhiloxRng::from_key(key);
    let words: Vec<u32> = (0..10).map(|_| rng.next_u32()).collect();
    assert_eq!(words, (0..10).map(|w| word(99, 5, w)).collect::<Vec<_>>());
    let from_op: Vec<u32> = values(&bits(&[10], Device::Cpu, Some(&generator(99, 5))).unwrap());
    assert_eq!(words, from_op);
    // next_u64: low word first; fill_bytes: words little-endian, a partial word is used up.
    let mut rng = PhiloxRng::from_key(key);
    assert_eq!(
        rng.next_u64(),
        u64::from(word(99, 5, 1)) << 32 | u64::from(word(99, 5, 0))
    );
    let mut bytes = [0u8; 7];
    rng.fill_bytes(&mut bytes);
    assert_eq!(bytes[..4], word(99, 5, 2).to_le_bytes());
    assert_eq!(bytes[4..], word(99, 5, 3).to_le_bytes()[..3]);
    assert_eq!(rng.next_u32(), word(99, 5, 4));
    // Seeds: 16 bytes = seed LE, offset LE; seed_from_u64 is PyTorch's key(seed).
    let mut seed = [0u8; 16];
    seed[..8].copy_from_slice(&99u64.to_le_bytes());
    seed[8..].copy_from_slice(&5u64.to_le_bytes());
    assert_eq!(PhiloxRng::from_seed(seed), PhiloxRng::from_key(key));
    assert_eq!(PhiloxRng::seed_from_u64(42).next_u32(), word(42, 0, 0));
}

#[test]
fn philox_rng_from_generator_reserves_one_block() {
    let g = generator(8, 20);
    let mut rng = PhiloxRng::from_generator(&g);
    assert_eq!(g.offset(), 21);
    let derived = fold_in(
        Key {
            seed: 8,
            offset: 20,
        },
        0,
    );
    let mut expected = PhiloxRng::from_key(derived);
    for _ in 0..9 {
        assert_eq!(rng.next_u32(), expected.next_u32());
    }
    assert_eq!(
        g.offset(),
        21,
        "drawing from the rng does not move the generator"
    );
}

#[test]
fn philox_rng_state_round_trips_mid_block() {
    for skip in [0usize, 1, 3, 4, 6, 9] {
        let mut rng = PhiloxRng::from_key(Key {
            seed: u64::MAX,
            offset: u64::MAX - 1,
        });
        for _ in 0..skip {
            rng.next_u32();
        }
        let bytes = rng.to_bytes();
        assert_eq!(bytes.len(), WORD_RNG_STATE_LEN);
        let mut restored = PhiloxRng::from_bytes(&bytes).unwrap();
        assert_eq!(restored, rng);
        for _ in 0..10 {
            assert_eq!(restored.next_u32(), rng.next_u32(), "after skipping {skip}");
        }
    }
}

#[test]
fn philox_rng_bad_states() {
    let mut rng = PhiloxRng::from_key(Key::new(1));
    rng.next_u32();
    let good = rng.to_bytes();
    let resealed = |mut bytes: Vec<u8>| {
        let n = bytes.len();
        let crc = crc32fast::hash(&bytes[..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
        bytes
    };
    let mut lane = good.clone();
    lane[24] = 5;
    assert!(matches!(
        PhiloxRng::from_bytes(&resealed(lane)),
        Err(RngError::InconsistentState { .. })
    ));
    let mut block = good.clone();
    block[30] ^= 1;
    assert!(matches!(
        PhiloxRng::from_bytes(&resealed(block)),
        Err(RngError::InconsistentState { .. })
    ));
    assert!(matches!(
        PhiloxRng::from_bytes(&good[..40]),
        Err(RngError::WrongLength {
            expected: 48,
            got: 40
        })
    ));
    let generator_state = generator(1, 0).get_state();
    assert!(matches!(
        PhiloxRng::from_bytes(&generator_state),
        Err(RngError::WrongStateKind {
            expected: 2,
            found: 1
        })
    ));
}
