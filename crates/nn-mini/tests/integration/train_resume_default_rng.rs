//! The process-wide default CPU generator is saved and restored with a run.
//!
//! In a process of its own (`own_process!`): it sets the global generator, which would race
//! with other tests running in parallel threads.

use nn_mini::train::{Run, TrainConfig, Trainer};
use rng_gen::{default_generator, Key};
use tensor_core::Device;

#[test]
fn default_generator_state_round_trips() {
    test_support::own_process!(default_generator_state_round_trips);
    let default = default_generator(Device::Cpu).unwrap();
    let config = TrainConfig::mlp(vec![3, 5, 2], 20, 4);
    let mut trainer = Trainer::new(config).unwrap();
    trainer.step().unwrap();
    rng_gen::manual_seed(2024);
    default.reserve_blocks(17);
    let saved = default.key();
    let ck = trainer.checkpoint().unwrap();

    default.set_key(Key { seed: 1, offset: 2 });
    let resumed = Trainer::from_checkpoint(&ck, None, None).unwrap();
    assert_eq!(default.key(), saved);
    // The training loop itself never draws from the default generator.
    let mut resumed = resumed;
    resumed.step().unwrap();
    assert_eq!(default.key(), saved);
}
