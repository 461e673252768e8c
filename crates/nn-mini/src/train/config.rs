//! `TrainConfig`: everything that defines a training run, stored in its checkpoints.

use serde::{Deserialize, Serialize};
use tensor_core::Device;

use super::run_config::as_string;
use crate::{NnError, Result};

/// The run's hyperparameters. Stored in every checkpoint (as JSON metadata) so a resume
/// rebuilds exactly the same model, optimiser and loader; only `num_workers` and
/// `device` may differ on resume. The worker count never changes a number. The device
/// keeps every random stream (CPU and CUDA draw the same bits), but the CPU and a GPU
/// round `matmul` (gemm vs cuBLAS) and `exp` / `log` (libm vs libdevice) differently, so
/// a run resumed on another device continues with losses that differ in the last bits;
/// resumed on the same device (the same GPU model for CUDA) it is bit-identical.
///
/// Its JSON ([`RunConfig::to_json`](super::RunConfig::to_json)) is serde's, keys sorted;
/// the seed and the device are strings (`"7"`, `"cuda:1"`): a u64 seed does not survive
/// a JSON reader that keeps numbers as f64.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// The run seed: every random number of the run derives from it (see
    /// [`crate::train`]).
    #[serde(with = "as_string")]
    pub seed: u64,
    /// Samples per batch.
    pub batch_size: usize,
    /// Samples in the synthetic dataset.
    pub dataset_size: usize,
    /// Layer widths, input first: `[64, 256, 256, 10]` is a 64-256-256-10 MLP. The last
    /// entry is the number of classes.
    pub layers: Vec<usize>,
    /// Dropout probability after each hidden layer.
    pub dropout: f64,
    /// SGD learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// SGD weight decay.
    pub weight_decay: f64,
    /// Loader worker threads (does not change results).
    pub num_workers: usize,
    /// Where the model runs (does not change results, by ditto's contract).
    #[serde(with = "as_string")]
    pub device: Device,
}

impl Default for TrainConfig {
    /// The demo's run: a 64-256-256-10 MLP with dropout 0.1, SGD lr 0.05 momentum 0.9,
    /// batches of 128 from 4000 samples (31.25 batches per epoch, so checkpoints fall
    /// mid-epoch), seed 0.
    fn default() -> Self {
        TrainConfig::mlp(vec![64, 256, 256, 10], 4000, 128)
    }
}

impl TrainConfig {
    /// A run of the MLP with these layer widths (input first, classes last) on
    /// `dataset_size` synthetic samples in batches of `batch_size`, with the demo's
    /// hyperparameters: seed 0, dropout 0.1, SGD lr 0.05, momentum 0.9, no weight decay,
    /// no loader workers, on the CPU. Change the rest with struct update syntax:
    /// `TrainConfig { seed: 7, ..TrainConfig::mlp(vec![6, 16, 4], 50, 8) }`.
    #[must_use]
    pub fn mlp(layers: Vec<usize>, dataset_size: usize, batch_size: usize) -> Self {
        TrainConfig {
            seed: 0,
            batch_size,
            dataset_size,
            layers,
            dropout: 0.1,
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 0.0,
            num_workers: 0,
            device: Device::Cpu,
        }
    }
}

impl TrainConfig {
    /// The most parameters (weights and biases together) a run's model may have: 2^30,
    /// 4 GiB of f32, which the run holds three times over (values, gradients, momentum).
    /// A guard against typos and crafted checkpoints (`layers: [64, 4000000000, 10]`
    /// would ask for about 10^12 bytes), checked before anything is allocated; build a
    /// larger model with the layers directly.
    pub const MAX_PARAMETERS: u64 = 1 << 30;

