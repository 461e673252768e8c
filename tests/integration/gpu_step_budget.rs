//! The host work of one training step on a CUDA device, counted in driver calls and held
//! to a budget (issue 18 for the demo's MLP, issue 43 for the GPT): after warm-up, an
//! eager step allocates and frees nothing through the driver, fills no output with zeros,
//! looks up no kernel, creates no event, initialises nothing, uploads only its batch
//! (input and targets: 2 copies, both from pinned staging buffers), and reads the device
//! (1 copy, 1 wait) only when the loss is asked for. The GPT's step clips its gradients
//! on the device and checks its token ids on the host before their one upload.
//!
//! Counts come from the CUDA stand-in's `DITTO_CUDA_STANDIN_STATS` (docs/cuda-standin.md),
//! written when a process exits, so each run is a child process: this test binary again,
//! running only [`child_trains`] with the step count in `DITTO_STEP_BUDGET_STEPS`. Calls
//! per step = (counts after 2N steps - counts after N steps) / N, which cancels start-up
//! and warm-up. Skips (prints why) unless the stand-in is the driver: a real driver
//! counts nothing; `REQUIRE_GPU=1` turns the skip into a failure.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use ditto::nn_mini::gpt::{DataSpec, GptConfig, GptTrainConfig, GptTrainer, Precision, Text};
use ditto::nn_mini::train::{Run, TrainConfig, Trainer};
use ditto::tensor_core::Device;
use support::gpu;

/// Steps of the shorter run; the longer runs twice as many.
const STEPS: u64 = 12;

/// Driver / cuBLAS call counts of one process.
type Counts = BTreeMap<String, u64>;

/// In a child (`DITTO_STEP_BUDGET_STEPS` set): trains that many steps on cuda:0 of the
/// demo's MLP, or (`DITTO_STEP_BUDGET_TEXT` set) of a small GPT on that text (in
/// `DITTO_STEP_BUDGET_PRECISION`), reading
/// the losses every `DITTO_STEP_BUDGET_READ_EVERY` steps. In the parent run of the tests:
/// does nothing.
#[test]
fn child_trains() {
    let Ok(steps) = std::env::var("DITTO_STEP_BUDGET_STEPS") else {
        return;
    };
    let steps: u64 = steps.parse().expect("a step count");
    let read_every: u64 = std::env::var("DITTO_STEP_BUDGET_READ_EVERY")
        .expect("the read interval")
        .parse()
        .expect("a step count");
    let graphed = std::env::var("DITTO_STEP_BUDGET_GRAPHED").as_deref() == Ok("1");
    if let Ok(path) = std::env::var("DITTO_STEP_BUDGET_TEXT") {
        let text = Text::from_bytes(std::fs::read(&path).unwrap());
        let precision = std::env::var("DITTO_STEP_BUDGET_PRECISION").expect("a precision");
        let config = small_gpt(DataSpec::of(&path, &text), precision.parse().unwrap());
        let mut trainer = GptTrainer::new(config).unwrap();
        trainer.set_cuda_graph(graphed).unwrap();
        return drive(&mut trainer, steps, read_every);
    }
    let config = TrainConfig {
        device: Device::Cuda(0),
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(config).unwrap();
    trainer.set_cuda_graph(graphed).unwrap();
    drive(&mut trainer, steps, read_every);
}

/// Issue 43's GPT: 2 layers of 2 heads, width 64, context 32 (the position table's
/// 64 rows, so its gradient has a tail of zeros), batches of 8, dropout 0.1 (attention
/// and residual), clipping at 1, no held-out split.
fn small_gpt(data: DataSpec, precision: Precision) -> GptTrainConfig {
    let tiny = GptTrainConfig::tiny(data);
    GptTrainConfig {
        model: GptConfig {
            block_size: 64,
            n_layer: 2,
            n_head: 2,
            n_embd: 64,
            precision,
            ..tiny.model
        },
        context: 32,
        batch_size: 8,
        val_fraction: 0.0,
        device: Device::Cuda(0),
        ..tiny
    }
}

/// `steps` deferred steps, the losses read every `read_every` and at the end.
fn drive<R: Run>(trainer: &mut R, steps: u64, read_every: u64) {
    while trainer.step_count() < steps {
        trainer.step_deferred().unwrap();
        if trainer.step_count().is_multiple_of(read_every) {
            trainer.read_losses().unwrap();
        }
    }
    trainer.read_losses().unwrap();
    assert_eq!(trainer.losses().len() as u64, steps);
}

/// Runs [`child_trains`] for `steps` steps in a new process and returns its counts.
fn counts_of_run(
    dir: &Path,
    steps: u64,
    read_every: u64,
    graphed: bool,
    gpt: Option<Precision>,
) -> Counts {
    let stats = dir.join(format!("stats-{steps}-{read_every}-{graphed}-{gpt:?}.json"));
    let mut child = Command::new(std::env::current_exe().unwrap());
    if let Some(precision) = gpt {
        child.env("DITTO_STEP_BUDGET_PRECISION", precision.to_string());
        let text = dir.join("text.txt");
        let words = b"it was the best of times, it was the worst of times; we had everything. ";
        std::fs::write(
            &text,
            words
                .iter()
                .copied()
                .cycle()
                .take(40_000)
                .collect::<Vec<u8>>(),
        )
        .unwrap();
        child.env("DITTO_STEP_BUDGET_TEXT", &text);
    }
    let output = child
        .args([
            "--exact",
            test_support::exact_name(module_path!(), "child_trains").as_str(),
            "--test-threads",
            "1",
        ])
        .env("DITTO_STEP_BUDGET_STEPS", steps.to_string())
        .env("DITTO_STEP_BUDGET_READ_EVERY", read_every.to_string())
        .env("DITTO_STEP_BUDGET_GRAPHED", if graphed { "1" } else { "0" })
        .env("DITTO_CUDA_STANDIN_STATS", &stats)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the child run failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&stats).expect("the stand-in wrote its call counts");
    serde_json::from_str(&text).expect("the call counts are a JSON object of numbers")
}

