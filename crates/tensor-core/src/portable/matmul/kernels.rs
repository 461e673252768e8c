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

/// AVX2 + FMA: 6 rows of two 8-lane vectors (12 accumulators of 16 registers).
#[cfg(target_arch = "x86_64")]
pub(super) struct Avx2Fma;

#[cfg(target_arch = "x86_64")]
impl Microkernel<f32> for Avx2Fma {
    const MR: usize = 6;
    const NR: usize = 16;

    unsafe fn update(
        kc: usize,
        a: ARows<f32>,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        fresh: bool,
    ) {
        // SAFETY: forwarded contract.
        unsafe { avx2_update(kc, a, b, c, ldc, fresh) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_update(
    kc: usize,
    a: ARows<f32>,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    fresh: bool,
) {
    use std::arch::x86_64::*;
    const MR: usize = 6;
    const NR: usize = 16;
    // SAFETY (whole body): every pointer stays inside the tile and panels the caller
    // promised (r < MR, p < kc, lanes < NR).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        for (r, row) in acc.iter_mut().enumerate().filter(|_| !fresh) {
            row[0] = _mm256_loadu_ps(c.add(r * ldc));
            row[1] = _mm256_loadu_ps(c.add(r * ldc + 8));
        }
        for p in 0..kc {
            let b0 = _mm256_loadu_ps(b.add(p * NR));
            let b1 = _mm256_loadu_ps(b.add(p * NR + 8));
            for (r, row) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a.ptr.add(r * a.row + p * a.col));
                row[0] = _mm256_fmadd_ps(x, b0, row[0]);
                row[1] = _mm256_fmadd_ps(x, b1, row[1]);
            }
        }
        for (r, row) in acc.iter().enumerate() {
            _mm256_storeu_ps(c.add(r * ldc), row[0]);
            _mm256_storeu_ps(c.add(r * ldc + 8), row[1]);
        }
    }
}

/// AVX-512: 12 rows of two 16-lane vectors (24 accumulators of 32 registers: each k
/// step loads two B vectors for 24 fused multiply-adds; 8 rows measured about 10% slower
/// at 1024^3 on the development VM).
#[cfg(target_arch = "x86_64")]
pub(super) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Microkernel<f32> for Avx512 {
    const MR: usize = 12;
    const NR: usize = 32;

    unsafe fn update(
        kc: usize,
        a: ARows<f32>,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        fresh: bool,
    ) {
        // SAFETY: forwarded contract.
        unsafe { avx512_update(kc, a, b, c, ldc, fresh) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_update(
    kc: usize,
    a: ARows<f32>,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    fresh: bool,
) {
    use std::arch::x86_64::*;
    const MR: usize = 12;
    const NR: usize = 32;
    // SAFETY (whole body): as in `avx2_update`.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for (r, row) in acc.iter_mut().enumerate().filter(|_| !fresh) {
            row[0] = _mm512_loadu_ps(c.add(r * ldc));
            row[1] = _mm512_loadu_ps(c.add(r * ldc + 16));
        }
        for p in 0..kc {
            let b0 = _mm512_loadu_ps(b.add(p * NR));
            let b1 = _mm512_loadu_ps(b.add(p * NR + 16));
            for (r, row) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*a.ptr.add(r * a.row + p * a.col));
                row[0] = _mm512_fmadd_ps(x, b0, row[0]);
                row[1] = _mm512_fmadd_ps(x, b1, row[1]);
            }
        }
        for (r, row) in acc.iter().enumerate() {
            _mm512_storeu_ps(c.add(r * ldc), row[0]);
            _mm512_storeu_ps(c.add(r * ldc + 16), row[1]);
        }
    }
}
