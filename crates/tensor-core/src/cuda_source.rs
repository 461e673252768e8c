//! Building the one translation unit NVRTC compiles from a `.cu` file and its headers.
//!
//! The `.cuh` headers are compiled twice (by NVRTC, and by the host C++ compiler for the
//! parity tests), so they stay separate files; NVRTC gets them inlined in place of their
//! `#include "..."` lines. Embedding the texts with `include_str!` means a built binary
//! (a test, a bench) needs no source tree on the GPU machine. Used for tensor-core's own
//! kernels and by the `kernels` crate. Always compiled (no CUDA needed), so tests of the
//! expansion run everywhere.

/// `text` with each `#include "name"` of a header in `headers` (pairs of the name it is
/// included by and its text) replaced by the header's text, recursively, each header at
/// most once (they have include guards anyway). Other includes are left for NVRTC.
///
/// As a C preprocessor does for quoted includes, a header's own includes are looked up
/// first beside it: inside the header named `../lib/a.cuh`, `#include "b.cuh"` is the
/// header named `../lib/b.cuh` when the list has one, else `b.cuh`. So a downstream
/// header listed under a relative path can include its neighbours as its folder sees them
/// and still be inlined once (ditto's own headers are listed by file name).
#[must_use]
pub fn inline_includes(text: &str, headers: &[(&'static str, &'static str)]) -> String {
    let mut out = String::new();
    let mut seen = Vec::new();
    expand(text, "", headers, &mut seen, &mut out);
    out
}

/// Inlines the includes of `text`, the text of a file in the folder `dir` (a name prefix
/// ending in `/`, or empty).
fn expand(
    text: &str,
    dir: &str,
    headers: &[(&'static str, &'static str)],
    seen: &mut Vec<&'static str>,
    out: &mut String,
) {
    for line in text.lines() {
        match included_header(line, dir, headers) {
            Some((name, body)) => {
                if !seen.contains(&name) {
                    seen.push(name);
                    out.push_str(&format!("// ---- begin {name} ----\n"));
                    let folder = name.rfind('/').map_or("", |slash| &name[..=slash]);
                    expand(body, folder, headers, seen, out);
                    out.push_str(&format!("// ---- end {name} ----\n"));
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
}

/// The known header a line of a file in `dir` includes, if it is
/// `#include "<known header>"`: the one beside the file first, then the name as written.
fn included_header(
    line: &str,
    dir: &str,
    headers: &[(&'static str, &'static str)],
) -> Option<(&'static str, &'static str)> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let name = rest
        .strip_prefix("include")?
        .trim()
        .strip_prefix('"')?
        .strip_suffix('"')?;
    let beside = format!("{dir}{name}");
    let find = |wanted: &str| headers.iter().find(|(n, _)| *n == wanted).copied();
    find(&beside).or_else(|| find(name))
}

/// `ditto_host_device.cuh`: the one host/device shim (integer typedefs for NVRTC, the
/// CUDA qualifiers defined away on the host, bit casts), included by every ditto header
/// here and in the `kernels` crate.
pub const HOST_DEVICE_HEADER: &str = include_str!("../cuda/ditto_host_device.cuh");
/// `tensor_ops.cuh`, the per-element bodies of tensor-core's kernels.
pub const TENSOR_OPS_HEADER: &str = include_str!("../cuda/tensor_ops.cuh");
/// `transformer_ops.cuh`, the per-element and per-row bodies of the transformer ops.
pub const TRANSFORMER_OPS_HEADER: &str = include_str!("../cuda/transformer_ops.cuh");
/// `tensor_ops.cu`, the kernels themselves (before include expansion).
pub const TENSOR_OPS_CU: &str = include_str!("../cuda/tensor_ops.cu");

/// `portable_math.cuh`, ditto's own f32 `exp` / `log` (docs/contract.md §14).
pub const PORTABLE_MATH_HEADER: &str = include_str!("../cuda/portable_math.cuh");
/// `portable_matmul.cu`, the portable matmul kernel (before include expansion).
pub const PORTABLE_MATMUL_CU: &str = include_str!("../cuda/portable_matmul.cu");

/// `row_ops.cu`, the block-per-row kernels of layer norm and the causal softmax.
pub const ROW_OPS_CU: &str = include_str!("../cuda/row_ops.cu");

/// The block-per-row kernels as one translation unit.
#[must_use]
pub fn row_ops_translation_unit() -> String {
    inline_includes(
        ROW_OPS_CU,
        &[
            ("tensor_ops.cuh", TENSOR_OPS_HEADER),
            ("transformer_ops.cuh", TRANSFORMER_OPS_HEADER),
            ("portable_math.cuh", PORTABLE_MATH_HEADER),
            ("ditto_host_device.cuh", HOST_DEVICE_HEADER),
        ],
    )
}

/// The portable matmul kernel as one translation unit.
#[must_use]
pub fn portable_matmul_translation_unit() -> String {
    inline_includes(
        PORTABLE_MATMUL_CU,
        &[
            ("tensor_ops.cuh", TENSOR_OPS_HEADER),
            ("portable_math.cuh", PORTABLE_MATH_HEADER),
            ("ditto_host_device.cuh", HOST_DEVICE_HEADER),
        ],
    )
}

/// tensor-core's kernels as one translation unit.
#[must_use]
pub fn tensor_ops_translation_unit() -> String {
    inline_includes(
        TENSOR_OPS_CU,
        &[
            ("tensor_ops.cuh", TENSOR_OPS_HEADER),
            ("transformer_ops.cuh", TRANSFORMER_OPS_HEADER),
            ("portable_math.cuh", PORTABLE_MATH_HEADER),
            ("ditto_host_device.cuh", HOST_DEVICE_HEADER),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_headers_are_inlined_once_and_unknown_includes_kept() {
        let headers = [("a.cuh", "#include \"b.cuh\"\nint a;"), ("b.cuh", "int b;")];
        let tu = inline_includes(
            "#include \"a.cuh\"\n  #  include \"b.cuh\"\n#include <x.h>\nint main;",
            &headers,
        );
        assert_eq!(tu.matches("int b;").count(), 1);
        assert!(tu.contains("int a;") && tu.contains("#include <x.h>"));
        assert!(!tu.contains("#include \"a.cuh\""));
    }

    #[test]
    fn a_header_includes_its_neighbours_by_the_path_of_its_folder() {
        let headers = [
            ("../lib/a.cuh", "#include \"b.cuh\"\nint a;"),
            ("../lib/b.cuh", "int b;"),
            ("b.cuh", "int other_b;"),
        ];
        let tu = inline_includes(
            "#include \"../lib/a.cuh\"\n#include \"../lib/b.cuh\"\n#include \"b.cuh\"",
            &headers,
        );
        assert_eq!(tu.matches("int b;").count(), 1);
        assert_eq!(tu.matches("int other_b;").count(), 1);
        assert!(tu.find("int b;") < tu.find("int a;"));
    }

    #[test]
    fn the_tensor_ops_unit_has_no_local_include_left() {
        let tu = tensor_ops_translation_unit();
        assert!(!tu.contains("#include \""));
        assert_eq!(tu.matches("// ---- begin tensor_ops.cuh ----").count(), 1);
        assert_eq!(
            tu.matches("// ---- begin ditto_host_device.cuh ----")
                .count(),
            1
        );
    }
}
