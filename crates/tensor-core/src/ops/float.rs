//! The float element types the CPU math supports.

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::Element;

/// f32 or f64: what generic op code needs beyond `Element`. (Code under
/// `with_float_dtype!` sees the concrete type and calls its inherent methods.)
pub(crate) trait Float:
    Element
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// Zero.
    const ZERO: Self;
    /// e^x (libm).
    fn exp(self) -> Self;
    /// True for NaN.
    fn is_nan(self) -> bool;
}

macro_rules! float {
    ($t:ty) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}

float!(f32);
float!(f64);
