//! `GaussianClusters`: a synthetic classification dataset generated from a key.

use rand_core::RngCore;
use rng_gen::stream::convert::box_muller;
use rng_gen::{fold_in, Key, PhiloxRng};
use tensor_core::{Device, Tensor};

use crate::data::{Dataset, Sample, SampleRng};
use crate::{NnError, Result};

/// `classes` Gaussian clusters in `features` dimensions. Sample `i` belongs to class
/// `i % classes`; its point is the class centre plus a fixed per-sample offset (the
/// "dataset"), plus fresh augmentation noise drawn from the [`SampleRng`] the loader
/// passes in (so it changes every epoch and exercises the per-sample key path).
///
/// Everything is derived from one key with `fold_in`: the centres from
/// `fold_in(key, 0)`, sample `i`'s fixed offset from `fold_in(fold_in(key, 1), i)`.
/// Nothing is stored but the centres; samples are computed on demand.
#[derive(Clone, Debug)]
pub struct GaussianClusters {
    key: Key,
    len: usize,
    features: usize,
    classes: usize,
    /// `classes x features` row-major.
    centers: Vec<f32>,
    /// Standard deviation of the fixed per-sample offset.
    spread: f32,
    /// Standard deviation of the per-epoch augmentation noise.
    noise: f32,
}

/// `n` standard normals from a word stream (Box-Muller on word pairs,
/// docs/contract.md §5.3).
fn normals(rng: &mut impl RngCore, n: usize) -> impl Iterator<Item = f32> + '_ {
    (0..n.div_ceil(2))
        .flat_map(move |_| {
            let (a, b) = box_muller(rng.next_u32(), rng.next_u32());
            [a, b]
        })
        .take(n)
}

impl GaussianClusters {
    /// The dataset of `len` samples; centres have standard deviation 0.5 per feature,
    /// samples spread 1.0 around them, augmentation noise 0.3.
    pub fn new(key: Key, len: usize, features: usize, classes: usize) -> Result<Self> {
        if features == 0 || classes == 0 {
            return Err(NnError::invalid(
                "GaussianClusters::new",
                format!("features ({features}) and classes ({classes}) must be > 0"),
            ));
        }
        let mut rng = PhiloxRng::from_key(fold_in(key, 0));
        let centers = normals(&mut rng, classes * features)
            .map(|z| 0.5 * z)
            .collect();
        Ok(GaussianClusters {
            key,
            len,
            features,
            classes,
            centers,
            spread: 1.0,
            noise: 0.3,
        })
    }
}

impl Dataset for GaussianClusters {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize, rng: &mut SampleRng) -> Result<Sample> {
        if index >= self.len {
            return Err(NnError::invalid(
                "GaussianClusters::get",
                format!("index {index} is out of range for {} samples", self.len),
            ));
        }
        let class = index % self.classes;
        let center = &self.centers[class * self.features..(class + 1) * self.features];
        let mut fixed = PhiloxRng::from_key(fold_in(fold_in(self.key, 1), index as u64));
        let input: Vec<f32> = center
            .iter()
            .zip(normals(&mut fixed, self.features))
            .zip(normals(rng, self.features))
            .map(|((&c, z), e)| c + self.spread * z + self.noise * e)
            .collect();
        Ok(Sample {
            input: Tensor::from_vec(input, &[self.features], Device::Cpu)?,
            target: Tensor::from_vec(vec![class as i64], &[], Device::Cpu)?,
        })
    }
}
