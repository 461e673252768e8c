//! The Rust types that can be tensor elements, tied to their [`DType`].

use half::{bf16, f16};

use crate::round::f64_to_f32_round_to_odd;
use crate::{CpuStorage, DType};

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that a tensor can hold. Sealed: the set matches [`DType`] one to one.
pub trait Element:
    Copy + Send + Sync + std::fmt::Debug + PartialEq + 'static + sealed::Sealed
{
    /// The dtype of this element type.
    const DTYPE: DType;
    /// Wraps a vector in the matching storage variant.
    fn into_storage(values: Vec<Self>) -> CpuStorage;
    /// The typed slice of a storage, if it holds this type.
    fn slice(storage: &CpuStorage) -> Option<&[Self]>;
    /// The typed mutable slice of a storage, if it holds this type.
    fn slice_mut(storage: &mut CpuStorage) -> Option<&mut [Self]>;
    /// Converts from f64 (used by `full`, `arange` and dtype casts). Rounds to nearest for
    /// floats, truncates toward zero and saturates for integers, `!= 0` for bool.
    fn from_f64(value: f64) -> Self;
    /// Converts to f64 exactly (every element type fits except very large i64).
    fn to_f64(self) -> f64;
}

macro_rules! element {
    ($ty:ty, $variant:ident, $from:expr, $to:expr) => {
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DTYPE: DType = DType::$variant;
            fn into_storage(values: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(values)
            }
            fn slice(storage: &CpuStorage) -> Option<&[Self]> {
                match storage {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(storage: &mut CpuStorage) -> Option<&mut [Self]> {
                match storage {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn from_f64(value: f64) -> Self {
                let convert: fn(f64) -> $ty = $from;
                convert(value)
            }
            fn to_f64(self) -> f64 {
                let convert: fn($ty) -> f64 = $to;
                convert(self)
            }
        }
    };
}

element!(f32, F32, |v| v as f32, |v| v as f64);
element!(f64, F64, |v| v, |v| v);
// `half`'s own f64 conversions round twice; see `round.rs`.
element!(
    f16,
    F16,
    |v| f16::from_f32(f64_to_f32_round_to_odd(v)),
    f16::to_f64
);
element!(
    bf16,
    BF16,
    |v| bf16::from_f32(f64_to_f32_round_to_odd(v)),
    bf16::to_f64
);
element!(i64, I64, |v| v as i64, |v| v as f64);
element!(u32, U32, |v| v as u32, |v| v as f64);
element!(u8, U8, |v| v as u8, |v| v as f64);
element!(bool, Bool, |v| v != 0.0, |v| if v { 1.0 } else { 0.0 });
