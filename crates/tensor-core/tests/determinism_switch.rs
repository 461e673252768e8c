//! The deterministic-algorithms switch: one test, because the mode is process-wide.

use tensor_core::determinism::check_nondeterministic;
use tensor_core::{
    are_deterministic_algorithms_enabled, deterministic_mode,
    is_deterministic_algorithms_warn_only_enabled, use_deterministic_algorithms, DeterministicMode,
    TensorError,
};

#[test]
fn modes_allow_warn_or_refuse_fast_paths() {
    assert_eq!(deterministic_mode(), DeterministicMode::Off);
    assert!(!are_deterministic_algorithms_enabled());
    assert!(check_nondeterministic("scatter_add", "index_add_deterministic").is_ok());

    use_deterministic_algorithms(DeterministicMode::Warn);
    assert!(are_deterministic_algorithms_enabled());
    assert!(is_deterministic_algorithms_warn_only_enabled());
    assert!(check_nondeterministic("scatter_add", "index_add_deterministic").is_ok());

    use_deterministic_algorithms(DeterministicMode::Error);
    let err = check_nondeterministic("DataLoader(in_order = false)", "in_order(true)").unwrap_err();
    assert_eq!(
        err,
        TensorError::Nondeterministic {
            op: "DataLoader(in_order = false)",
            alternative: "in_order(true)",
        }
    );
    let message = err.to_string();
    assert!(message.contains("DataLoader(in_order = false)") && message.contains("in_order(true)"));

    use_deterministic_algorithms(DeterministicMode::Off);
    assert!(check_nondeterministic("scatter_add", "x").is_ok());
}