/// Calls per step after warm-up: (2N-step counts - N-step counts) / N, as a float so a
/// call made every k steps shows as 1/k. `graphed`: steps replayed as a CUDA graph
/// (captured at step 2, so inside the first N).
fn per_step(read_every: u64, graphed: bool) -> BTreeMap<String, f64> {
    per_step_of(read_every, graphed, None)
}

/// [`per_step`] of the MLP, or (`gpt`) of [`small_gpt`] in that precision.
fn per_step_of(read_every: u64, graphed: bool, gpt: Option<Precision>) -> BTreeMap<String, f64> {
    let dir = tempfile::tempdir().unwrap();
    let short = counts_of_run(dir.path(), STEPS, read_every, graphed, gpt);
    let long = counts_of_run(dir.path(), 2 * STEPS, read_every, graphed, gpt);
    long.iter()
        .map(|(name, &n)| {
            let extra = n.saturating_sub(short.get(name).copied().unwrap_or(0));
            (name.clone(), extra as f64 / STEPS as f64)
        })
        .filter(|&(_, per)| per > 0.0)
        .collect()
}

/// The stand-in is the driver (its counts are what this test reads).
fn standin() -> bool {
    if std::env::var("DITTO_CUDA_STANDIN").as_deref() == Ok("1") {
        return true;
    }
    println!("skipped: the call counts come from the CUDA stand-in (scripts/cuda_standin.sh)");
    assert!(
        std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
        "REQUIRE_GPU=1 but the CUDA stand-in is not the driver"
    );
    false
}

/// Sum of the per-step counts of `names`.
fn total(per: &BTreeMap<String, f64>, names: &[&str]) -> f64 {
    names
        .iter()
        .map(|n| per.get(*n).copied().unwrap_or(0.0))
        .sum()
}

