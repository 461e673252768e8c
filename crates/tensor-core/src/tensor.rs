//! The tensor: a typed, strided view over shared storage.

use std::sync::Arc;

use crate::layout::is_contiguous;
use crate::{CpuStorage, DType, Device, Element, Result, Shape, Storage, TensorError};

/// An n-dimensional array on a [`Device`].
///
/// Cloning is cheap: clones share the storage (like `torch.Tensor` views). Views such as
/// [`Tensor::t`] only change the shape, strides and offset. In-place methods (ending in
/// `_`) copy the storage first when it is shared, so they never change another clone.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub(crate) storage: Arc<Storage>,
    pub(crate) shape: Shape,
    /// Strides in elements, one per dimension.
    pub(crate) strides: Vec<usize>,
    /// Offset of element `[0, 0, ...]` into the storage, in elements.
    pub(crate) offset: usize,
}

impl Tensor {
    /// Wraps a storage holding exactly `shape.elem_count()` elements in row-major order.
    pub fn from_storage(storage: Storage, dims: &[usize]) -> Result<Self> {
        let shape = Shape::new(dims)?;
        let len = storage.len();
        if len != shape.elem_count() {
            return Err(TensorError::ElementCountMismatch {
                dims: dims.to_vec(),
                expected: shape.elem_count(),
                got: len,
            });
        }
        Ok(Tensor::contiguous_over(Arc::new(storage), shape, 0))
    }

    /// A row-major view of `shape` starting at `offset` of `storage` (caller checks
    /// bounds).
    pub(crate) fn contiguous_over(storage: Arc<Storage>, shape: Shape, offset: usize) -> Self {
        let strides = shape.contiguous_strides();
        Tensor {
            storage,
            shape,
            strides,
            offset,
        }
    }

    /// A tensor holding `values` (row-major) with the given dims, on `device`. With
    /// `Device::Cpu` the vector is moved in, not copied.
    pub fn from_vec<T: Element>(values: Vec<T>, dims: &[usize], device: Device) -> Result<Self> {
        let cpu = Tensor::from_storage(Storage::Cpu(T::into_storage(values)), dims)?;
        cpu.moved_to(device)
    }

    /// A tensor copied from a slice (row-major) with the given dims, on `device`.
    pub fn from_slice<T: Element>(values: &[T], dims: &[usize], device: Device) -> Result<Self> {
        Tensor::from_vec(values.to_vec(), dims, device)
    }

    /// Builds a CPU tensor directly from a typed host buffer (used by samplers and
    /// loaders that fill a `Vec` themselves); no copy is made.
    pub fn from_cpu_storage(storage: CpuStorage, dims: &[usize]) -> Result<Self> {
        Tensor::from_storage(Storage::Cpu(storage), dims)
    }

    /// The shape.
    #[must_use]
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The dimensions.
    #[must_use]
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }

    /// Number of dimensions.
    #[must_use]
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Number of elements.
    #[must_use]
    pub fn elem_count(&self) -> usize {
        self.shape.elem_count()
    }

    /// Strides in elements.
    #[must_use]
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Offset of the first element into the storage, in elements. Kernels reading the
    /// storage of a contiguous tensor start here.
    #[must_use]
    pub fn storage_offset(&self) -> usize {
        self.offset
    }

    /// The element type.
    #[must_use]
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    /// The device holding the elements.
    #[must_use]
    pub fn device(&self) -> Device {
        self.storage.device()
    }

    /// The underlying storage (shared with views of this tensor). Its element count may
    /// exceed [`Tensor::elem_count`] for views; index it with the offset and strides.
    #[must_use]
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// True when the elements are laid out row-major from the offset with no gaps (the
    /// stride of a size-1 dimension does not matter).
    #[must_use]
    pub fn is_contiguous(&self) -> bool {
        is_contiguous(self.dims(), &self.strides)
    }

    /// Mutable access to the storage, copying it first if another tensor shares it
    /// (copy-on-write), so in-place updates never leak into clones. For crates that
    /// write a tensor's elements themselves (rng-gen's in-place random ops on CUDA
    /// tensors); index it with [`Tensor::storage_offset`] and [`Tensor::strides`].
    pub fn storage_mut(&mut self) -> Result<&mut Storage> {
        if Arc::get_mut(&mut self.storage).is_none() {
            let copy = self.storage.try_clone()?;
            self.storage = Arc::new(copy);
        }
        Ok(Arc::get_mut(&mut self.storage).expect("unique after copy-on-write"))
    }
}
