//! A checkpoint records the arithmetic it was saved under (`train.arithmetic`), and a
//! resume under the other one is a typed error, not a silently different curve. Its own
//! test binary: the switch is process-wide.

use nn_mini::train::{Run, TrainConfig, Trainer, TrainingRun, ARITHMETIC_KEY};
use nn_mini::NnError;
use tensor_core::use_portable_arithmetic;

/// The tests here set a process-wide switch; each runs in a process of its own
/// (`own_process!`), and the lock keeps them apart when the file is run alone.
static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn config() -> TrainConfig {
    TrainConfig {
        seed: 3,
        lr: 0.1,
        ..TrainConfig::mlp(vec![6, 16, 4], 40, 8)
    }
}

#[test]
fn a_resume_must_use_the_arithmetic_the_run_was_saved_with() {
    test_support::own_process!(a_resume_must_use_the_arithmetic_the_run_was_saved_with);
    let _switch = SWITCH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for saved in [true, false] {
        use_portable_arithmetic(saved);
        let mut trainer = Trainer::new(config()).unwrap();
        for _ in 0..3 {
            trainer.step().unwrap();
        }
        let ck = trainer.checkpoint().unwrap();
        let name = if saved { "portable" } else { "default" };
        assert_eq!(ck.metadata(ARITHMETIC_KEY), Some(name));

        use_portable_arithmetic(!saved);
        match Trainer::from_checkpoint(&ck, None, None) {
            Err(NnError::ArithmeticMismatch { saved: s, current }) => {
                assert_eq!((s, current), (saved, !saved));
            }
            Err(e) => panic!("saved {name}, resumed under the other: wrong error {e}"),
            Ok(_) => panic!("saved {name}, resumed under the other: accepted"),
        }
        let message = Trainer::from_checkpoint(&ck, None, None)
            .err()
            .unwrap()
            .to_string();
        assert!(message.contains("use_portable_arithmetic"), "{message}");

        use_portable_arithmetic(saved);
        let mut resumed = Trainer::from_checkpoint(&ck, None, None).unwrap();
        resumed.step().unwrap();
        trainer.step().unwrap();
        assert_eq!(
            resumed.losses().last().map(|l| l.to_bits()),
            trainer.losses().last().map(|l| l.to_bits())
        );
    }
}

#[test]
fn an_unknown_arithmetic_name_is_refused() {
    test_support::own_process!(an_unknown_arithmetic_name_is_refused);
    let _switch = SWITCH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    use_portable_arithmetic(false);
    let trainer = Trainer::new(config()).unwrap();
    let mut ck = trainer.checkpoint().unwrap();
    ck.set_metadata(ARITHMETIC_KEY, "fast-math").unwrap();
    let message = Trainer::from_checkpoint(&ck, None, None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        message.contains("fast-math") && message.contains("portable"),
        "{message}"
    );
}
