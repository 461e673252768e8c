//! Every mode of the deterministic-algorithms switch against every CPU op that consults
//! it, through the ops themselves: which path runs (each entry's `fast_runs` counter),
//! what it returns, whether it warns, and the typed error. The mode is process-wide, so
//! the modes run one after another in one test; the warning's "printed once" needs a
//! process of its own and runs the test binary again as a child.

use crate::support;

use std::process::Command;

use tensor_core::determinism::has_warned;
use tensor_core::determinism::paths::INDEX_ADD_CPU;
use tensor_core::{use_deterministic_algorithms, Algorithm, DeterministicMode, Device, Tensor};
use tensor_core::{Result, TensorError};

use support::mixed;
use test_support::on_threads;

/// An embedding-backward-shaped `index_add`: 16384 rows of 32 into 40 targets, large
/// enough for `Auto` to take the fast path with 2 threads in `Off` mode.
struct Case {
    dst: Tensor,
    index: Tensor,
    src: Tensor,
}

impl Case {
    fn new() -> Case {
        let (size, n, inner) = (40, 16_384, 32);
        let index: Vec<i64> = (0..n as i64).map(|k| (k * 7919) % size as i64).collect();
        Case {
            dst: Tensor::from_vec(mixed(size * inner, 1), &[size, inner], Device::Cpu).unwrap(),
            index: Tensor::from_vec(index, &[n], Device::Cpu).unwrap(),
            src: Tensor::from_vec(mixed(n * inner, 2), &[n, inner], Device::Cpu).unwrap(),
        }
    }

    fn index_add(&self, algorithm: Algorithm) -> Result<Tensor> {
        self.dst
            .index_add_with(0, &self.index, &self.src, 1.0, algorithm)
    }

    fn index_add_in_place(&self) -> Result<Tensor> {
        let mut out = self.dst.clone();
        out.index_add_(0, &self.index, &self.src, 1.0)?;
        Ok(out)
    }
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_bits().unwrap()
}

/// Runs `f` on 2 threads and returns its result and how many fast paths it took.
fn on_two_threads<R: Send>(f: impl FnOnce() -> R + Send) -> (R, u64) {
    let before = INDEX_ADD_CPU.fast_runs();
    let result = on_threads(2, f);
    (result, INDEX_ADD_CPU.fast_runs() - before)
}

#[test]
fn every_mode_of_every_cpu_op() {
    test_support::own_process!(every_mode_of_every_cpu_op);
    use Algorithm::{Auto, Deterministic, Fast};
    let case = Case::new();
    let reference = bits(&case.index_add(Deterministic).unwrap());
    let close = |t: &Tensor| {
        let want = case
            .index_add(Deterministic)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let got = t.to_vec::<f32>().unwrap();
        // ~410 terms of |x| <= 5000 per target: rounding in another order moves a sum
        // by at most 410 * 2^-24 * 410 * 5000 < 64 (index_add.rs checks exact terms).
        got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 64.0)
    };
    let sum_input = Tensor::from_vec(mixed(3 * 70_000, 3), &[3, 70_000], Device::Cpu).unwrap();
    let sum_reference = bits(&sum_input.sum_dim(1, false).unwrap());
    let mean_reference = bits(&sum_input.mean_dim(1, false).unwrap());

    for mode in [
        DeterministicMode::Off,
        DeterministicMode::Warn,
        DeterministicMode::Error,
    ] {
        use_deterministic_algorithms(mode);
        let off = mode == DeterministicMode::Off;

        // index_add, Deterministic: always the fixed order, the reference's bits.
        let (out, fast) = on_two_threads(|| case.index_add(Deterministic));
        assert_eq!(
            (bits(&out.unwrap()), fast),
            (reference.clone(), 0),
            "{mode:?}"
        );

        // index_add, Auto: the fast path only in Off mode; otherwise the reference.
        let (out, fast) = on_two_threads(|| case.index_add(Auto));
        let out = out.unwrap();
        if off {
            assert_eq!(
                fast, 1,
                "Auto takes the fast path in Off mode where it pays"
            );
            assert!(close(&out));
        } else {
            assert_eq!((bits(&out), fast), (reference.clone(), 0), "{mode:?}");
        }
        // index_add_ (in place, Auto): the same choice.
        let (out, fast) = on_two_threads(|| case.index_add_in_place());
        assert_eq!(fast, u64::from(off), "{mode:?}");
        if !off {
            assert_eq!(bits(&out.unwrap()), reference, "{mode:?}");
        }

        // index_add, Fast: runs in Off, runs and warns in Warn, typed error in Error.
        let (out, fast) = on_two_threads(|| case.index_add(Fast));
        match mode {
            DeterministicMode::Off | DeterministicMode::Warn => {
                assert_eq!(fast, 1);
                assert!(close(&out.unwrap()));
                assert_eq!(has_warned("index_add"), mode == DeterministicMode::Warn);
            }
            DeterministicMode::Error => {
                assert_eq!(fast, 0);
                assert_eq!(
                    out.unwrap_err(),
                    TensorError::NondeterministicOp {
                        op: "index_add",
                        device: Device::Cpu,
                        alternative: INDEX_ADD_CPU.alternative,
                    }
                );
            }
        }

        // scatter_add and sum / mean have no CPU fast path: every algorithm in every mode
        // runs the deterministic path, and an explicit Fast is no error.
        let dst = Tensor::zeros(&[5, 6], tensor_core::DType::F32, Device::Cpu).unwrap();
        let src = Tensor::from_vec(mixed(9 * 6, 4), &[9, 6], Device::Cpu).unwrap();
        let index: Vec<i64> = (0..54).map(|i| (i * 3) % 5).collect();
        let index = Tensor::from_vec(index, &[9, 6], Device::Cpu).unwrap();
        let scatter_reference = bits(
            &dst.scatter_add_with(0, &index, &src, Deterministic)
                .unwrap(),
        );
        for algorithm in [Auto, Deterministic, Fast] {
            let scattered = dst.scatter_add_with(0, &index, &src, algorithm).unwrap();
            assert_eq!(
                bits(&scattered),
                scatter_reference,
                "{mode:?} {algorithm:?}"
            );
            let sum = sum_input.sum_with(Some(1), false, algorithm).unwrap();
            assert_eq!(bits(&sum), sum_reference, "{mode:?} {algorithm:?}");
            let mean = sum_input.mean_with(Some(1), false, algorithm).unwrap();
            assert_eq!(bits(&mean), mean_reference, "{mode:?} {algorithm:?}");
        }
    }
    use_deterministic_algorithms(DeterministicMode::Off);
}

/// The child half of `the_warning_is_printed_once`: three fast `index_add`s in Warn mode.
#[test]
fn warn_mode_child() {
    if std::env::var_os("DITTO_WARN_ONCE_CHILD").is_none() {
        return;
    }
    use_deterministic_algorithms(DeterministicMode::Warn);
    let case = Case::new();
    for _ in 0..3 {
        on_two_threads(|| case.index_add(Algorithm::Fast).unwrap());
    }
}

#[test]
fn the_warning_is_printed_once() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test_support::exact_name(module_path!(), "warn_mode_child").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DITTO_WARN_ONCE_CHILD", "1")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let warnings = stderr
        .lines()
        .filter(|l| l.starts_with("ditto warning: index_add on cpu"))
        .count();
    assert_eq!(
        warnings, 1,
        "stderr of three fast index_adds in Warn mode:\n{stderr}"
    );
    assert!(stderr.contains("Algorithm::Deterministic"), "{stderr}");
}
