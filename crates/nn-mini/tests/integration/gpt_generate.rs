//! Reproducible sampling (issue 44): a request's text depends on the request alone. The
//! same 200 seeded requests, with mixed prompt lengths, sampling settings and lengths
//! that slide past the position table, give byte-identical texts run alone, in batches
//! of 2, 7 and 64, shuffled, on 1, 2, 3 and 8 threads, and continued after an
//! interruption; the cached step agrees with the full forward; bad requests are typed
//! errors.

use nn_mini::gpt::{
    generate_batch, Generation, GenerationRequest, Gpt, GptConfig, KvCache, SamplingParams,
};
use nn_mini::Module;
use rng_gen::{Generator, Key};
use tensor_core::{DType, Device, Tensor};
use test_support::on_threads;

/// Requests in the invariance check (its first `n` in the quick one).
const REQUESTS: usize = 200;

/// A random-init GPT with a position table of 16, so longer texts slide.
fn model() -> Gpt {
    let config = GptConfig {
        block_size: 16,
        n_layer: 2,
        n_head: 2,
        n_embd: 32,
        dropout: 0.0,
        ..GptConfig::default()
    };
    let init = Generator::from_key(Device::Cpu, Key::new(11));
    Gpt::new(&config, &init, &init).unwrap()
}

/// 200 requests: prompts of 1 to 20 bytes, greedy and sampled, top-k and top-p, some
/// with a stop sequence, up to 30 new bytes (past the table of 16).
fn requests() -> Vec<GenerationRequest> {
    let words = b"to be or not to be that is the question whether tis nobler";
    (0..REQUESTS as u64)
        .map(|i| {
            let start = (i * 7 % 30) as usize;
            let len = 1 + (i * 13 % 20) as usize;
            GenerationRequest {
                prompt: words[start..start + len].to_vec(),
                seed: 1000 + i,
                sampling: SamplingParams {
                    temperature: [0.0, 0.7, 1.0, 1.3][(i % 4) as usize],
                    top_k: (i % 3 == 0).then_some(20),
                    top_p: (i % 5 == 0).then_some(0.9),
                },
                max_tokens: 1 + (i * 17 % 30) as usize,
                stop: (i % 6 == 0).then(|| b"e".to_vec()),
            }
        })
        .collect()
}

/// The texts of the requests `order` names, run `batch_size` at a time in that order,
/// by index.
fn texts(order: &[usize], batch_size: usize) -> Vec<Vec<u8>> {
    let all = requests();
    let mut model = model();
    let mut out = vec![Vec::new(); all.len()];
    let shuffled = order.iter().map(|&i| all[i].clone()).collect();
    generate_batch(&mut model, shuffled, batch_size, |k, text| {
        out[order[k]] = text;
        Ok(())
    })
    .unwrap();
    out
}

/// The first `n` requests give the same texts alone, in each of `batches` (in order and
/// shuffled) and on each of `threads` (shuffled, in batches of 7).
fn assert_invariant(n: usize, batches: &[usize], threads: &[usize]) {
    let identity: Vec<usize> = (0..n).collect();
    let texts_of = |order: &[usize], batch| {
        let all = texts(order, batch);
        order
            .iter()
            .map(|&i| (i, all[i].clone()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let alone = texts_of(&identity, 1);
    assert!(
        alone.values().any(|t| t.len() > 16),
        "some texts slide past the table"
    );
    assert!(alone.values().filter(|t| !t.is_empty()).count() > n * 3 / 4);
    // A permutation: 73 is prime to 200 and to every n used here.
    let shuffled: Vec<usize> = (0..n).map(|i| (i * 73 + 19) % n).collect();
    for &batch in batches {
        assert_eq!(texts_of(&identity, batch), alone, "batches of {batch}");
        assert_eq!(
            texts_of(&shuffled, batch),
            alone,
            "batches of {batch}, shuffled"
        );
    }
    for &t in threads {
        let got = on_threads(t, || texts_of(&shuffled, 7));
        assert_eq!(got, alone, "{t} threads");
    }
}

#[test]
fn a_requests_text_does_not_depend_on_its_batch_order_or_threads() {
    assert_invariant(40, &[7, 64], &[3]);
}

#[test]
#[ignore = "heavy: 200 requests in 10 arrangements; CI runs it in release"]
fn two_hundred_requests_give_one_text_each_in_every_arrangement() {
    assert_invariant(REQUESTS, &[2, 7, 64], &[2, 3, 8]);
}

#[test]
fn an_interrupted_generation_continues_as_if_it_had_not_stopped() {
    let mut model = model();
    for request in requests().into_iter().step_by(17) {
        let mut straight = Generation::new(request.clone()).unwrap();
        while !straight.is_done() {
            straight.step(&mut model).unwrap();
        }
        for k in [1, 5, 20] {
            let mut first = Generation::new(request.clone()).unwrap();
            while first.text().len() < k && !first.is_done() {
                first.step(&mut model).unwrap();
            }
            let mut resumed = Generation::resume(request.clone(), first.text().to_vec()).unwrap();
            while !resumed.is_done() {
                resumed.step(&mut model).unwrap();
            }
            assert_eq!(resumed.text(), straight.text(), "resumed after {k}");
        }
    }
}

#[test]
fn the_cached_step_agrees_with_the_full_forward() {
    let mut model = model();
    let tokens = b"whether tis nobl";
    let mut cache = KvCache::new();
    for (i, &token) in tokens.iter().enumerate() {
        let cached = model.forward_cached(token, &mut cache).unwrap();
        let input: Vec<i64> = tokens[..=i].iter().map(|&b| i64::from(b)).collect();
        let input = Tensor::from_vec(input, &[1, i + 1], Device::Cpu).unwrap();
        let full = model.forward(&input, false).unwrap();
        let last = full.narrow(1, i, 1).unwrap().reshape(&[256]).unwrap();
        let (a, b) = (
            cached
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            last.to_vec::<f32>().unwrap(),
        );
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(worst < 1e-4, "position {i}: {worst}");
    }
    assert_eq!(cache.tokens(), tokens);
}

#[test]
fn bad_requests_are_typed_errors() {
    let base = requests()[1].clone();
    let empty = GenerationRequest {
        prompt: Vec::new(),
        ..base.clone()
    };
    assert!(Generation::new(empty)
        .unwrap_err()
        .to_string()
        .contains("empty prompt"));
    let hot = GenerationRequest {
        sampling: SamplingParams {
            temperature: -1.0,
            ..SamplingParams::default()
        },
        ..base.clone()
    };
    assert!(Generation::new(hot)
        .unwrap_err()
        .to_string()
        .contains("temperature"));
    let err = generate_batch(&mut model(), vec![base], 0, |_, _| Ok(())).unwrap_err();
    assert!(err.to_string().contains("a batch of 0"), "{err}");
}
