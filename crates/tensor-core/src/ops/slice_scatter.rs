//! `slice_scatter_`: write a tensor into a stretch of another along one dimension, in
//! place (`torch.slice_scatter`, which returns a copy, done where the tensor lies).
//!
//! Why it exists: `a.narrow(..).copy_from_(src)` cannot write into `a`, because the view
//! shares `a`'s storage and in-place ops copy a shared storage first (copy-on-write).
//! A buffer that collects one value per step on a device (the trainer's losses, read
//! back to the host in one copy every k steps) needs the write to land in the buffer
//! itself, without a new allocation per step.

use std::sync::Arc;

use crate::{CpuStorage, Result, Storage, Tensor};

impl Tensor {
    /// Overwrites `self.narrow(dim, start, src.dims()[dim])` with `src` (the other
    /// dimensions equal to `self`'s; same dtype and device), leaving the rest of `self`
    /// alone. Like every in-place op, `self`'s storage is copied first only when it is
    /// shared with another tensor. Errors (and leaves `self` unchanged) when `dim` or the
    /// stretch is out of range, or when the shapes, dtypes or devices differ.
    #[track_caller]
    pub fn slice_scatter_(&mut self, src: &Tensor, dim: usize, start: usize) -> Result<()> {
        self.check_dim("slice_scatter_", dim)?;
        src.check_dim("slice_scatter_", dim)?;
        let mut view = self.narrow(dim, start, src.dims()[dim])?;
        // Let the view hold the only reference to the storage, so the write below lands
        // in it rather than in a copy; `self` becomes a view of that storage again after.
        let placeholder = Arc::new(Storage::Cpu(CpuStorage::F32(Vec::new())));
        let whole = std::mem::replace(&mut self.storage, placeholder);
        drop(whole);
        let written = view.copy_from_(src);
        self.storage = view.storage;
        written
    }
}

#[cfg(test)]
mod tests {
    use crate::{Device, Tensor};

    #[test]
    fn writes_in_place_and_only_the_stretch() {
        let mut buffer = Tensor::from_vec(vec![0f32; 5], &[5], Device::Cpu).unwrap();
        let value = Tensor::from_vec(vec![7f32, 8.], &[2], Device::Cpu).unwrap();
        buffer.slice_scatter_(&value, 0, 2).unwrap();
        assert_eq!(buffer.to_vec::<f32>().unwrap(), vec![0., 0., 7., 8., 0.]);
        assert!(buffer.slice_scatter_(&value, 0, 4).is_err());
        assert!(buffer.slice_scatter_(&value, 1, 0).is_err());
        assert_eq!(buffer.to_vec::<f32>().unwrap(), vec![0., 0., 7., 8., 0.]);
    }

    #[test]
    fn a_shared_storage_is_copied_first() {
        let mut buffer = Tensor::from_vec(vec![1f64, 2., 3.], &[3, 1], Device::Cpu).unwrap();
        let other = buffer.clone();
        let value = Tensor::from_vec(vec![9f64], &[1, 1], Device::Cpu).unwrap();
        buffer.slice_scatter_(&value, 0, 1).unwrap();
        assert_eq!(buffer.to_vec::<f64>().unwrap(), vec![1., 9., 3.]);
        assert_eq!(other.to_vec::<f64>().unwrap(), vec![1., 2., 3.]);
    }
}