const ALLOCATIONS: &[&str] = &[
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemAllocFromPoolAsync",
];
const FREES: &[&str] = &["cuMemFree_v2", "cuMemFreeAsync"];
const MEMSETS: &[&str] = &[
    "cuMemsetD8_v2",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32_v2",
    "cuMemsetD32Async",
];
const DEVICE_TO_HOST: &[&str] = &["cuMemcpyDtoH_v2", "cuMemcpyDtoHAsync_v2"];
const HOST_TO_DEVICE: &[&str] = &["cuMemcpyHtoD_v2", "cuMemcpyHtoDAsync_v2"];
const WAITS: &[&str] = &[
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
];
const PER_STEP_NEVER: &[&str] = &[
    "cuModuleGetFunction",
    "cuModuleLoadData",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuInit",
    "cuDeviceGetCount",
];

#[test]
fn an_eager_step_stays_within_its_driver_call_budget() {
    if !gpu() || !standin() {
        return;
    }
    // The loss read after every step: one copy and one wait per step, no more.
    let per = per_step(1, false);
    println!("calls per step, loss read every step (CUDA stand-in): {per:?}");
    let within = |what: &str, names: &[&str], most: f64| {
        let n = total(&per, names);
        assert!(n <= most, "{what}: {n} per step, budget {most}: {per:?}");
    };
    within("driver allocations", ALLOCATIONS, 0.0);
    within("driver frees", FREES, 0.0);
    within("memsets", MEMSETS, 0.0);
    // Issue 18's budget: the loss read (1 copy, 1 wait) and the batch (input and
    // targets: 2 uploads). cross_entropy picks on the device (gather / one_hot).
    within("device-to-host copies", DEVICE_TO_HOST, 1.0);
    within("waits for the device", WAITS, 1.0);
    within("host-to-device copies", HOST_TO_DEVICE, 2.0);
    // Both through pinned staging buffers (issue 33 item 6): a pageable upload would
    // wait for the GPU to finish the previous step before it starts.
    within("uploads from pageable memory", &["htod_from_pageable"], 0.0);
    within("uploads from pinned memory", &["htod_from_pinned"], 2.0);
    for name in PER_STEP_NEVER {
        within(name, &[name], 0.0);
    }
    assert!(
        total(&per, &["cuLaunchKernel"]) >= 1.0,
        "a step launches kernels: {per:?}"
    );
    // Kernel launches: 32 per step once the optimiser became one fused launch per
    // parameter (`Tensor::sgd_momentum_step_`; three per parameter before, 44 in all).
    // A change that adds launches to the step raises this with its reason.
    within("kernel launches", &["cuLaunchKernel"], 32.0);

    // Losses read every 4 steps: the loss's copy and wait are shared by the 4, so a
    // step reads the device a quarter of a time on average.
    let every_4 = per_step(4, false);
    assert_eq!(
        total(&every_4, DEVICE_TO_HOST),
        0.25,
        "reads per step when reading every 4: {every_4:?}"
    );
    assert_eq!(
        total(&every_4, WAITS),
        0.25,
        "waits per step when reading every 4: {every_4:?}"
    );
    assert_eq!(
        total(&every_4, HOST_TO_DEVICE),
        2.0,
        "uploads per step when reading every 4: {every_4:?}"
    );
}

#[test]
fn a_graphed_step_is_one_graph_launch_and_its_batch() {
    if !gpu() || !standin() {
        return;
    }
    let per = per_step(1, true);
    println!("calls per graphed step, loss read every step (CUDA stand-in): {per:?}");
    let exactly = |what: &str, names: &[&str], want: f64| {
        let n = total(&per, names);
        assert_eq!(n, want, "{what}: {n} per step, want {want}: {per:?}");
    };
    exactly("graph launches", &["cuGraphLaunch"], 1.0);
    exactly("kernel launches", &["cuLaunchKernel"], 0.0);
    exactly(
        "host-to-device copies (input, targets)",
        HOST_TO_DEVICE,
        2.0,
    );
    // Staged through pinned buffers, so they do not wait behind the previous replay.
    exactly("uploads from pinned memory", &["htod_from_pinned"], 2.0);
    exactly("uploads from pageable memory", &["htod_from_pageable"], 0.0);
    exactly("device-to-host copies (the loss)", DEVICE_TO_HOST, 1.0);
    exactly("waits for the device", WAITS, 1.0);
    exactly("driver allocations", ALLOCATIONS, 0.0);
    exactly("driver frees", FREES, 0.0);
    exactly("memsets", MEMSETS, 0.0);
    for name in PER_STEP_NEVER
        .iter()
        .chain(&["cuStreamBeginCapture_v2", "cuGraphInstantiateWithFlags"])
    {
        exactly(name, &[name], 0.0);
    }
    // Reading every 4 steps: the read and the wait are shared by the 4.
    let every_4 = per_step(4, true);
    assert_eq!(total(&every_4, DEVICE_TO_HOST), 0.25, "{every_4:?}");
    assert_eq!(total(&every_4, WAITS), 0.25, "{every_4:?}");
    assert_eq!(total(&every_4, &["cuGraphLaunch"]), 1.0, "{every_4:?}");
}

