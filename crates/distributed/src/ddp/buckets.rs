//! Gradient buckets: the parameter list cut into runs of at most a fixed byte size,
//! each reduced as one flat buffer.
//!
//! The layout is computed once, from the order of [`Module::parameters`], and never
//! rebuilt. (PyTorch's DDP rebuilds its buckets after the first iteration from the
//! order in which gradients became ready, which can differ between runs; a fixed layout
//! keeps every byte of the reduction a function of the model alone. Backward reaches the
//! parameters in reverse order, so in fast mode the last bucket is reduced first, while
//! the backward of the earlier layers runs.)
//!
//! [`Module::parameters`]: nn_mini::Module::parameters

use std::ops::Range;

use tensor_core::{DType, Device, Tensor};

use crate::Result;

/// PyTorch's default `bucket_cap_mb` (25 MiB).
pub const DEFAULT_BUCKET_CAP_BYTES: usize = 25 * 1024 * 1024;

/// One bucket: a run of consecutive parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bucket {
    params: Range<usize>,
    elements: usize,
}

/// The fixed bucket layout of a parameter list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    buckets: Vec<Bucket>,
    /// Element count of every parameter, in order.
    numels: Vec<usize>,
}

impl Buckets {
    /// Cuts parameters of `numels` elements (in parameter order) into runs of at most
    /// `cap_bytes` (a parameter larger than the cap gets a bucket of its own).
    #[must_use]
    pub fn new(numels: &[usize], element_bytes: usize, cap_bytes: usize) -> Self {
        let mut buckets: Vec<Bucket> = Vec::new();
        for (i, &n) in numels.iter().enumerate() {
            let bytes = n.saturating_mul(element_bytes);
            match buckets.last_mut() {
                Some(b)
                    if b.elements
                        .saturating_mul(element_bytes)
                        .saturating_add(bytes)
                        <= cap_bytes =>
                {
                    b.params.end = i + 1;
                    b.elements += n;
                }
                _ => buckets.push(Bucket {
                    params: i..i + 1,
                    elements: n,
                }),
            }
        }
        Buckets {
            buckets,
            numels: numels.to_vec(),
        }
    }

    /// Number of buckets.
    #[must_use]
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True for a model without parameters.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Element count of each bucket.
    #[must_use]
    pub fn sizes(&self) -> Vec<usize> {
        self.buckets.iter().map(|b| b.elements).collect()
    }

    /// The parameters of bucket `b` (indices into the parameter list; none past the
    /// last bucket).
    #[must_use]
    pub fn params_of(&self, b: usize) -> Range<usize> {
        self.buckets
            .get(b)
            .map_or(0..0, |bucket| bucket.params.clone())
    }

    /// One flat 1-D tensor per bucket holding the gradients in parameter order (zeros
    /// for a parameter without one), with `extra` (e.g. the loss) appended to the last.
    pub fn flatten(
        &self,
        grads: &[Option<&Tensor>],
        extra: &Tensor,
        dtype: DType,
        device: Device,
    ) -> Result<Vec<Tensor>> {
        (0..self.buckets.len().max(1))
            .map(|b| self.flatten_bucket(b, grads, extra, dtype, device))
            .collect()
    }

    /// Bucket `b` of [`flatten`](Self::flatten) alone (`grads` is indexed by parameter;
    /// only the bucket's own are read), so a bucket can be reduced as soon as its
    /// gradients are ready.
    pub fn flatten_bucket(
        &self,
        b: usize,
        grads: &[Option<&Tensor>],
        extra: &Tensor,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let params = self.params_of(b);
        let mut parts = Vec::with_capacity(params.len() + 1);
        for i in params {
            parts.push(match grads[i] {
                Some(g) => g.reshape(&[self.numels[i]])?,
                None => Tensor::zeros(&[self.numels[i]], dtype, device)?,
            });
        }
        if b + 1 >= self.buckets.len() {
            parts.push(extra.reshape(&[extra.elem_count()])?);
        }
        Ok(Tensor::cat(&parts, 0)?)
    }

    /// The inverse of [`flatten`](Self::flatten): the gradients, shaped like `dims[i]`,
    /// and the `extra` elements.
    pub fn unflatten(&self, flat: &[Tensor], dims: &[&[usize]]) -> Result<(Vec<Tensor>, Tensor)> {
        let mut grads = Vec::with_capacity(self.numels.len());
        for (b, bucket) in self.buckets.iter().zip(flat) {
            let mut start = 0;
            for i in b.params.clone() {
                let g = bucket.narrow(0, start, self.numels[i])?.contiguous()?;
                grads.push(g.reshape(dims[i])?);
                start += self.numels[i];
            }
        }
        let last = flat.last().expect("flatten makes at least one bucket");
        let used = self.buckets.last().map_or(0, |b| b.elements);
        let extra = last
            .narrow(0, used, last.elem_count() - used)?
            .contiguous()?;
        Ok((grads, extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_the_parameter_order_and_the_cap() {
        let b = Buckets::new(&[4, 4, 10, 1, 1], 4, 40);
        assert_eq!(b.sizes(), [8, 10, 2]);
        let one = Buckets::new(&[4, 4], 4, usize::MAX);
        assert_eq!(one.sizes(), [8]);
        assert!(Buckets::new(&[], 4, 40).is_empty());
    }

    #[test]
    fn flatten_and_unflatten_round_trip() {
        let b = Buckets::new(&[6, 2, 3], 4, 32);
        let g0 =
            Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[2, 3], Device::Cpu).unwrap();
        let g2 = Tensor::from_vec(vec![7.0f32, 8.0, 9.0], &[3], Device::Cpu).unwrap();
        let loss = Tensor::from_vec(vec![0.5f32], &[1], Device::Cpu).unwrap();
        let flat = b
            .flatten(
                &[Some(&g0), None, Some(&g2)],
                &loss,
                DType::F32,
                Device::Cpu,
            )
            .unwrap();
        assert_eq!(flat.len(), 2);
        // 6 + 2 elements fill the 32-byte cap; the third parameter starts bucket 1.
        let zeros_after_g0 = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0];
        assert_eq!(flat[0].to_vec::<f32>().unwrap(), zeros_after_g0);
        assert_eq!(flat[1].to_vec::<f32>().unwrap(), [7.0, 8.0, 9.0, 0.5]);
        let (grads, extra) = b.unflatten(&flat, &[&[2, 3], &[2], &[3]]).unwrap();
        assert_eq!(
            grads[0].to_vec::<f32>().unwrap(),
            g0.to_vec::<f32>().unwrap()
        );
        assert_eq!(grads[0].dims(), [2, 3]);
        assert_eq!(grads[1].to_vec::<f32>().unwrap(), [0.0, 0.0]);
        assert_eq!(extra.to_vec::<f32>().unwrap(), [0.5]);
    }
}