    /// Errors on values that cannot make a run, before anything is allocated.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(NnError::invalid("TrainConfig", message));
        if self.layers.len() < 2 || self.layers.contains(&0) {
            return bad(format!(
                "layers must list at least input and output widths, all > 0, got {:?}",
                self.layers
            ));
        }
        let count = self.parameter_count();
        if count.is_none_or(|n| n > Self::MAX_PARAMETERS) {
            return bad(format!(
                "layers {:?} make a model of {} parameters, more than the limit of {} \
                 (TrainConfig::MAX_PARAMETERS)",
                self.layers,
                count.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
                Self::MAX_PARAMETERS
            ));
        }
        let centres = (self.layers[0] as u64).checked_mul(*self.layers.last().unwrap_or(&0) as u64);
        if centres.is_none_or(|n| n > Self::MAX_PARAMETERS) {
            return bad(format!(
                "the synthetic dataset's {} classes x {} features exceed {} values",
                self.layers.last().unwrap_or(&0),
                self.layers[0],
                Self::MAX_PARAMETERS
            ));
        }
        if self.batch_size == 0 || self.dataset_size == 0 {
            return bad(format!(
                "batch_size ({}) and dataset_size ({}) must be > 0",
                self.batch_size, self.dataset_size
            ));
        }
        Ok(())
    }

    /// The names and dims of the model's parameters, in the order the model lists them
    /// (`"0.weight"` `[out, in]`, `"0.bias"` `[out]`, then `"3.weight"`, ...: each hidden
    /// layer is `Linear, ReLU, Dropout`), computed without building the model, so a
    /// checkpoint can be checked against its configuration before anything is
    /// allocated.
    #[must_use]
    pub fn parameter_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let mut shapes = Vec::new();
        for (i, pair) in self.layers.windows(2).enumerate() {
            let index = 3 * i;
            shapes.push((format!("{index}.weight"), vec![pair[1], pair[0]]));
            shapes.push((format!("{index}.bias"), vec![pair[1]]));
        }
        shapes
    }

    /// Weights and biases of the model, or `None` when the count overflows `u64`.
    #[must_use]
    pub fn parameter_count(&self) -> Option<u64> {
        self.layers.windows(2).try_fold(0u64, |total, pair| {
            let (inputs, outputs) = (pair[0] as u64, pair[1] as u64);
            total.checked_add(inputs.checked_add(1)?.checked_mul(outputs)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::RunConfig;

    #[test]
    fn json_round_trips_exactly() {
        let config = TrainConfig {
            seed: u64::MAX,
            lr: 0.1 + 0.2,
            device: Device::Cuda(1),
            ..TrainConfig::default()
        };
        assert_eq!(TrainConfig::from_json(&config.to_json()).unwrap(), config);
        assert!(TrainConfig::from_json("{}").is_err());
        assert!(TrainConfig::from_json("not json").is_err());
    }

    /// The bytes checkpoints store (their hash covers them): keys sorted, f64 in
    /// shortest form, seed and device as strings.
    #[test]
    fn json_is_the_bytes_checkpoints_store() {
        let config = TrainConfig {
            seed: 7,
            device: Device::Cuda(1),
            ..TrainConfig::mlp(vec![6, 16, 4], 50, 8)
        };
        assert_eq!(
            config.to_json(),
            r#"{"batch_size":8,"dataset_size":50,"device":"cuda:1","dropout":0.1,"layers":[6,16,4],"lr":0.05,"momentum":0.9,"num_workers":0,"seed":"7","weight_decay":0.0}"#
        );
        let err = TrainConfig::from_json(&config.to_json().replace(r#""7""#, "7"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("a string"), "{err}");
    }

    #[test]
    fn huge_models_are_refused_before_anything_is_allocated() {
        for layers in [
            vec![64, 4_000_000_000, 10],
            vec![usize::MAX, usize::MAX, 2],
            vec![1 << 20, 1 << 11],
            vec![2, 2, 1 << 40],
        ] {
            let config = TrainConfig {
                layers: layers.clone(),
                ..TrainConfig::default()
            };
            let err = config.validate().unwrap_err();
            assert!(
                err.to_string().contains("MAX_PARAMETERS") || err.to_string().contains("exceed"),
                "{layers:?}: {err}"
            );
            assert!(TrainConfig::from_json(&config.to_json()).is_err());
        }
        let demo = TrainConfig::default();
        assert_eq!(
            demo.parameter_count(),
            Some(64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10)
        );
    }
}
