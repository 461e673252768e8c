//! An unseeded program starts from PyTorch's default seed. In a process of its own
//! (`own_process!`) because any other test that seeds the default generator would race with it.

use rng_gen::{default_generator, initial_seed, DEFAULT_SEED};
use tensor_core::Device;

#[test]
fn unseeded_default_generator_uses_pytorch_default_seed() {
    test_support::own_process!(unseeded_default_generator_uses_pytorch_default_seed);
    assert_eq!(initial_seed(), DEFAULT_SEED);
    assert_eq!(DEFAULT_SEED, 67_280_421_310_721);
    assert_eq!(default_generator(Device::Cpu).unwrap().offset(), 0);
}
