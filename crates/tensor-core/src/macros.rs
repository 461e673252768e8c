//! Crate-internal dispatch macros (declared first in `lib.rs` so every module sees them).

/// Runs `$body` with the type alias `$t` bound to the Rust element type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::DType::U8 => {
                type $t = u8;
                $body
            }
            $crate::DType::Bool => {
                type $t = bool;
                $body
            }
        }
    };
}

/// Runs `$body` with `$t` bound to `f32` or `f64` (the dtypes the CPU math ops support),
/// returning `UnsupportedDType` from the enclosing function for any other dtype.
macro_rules! with_float_dtype {
    ($dtype:expr, $op:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            other => {
                return Err($crate::TensorError::UnsupportedDType {
                    op: $op,
                    dtype: other,
                    supported: "f32, f64",
                })
            }
        }
    };
}

/// In CUDA builds, returns `$cuda` from the enclosing op when `$t` lives on a GPU; CPU
/// tensors fall through to the CPU code that follows. In builds without the `cuda`
/// feature no tensor can be on a GPU, and this expands to nothing.
macro_rules! on_cuda {
    ($t:expr => $cuda:expr) => {
        #[cfg(feature = "cuda")]
        if $t.device().is_cuda() {
            return $cuda;
        }
    };
}
