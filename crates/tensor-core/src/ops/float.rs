//! The float element types the CPU math supports.

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::Element;

/// f32 or f64: what generic op code needs beyond `Element`. (Code under
/// `with_float_dtype!` sees the concrete type and calls its inherent methods.)
pub trait Float:
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
    /// e^x under portable arithmetic: ditto's own for f32 (docs/contract.md §14), libm
    /// for f64 (not covered by portable arithmetic).
    fn portable_exp(self) -> Self;
    /// ln(x) under portable arithmetic, as [`Float::portable_exp`].
    fn portable_ln(self) -> Self;
    /// tanh(x): libm's for f64; for f32 the vectorisable
    /// [`tanh_f32`](crate::ops::elementwise::gelu::tanh_f32), GELU's only use.
    fn tanh(self) -> Self;
    /// tanh(x) under portable arithmetic, as [`Float::portable_exp`].
    fn portable_tanh(self) -> Self;
    /// `ln(total)` of a positive f64 sum in this dtype: under portable arithmetic f32
    /// uses [`crate::portable::math::log_of_sum`]; otherwise (and for f64) f64 libm,
    /// rounded once.
    fn ln_of_sum(total: f64, portable: bool) -> Self;
    /// True for NaN.
    fn is_nan(self) -> bool;
}

/// ditto's own routine `$f` for f32; libm's (`exp`, `ln`, or `ln` rounded once for
/// `log_of_sum`) for f64.
macro_rules! portable {
    (f32, $f:ident, $x:expr) => {
        crate::portable::math::$f($x)
    };
    (f64, exp, $x:expr) => {
        f64::exp($x)
    };
    (f64, log, $x:expr) => {
        f64::ln($x)
    };
    (f64, log_of_sum, $x:expr) => {
        f64::ln($x)
    };
    (f64, tanh, $x:expr) => {
        f64::tanh($x)
    };
}

macro_rules! fast_tanh {
    (f32, $x:expr) => {
        crate::ops::elementwise::gelu::tanh_f32($x)
    };
    (f64, $x:expr) => {
        f64::tanh($x)
    };
}

macro_rules! float {
    ($t:ident) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn portable_exp(self) -> Self {
                portable!($t, exp, self)
            }
            fn portable_ln(self) -> Self {
                portable!($t, log, self)
            }
            fn tanh(self) -> Self {
                fast_tanh!($t, self)
            }
            fn portable_tanh(self) -> Self {
                portable!($t, tanh, self)
            }
            fn ln_of_sum(total: f64, portable: bool) -> Self {
                if portable {
                    portable!($t, log_of_sum, total)
                } else {
                    Self::from_f64(total.ln())
                }
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}

float!(f32);
float!(f64);