#[test]
fn a_gpt_step_stays_within_the_same_budget() {
    if !gpu() || !standin() {
        return;
    }
    for precision in [Precision::F32, Precision::Bf16] {
        gpt_budget(precision);
    }
}

/// The GPT step's budget in `precision`: bf16 autocast narrows operands on the device
/// and multiplies with cuBLAS's bf16 GEMM, so it adds launches but no copy or wait.
fn gpt_budget(precision: Precision) {
    let per = per_step_of(1, false, Some(precision));
    println!("calls per {precision} GPT step, loss read every step (CUDA stand-in): {per:?}");
    let within = |what: &str, names: &[&str], most: f64| {
        let n = total(&per, names);
        assert!(n <= most, "{what}: {n} per step, budget {most}: {per:?}");
    };
    within("driver allocations", ALLOCATIONS, 0.0);
    within("driver frees", FREES, 0.0);
    within("memsets", MEMSETS, 0.0);
    // The loss (with the gradient norm beside it): one copy, one wait. Clipping reads
    // nothing; the token ids are checked on the host before they go up.
    within("device-to-host copies", DEVICE_TO_HOST, 1.0);
    within("waits for the device", WAITS, 1.0);
    within("host-to-device copies", HOST_TO_DEVICE, 2.0);
    within("uploads from pageable memory", &["htod_from_pageable"], 0.0);
    for name in PER_STEP_NEVER {
        within(name, &[name], 0.0);
    }
    // Attention is one fused kernel each way: the per-head products of the unfused
    // path (192 gemm calls a step at this size) are gone.
    let (gemm, other): (&[&str], &[&str]) = match precision {
        Precision::F32 => (
            &["cublasSgemm_v2", "cublasSgemmStridedBatched"],
            &["cublasGemmEx", "cublasGemmStridedBatchedEx"],
        ),
        Precision::Bf16 => (
            &["cublasGemmEx", "cublasGemmStridedBatchedEx"],
            &["cublasSgemm_v2", "cublasSgemmStridedBatched"],
        ),
    };
    within("cuBLAS gemm calls", gemm, 27.0);
    within("gemm calls of the other precision", other, 0.0);
    assert!(
        total(&per, gemm) >= 27.0,
        "every product is a gemm: {per:?}"
    );
}

/// `--cuda-graph` for the GPT: forward, loss, backward and clipping are one graph launch;
/// the schedule's rate and AdamW (one launch per 24 parameters: 2) run after it, and
/// the batch is its two uploads (token ids with their sort, targets).
#[test]
fn a_graphed_gpt_step_is_one_graph_launch_and_its_optimizer() {
    if !gpu() || !standin() {
        return;
    }
    let per = per_step_of(1, true, Some(Precision::F32));
    println!("calls per graphed GPT step (CUDA stand-in): {per:?}");
    assert_eq!(total(&per, &["cuGraphLaunch"]), 1.0, "{per:?}");
    assert!(total(&per, &["cuLaunchKernel"]) <= 2.0, "{per:?}");
    assert!(total(&per, HOST_TO_DEVICE) <= 2.0, "{per:?}");
    assert!(total(&per, DEVICE_TO_HOST) <= 1.0, "{per:?}");
    for names in [ALLOCATIONS, FREES, MEMSETS] {
        assert_eq!(total(&per, names), 0.0, "{per:?}");
    }
}
