//! Crate-internal dispatch macros (declared first in `lib.rs` so every module sees them).

/// The `match` behind `with_dtype!` and `with_float_dtype!`: for each listed
/// `DType` variant an arm running `$body` with the type alias `$t` bound to its Rust
/// type, then the optional catch-all arm `$other => $fallback`. Written once so the two
/// cannot come to bind a dtype to different types.
macro_rules! match_dtype {
    (
        $dtype:expr, $t:ident => $body:expr,
        [$($variant:ident => $ty:ty),* $(,)?]
        $(, $other:pat => $fallback:expr)?
    ) => {
        match $dtype {
            $(
                $crate::DType::$variant => {
                    type $t = $ty;
                    $body
                }
            )*
            $($other => $fallback,)?
        }
    };
}

/// Runs `$body` with the type alias `$t` bound to the Rust element type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match_dtype!($dtype, $t => $body, [
            F32 => f32,
            F64 => f64,
            F16 => half::f16,
            BF16 => half::bf16,
            I64 => i64,
            U32 => u32,
            U8 => u8,
            Bool => bool,
        ])
    };
}

/// Runs `$body` with `$t` bound to `f32` or `f64` (the dtypes the CPU math ops support),
/// returning `UnsupportedDType` from the enclosing function for any other dtype.
macro_rules! with_float_dtype {
    ($dtype:expr, $op:expr, $t:ident => $body:expr) => {
        match_dtype!($dtype, $t => $body, [F32 => f32, F64 => f64], other => {
            return Err($crate::TensorError::UnsupportedDType {
                op: $op,
                dtype: other,
                supported: "f32, f64",
            })
        })
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

/// Runs the block `$body` (evaluating to a `Result<Tensor>`; `return` and `?` leave the
/// block) as the audited op `$op` with inputs `[$inputs]` (see [`crate::audit`]). Used
/// in `#[track_caller]` public ops, so the record carries the user's call site.
macro_rules! audited {
    ($op:expr, [$($input:expr),* $(,)?], $body:block) => {{
        let recorder = $crate::audit::OpRecorder::begin($op, &[$($input),*]);
        #[allow(clippy::redundant_closure_call)]
        let result = (|| -> $crate::Result<$crate::Tensor> { $body })();
        recorder.finish_result(result)
    }};
}

/// Runs the block `$body` (a `Result<()>` updating `$target` in place) as the audited op
/// `$op`: its inputs are `$target` before the update and `[$inputs]`, its output
/// `$target` after it.
macro_rules! audited_in_place {
    ($op:expr, $target:ident, [$($input:expr),* $(,)?], $body:block) => {{
        let recorder = $crate::audit::OpRecorder::begin($op, &[&*$target, $($input),*]);
        #[allow(clippy::redundant_closure_call)]
        let result = (|| -> $crate::Result<()> { $body })();
        if result.is_ok() {
            recorder.finish(&*$target);
        }
        result
    }};
}
