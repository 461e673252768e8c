//! The micro-kernels of the portable matmul: each updates one `MR x NR` tile of the
//! output from packed panels, one fused multiply-add per element and per `k`, in
//! ascending `k`. A SIMD lane does for its element exactly what the scalar kernel does
//! (`acc = fma(a, b, acc)`, one rounding), so every level gives the same bits.

use super::PortableElement;

/// Where a micro-kernel reads A's `MR` rows: element `(r, p)` at `ptr + r * row + p * col`.
#[derive(Clone, Copy)]
pub(super) struct ARows<T> {
    pub ptr: *const T,
    pub row: usize,
    pub col: usize,
}

/// One micro-kernel: its tile shape and the update.
pub(super) trait Microkernel<T> {
    /// Rows of the tile (the height of a packed A panel).
    const MR: usize;
    /// Columns of the tile (the width of a packed B panel).
    const NR: usize;
    /// `c[r * ldc + j] = fma(a[r * a_row + p * a_col], b[p * NR + j], c[r * ldc + j])`
    /// for `p` in `0..kc` ascending, for every `r < MR`, `j < NR`. A is read in place
    /// through its strides (or from a packed panel: `a_row = 1`, `a_col = MR`). With
    /// `fresh` the tile starts at +0.0 instead of its stored values, without reading
    /// them: the first `k`-block, whose output would otherwise be zeroed first (the
    /// same bits: the first fma adds to +0.0 either way).
    ///
    /// # Safety
    /// `a[r * a_row + p * a_col]` is readable for `r < MR`, `p < kc`; `b` holds
    /// `kc * NR` elements and `c` an `MR x NR` tile with row stride `ldc`; the CPU has
    /// the kernel's target features.
    unsafe fn update(kc: usize, a: ARows<T>, b: *const T, c: *mut T, ldc: usize, fresh: bool);
}

/// The reference: `mul_add` (a correctly rounded fused multiply-add on every platform;
/// a library call where the CPU has no FMA instruction).
pub(super) struct Scalar;

impl<T: PortableElement> Microkernel<T> for Scalar {
    const MR: usize = 4;
    const NR: usize = 4;

    unsafe fn update(kc: usize, a: ARows<T>, b: *const T, c: *mut T, ldc: usize, fresh: bool) {
        const MR: usize = 4;
        const NR: usize = 4;
        let mut acc = [[T::default(); NR]; MR];
        for (r, row) in acc.iter_mut().enumerate().filter(|_| !fresh) {
            for (j, v) in row.iter_mut().enumerate() {
                // SAFETY: inside the tile (the caller's contract).
                *v = unsafe { *c.add(r * ldc + j) };
            }
        }
        for p in 0..kc {
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: p < kc, r < MR: inside the packed panels.
                let x = unsafe { *a.ptr.add(r * a.row + p * a.col) };
                for (j, v) in row.iter_mut().enumerate() {
                    let y = unsafe { *b.add(p * NR + j) };
                    *v = x.mul_add(y, *v);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                // SAFETY: inside the tile.
                unsafe { *c.add(r * ldc + j) = *v };
            }
        }
    }
}

/// An x86 f32 kernel: `MR` rows of two `LANES`-wide vectors, written once for both
/// instruction sets (they differ only in width and intrinsic names). Per k step it loads
/// two B vectors and does `2 * MR` fused multiply-adds, each lane exactly `Scalar`'s.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_f32_kernel {
    ($(#[$doc:meta])* $name:ident, $update:ident, $features:literal, mr = $mr:literal,
     lanes = $lanes:literal, $zero:ident, $load:ident, $splat:ident, $fma:ident,
     $store:ident) => {
        $(#[$doc])*
        pub(super) struct $name;

        impl Microkernel<f32> for $name {
            const MR: usize = $mr;
            const NR: usize = 2 * $lanes;

            unsafe fn update(
                kc: usize,
                a: ARows<f32>,
                b: *const f32,
                c: *mut f32,
                ldc: usize,
                fresh: bool,
            ) {
                // SAFETY: forwarded contract.
                unsafe { $update(kc, a, b, c, ldc, fresh) }
            }
        }

        #[target_feature(enable = $features)]
        unsafe fn $update(
            kc: usize,
            a: ARows<f32>,
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            fresh: bool,
        ) {
            use std::arch::x86_64::*;
            const NR: usize = 2 * $lanes;
            // SAFETY (whole body): every pointer stays inside the tile and panels the
            // caller promised (r < MR, p < kc, lanes < NR).
            unsafe {
                let mut acc = [[$zero(); 2]; $mr];
                for (r, row) in acc.iter_mut().enumerate().filter(|_| !fresh) {
                    row[0] = $load(c.add(r * ldc));
                    row[1] = $load(c.add(r * ldc + $lanes));
                }
                for p in 0..kc {
                    let b0 = $load(b.add(p * NR));
                    let b1 = $load(b.add(p * NR + $lanes));
                    for (r, row) in acc.iter_mut().enumerate() {
                        let x = $splat(*a.ptr.add(r * a.row + p * a.col));
                        row[0] = $fma(x, b0, row[0]);
                        row[1] = $fma(x, b1, row[1]);
                    }
                }
                for (r, row) in acc.iter().enumerate() {
                    $store(c.add(r * ldc), row[0]);
                    $store(c.add(r * ldc + $lanes), row[1]);
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
x86_f32_kernel!(
    /// AVX2 + FMA: 6 rows of two 8-lane vectors (12 accumulators of 16 registers).
    Avx2Fma, avx2_update, "avx2,fma", mr = 6, lanes = 8,
    _mm256_setzero_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps
);

#[cfg(target_arch = "x86_64")]
x86_f32_kernel!(
    /// AVX-512: 12 rows of two 16-lane vectors (24 accumulators of 32 registers: each k
    /// step loads two B vectors for 24 fused multiply-adds; 8 rows measured about 10%
    /// slower at 1024^3 on the development VM).
    Avx512, avx512_update, "avx512f", mr = 12, lanes = 16,
    _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps
);
