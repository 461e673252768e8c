//! The deterministic-algorithms switch: one test, because the mode is process-wide.

use std::sync::atomic::AtomicU64;

use tensor_core::determinism::paths::{markdown_table, FastPath, TENSOR_OPS};
use tensor_core::determinism::{check_nondeterministic, has_warned, Chosen};
use tensor_core::{
    are_deterministic_algorithms_enabled, deterministic_mode,
    is_deterministic_algorithms_warn_only_enabled, use_deterministic_algorithms, Algorithm,
    DeterministicMode, Device, TensorError,
};

/// A downstream crate's op with a fast path, declared through public items only.
static CUSTOM: FastPath = FastPath {
    op: "my_crate::segment_sum",
    devices: "CPU",
    fast: "atomics",
    deterministic: "owner computes",
    auto_fast_when: Some("always"),
    alternative: "Algorithm::Deterministic",
    fast_runs: AtomicU64::new(0),
};

#[test]
fn modes_pick_paths_warn_or_refuse() {
    test_support::own_process!(modes_pick_paths_warn_or_refuse);
    use Algorithm::{Auto, Deterministic, Fast};
    let cpu = Device::Cpu;
    assert_eq!(deterministic_mode(), DeterministicMode::Off);
    assert!(!are_deterministic_algorithms_enabled());
    // Off: Auto takes the fast path only where it pays off; Fast is allowed silently.
    assert_eq!(CUSTOM.choose(Auto, cpu, true).unwrap(), Chosen::Fast);
    assert_eq!(
        CUSTOM.choose(Auto, cpu, false).unwrap(),
        Chosen::Deterministic
    );
    assert_eq!(CUSTOM.choose(Fast, cpu, false).unwrap(), Chosen::Fast);
    assert_eq!(
        CUSTOM.choose(Deterministic, cpu, true).unwrap(),
        Chosen::Deterministic
    );
    assert!(!has_warned(CUSTOM.op));

    // Warn: Auto becomes deterministic; Fast runs and is remembered as warned.
    use_deterministic_algorithms(DeterministicMode::Warn);
    assert!(are_deterministic_algorithms_enabled());
    assert!(is_deterministic_algorithms_warn_only_enabled());
    assert_eq!(
        CUSTOM.choose(Auto, cpu, true).unwrap(),
        Chosen::Deterministic
    );
    assert!(!has_warned(CUSTOM.op));
    assert_eq!(CUSTOM.choose(Fast, cpu, true).unwrap(), Chosen::Fast);
    assert!(has_warned(CUSTOM.op));

    // Error: Auto deterministic; Fast refused with the op, device and alternative.
    use_deterministic_algorithms(DeterministicMode::Error);
    assert_eq!(
        CUSTOM.choose(Auto, cpu, true).unwrap(),
        Chosen::Deterministic
    );
    let err = CUSTOM.choose(Fast, Device::Cuda(1), true).unwrap_err();
    assert_eq!(
        err,
        TensorError::NondeterministicOp {
            op: "my_crate::segment_sum",
            device: Device::Cuda(1),
            alternative: "Algorithm::Deterministic",
        }
    );
    let message = err.to_string();
    for part in [
        "my_crate::segment_sum",
        "cuda:1",
        "Algorithm::Deterministic",
        "Warn",
    ] {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
    let loader = check_nondeterministic("DataLoader(in_order = false)", cpu, "in_order(true)");
    assert!(matches!(
        loader,
        Err(TensorError::NondeterministicOp {
            op: "DataLoader(in_order = false)",
            ..
        })
    ));

    use_deterministic_algorithms(DeterministicMode::Off);
    assert!(check_nondeterministic("scatter_add", cpu, "x").is_ok());
}

#[test]
fn the_table_has_a_row_per_entry_and_every_mode() {
    test_support::own_process!(the_table_has_a_row_per_entry_and_every_mode);
    let table = markdown_table(&TENSOR_OPS);
    assert_eq!(table.lines().count(), 2 + TENSOR_OPS.len());
    for entry in TENSOR_OPS {
        let row = table
            .lines()
            .find(|l| l.contains(&format!("`{}` | {}", entry.op, entry.devices)))
            .unwrap_or_else(|| panic!("no row for {} on {}", entry.op, entry.devices));
        assert_eq!(row.matches(" | ").count(), 6, "{row}");
    }
}
