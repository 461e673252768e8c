//! The per-block body of every kernel, run on the host, and whole ops built from them
//! the way a grid-stride launch would (feature `host-parity`).
//!
//! A per-block function gets the op's whole output buffer (its length is `n`) and a
//! block index, exactly like one iteration of a kernel's loop, and writes only that
//! block's elements. The whole-op helpers visit blocks in the order of an emulated
//! launch (last thread first), so a test comparing them with the CPU samplers also
//! shows that the visiting order does not matter.

use tensor_core::{bf16, f16};

use super::ffi;

/// Element types with uniform and normal kernels: f32, f16, bf16.
pub trait SampleFloat: Copy + Default + sealed::Sealed {
    #[doc(hidden)]
    const SAMPLE: SampleOps<Self>;
}

/// Element types with bernoulli and dropout kernels: f32, f16, bf16, f64.
pub trait ElementwiseFloat: Copy + Default + sealed::Sealed {
    #[doc(hidden)]
    const ELEMENTWISE: ElementwiseOps<Self>;
}

/// The C entry points of [`SampleFloat`] (an implementation detail).
#[doc(hidden)]
pub struct SampleOps<T> {
    uniform: unsafe extern "C" fn(u64, u64, u64, u64, f32, f32, *mut T),
    normal: unsafe extern "C" fn(u64, u64, u64, u64, f32, f32, *mut T),
}

/// The C entry points of [`ElementwiseFloat`] (an implementation detail).
#[doc(hidden)]
#[allow(clippy::type_complexity)]
pub struct ElementwiseOps<T> {
    bernoulli: unsafe extern "C" fn(u64, u64, u64, u64, f32, *mut T),
    dropout: unsafe extern "C" fn(u64, u64, u64, u64, f32, f32, *const T, *mut T) -> u32,
    backward: unsafe extern "C" fn(u64, u64, f32, *const u32, *const T, *mut T),
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for tensor_core::f16 {}
    impl Sealed for tensor_core::bf16 {}
}

macro_rules! sample_float {
    ($t:ty, $u:ident, $n:ident) => {
        impl SampleFloat for $t {
            const SAMPLE: SampleOps<$t> = SampleOps {
                uniform: ffi::$u,
                normal: ffi::$n,
            };
        }
    };
}
sample_float!(
    f32,
    ditto_host_uniform_block_f32,
    ditto_host_normal_block_f32
);
sample_float!(
    f16,
    ditto_host_uniform_block_f16,
    ditto_host_normal_block_f16
);
sample_float!(
    bf16,
    ditto_host_uniform_block_bf16,
    ditto_host_normal_block_bf16
);

macro_rules! elementwise_float {
    ($t:ty, $b:ident, $d:ident, $bw:ident) => {
        impl ElementwiseFloat for $t {
            const ELEMENTWISE: ElementwiseOps<$t> = ElementwiseOps {
                bernoulli: ffi::$b,
                dropout: ffi::$d,
                backward: ffi::$bw,
            };
        }
    };
}
elementwise_float!(
    f32,
    ditto_host_bernoulli_block_f32,
    ditto_host_dropout_block_f32,
    ditto_host_dropout_backward_mask_block_f32
);
elementwise_float!(
    f16,
    ditto_host_bernoulli_block_f16,
    ditto_host_dropout_block_f16,
    ditto_host_dropout_backward_mask_block_f16
);
elementwise_float!(
    bf16,
    ditto_host_bernoulli_block_bf16,
    ditto_host_dropout_block_bf16,
    ditto_host_dropout_backward_mask_block_bf16
);
elementwise_float!(
    f64,
    ditto_host_bernoulli_block_f64,
    ditto_host_dropout_block_f64,
    ditto_host_dropout_backward_mask_block_f64
);

/// Blocks of an op on `n` elements with `words_per_element` words each (1 or 2).
#[must_use]
pub fn blocks_for(n: u64, words_per_element: u64) -> u64 {
    (n * words_per_element).div_ceil(4)
}

/// Panics unless `block` is one of the blocks of an op on `n` elements (the C side
/// would compute `4 * block`, which must not wrap back into the buffer).
fn check_block(block: u64, n: usize, words_per_element: u64) {
    let blocks = blocks_for(n as u64, words_per_element);
    assert!(
        block < blocks,
        "block {block} is outside an op on {n} elements ({blocks} blocks)"
    );
}

/// Checks `block` against an op on `out.len()` elements of `words` words each, then
/// runs one C block body: `body(n, ptr)` gets `out`'s length and pointer and adds the
/// op's own arguments around them. Every fill op (bits, uniform, normal, bernoulli,
/// randint) goes through here, so none of them can hand the C side a block outside `out`.
fn fill_block<T>(block: u64, words: u64, out: &mut [T], body: impl FnOnce(u64, *mut T)) {
    check_block(block, out.len(), words);
    body(out.len() as u64, out.as_mut_ptr());
}

// SAFETY (the `unsafe` block of each fill op below): `fill_block` passes a pointer to `n`
// elements and has checked that `block` is one of the op's blocks, which is all the C side
// reads and writes.

/// `ditto_bits_block`.
pub fn bits_block(seed: u64, offset: u64, block: u64, out: &mut [u32]) {
    fill_block(block, 1, out, |n, out| unsafe {
        ffi::ditto_host_bits_block(seed, offset, block, n, out)
    });
}

/// `ditto_uniform_block<T>`.
pub fn uniform_block<T: SampleFloat>(
    seed: u64,
    offset: u64,
    block: u64,
    low: f32,
    high: f32,
    out: &mut [T],
) {
    fill_block(block, 1, out, |n, out| unsafe {
        (T::SAMPLE.uniform)(seed, offset, block, n, low, high, out)
    });
}

/// `ditto_uniform_f64_block` (two words per element).
pub fn uniform_f64_block(seed: u64, offset: u64, block: u64, low: f64, high: f64, out: &mut [f64]) {
    fill_block(block, 2, out, |n, out| unsafe {
        ffi::ditto_host_uniform_f64_block(seed, offset, block, n, low, high, out)
    });
}

/// `ditto_randint_block` (two words per element).
pub fn randint_block(seed: u64, offset: u64, block: u64, low: i64, range: u64, out: &mut [i64]) {
    fill_block(block, 2, out, |n, out| unsafe {
        ffi::ditto_host_randint_block(seed, offset, block, n, low, range, out)
    });
}

/// `ditto_normal_block<T>`.
pub fn normal_block<T: SampleFloat>(
    seed: u64,
    offset: u64,
    block: u64,
    mean: f32,
    std: f32,
    out: &mut [T],
) {
    fill_block(block, 1, out, |n, out| unsafe {
        (T::SAMPLE.normal)(seed, offset, block, n, mean, std, out)
    });
}

/// `ditto_bernoulli_block<T>` for float output.
pub fn bernoulli_block<T: ElementwiseFloat>(
    seed: u64,
    offset: u64,
    block: u64,
    p: f32,
    out: &mut [T],
) {
    fill_block(block, 1, out, |n, out| unsafe {
        (T::ELEMENTWISE.bernoulli)(seed, offset, block, n, p, out)
    });
}

/// `ditto_bernoulli_block<DittoU8>`: bytes 0 / 1 (the u8 and bool kernels).
pub fn bernoulli_block_u8(seed: u64, offset: u64, block: u64, p: f32, out: &mut [u8]) {
    fill_block(block, 1, out, |n, out| unsafe {
        ffi::ditto_host_bernoulli_block_u8(seed, offset, block, n, p, out)
    });
}

/// `ditto_dropout_block<T>`: writes the block of `y`, returns its keep bits.
///
/// # Panics
/// If `x` and `y` differ in length or `block` is not a block of the op.
pub fn dropout_block<T: ElementwiseFloat>(
    seed: u64,
    offset: u64,
    block: u64,
    p: f32,
    scale: f32,
    x: &[T],
    y: &mut [T],
) -> u32 {
    assert_eq!(x.len(), y.len());
    check_block(block, x.len(), 1);
    // SAFETY: x and y have n elements; `block` is one of the op's blocks.
    unsafe {
        (T::ELEMENTWISE.dropout)(
            seed,
            offset,
            block,
            x.len() as u64,
            p,
            scale,
            x.as_ptr(),
            y.as_mut_ptr(),
        )
    }
}

/// `ditto_dropout_mask_word`: packed-mask word `word` of an op on `n` elements.
///
/// # Panics
/// If `word` is not a mask word of the op.
#[must_use]
pub fn dropout_mask_word(seed: u64, offset: u64, word: u64, n: u64, p: f32) -> u32 {
    assert!(
        word < kernels::packed_mask_words(n),
        "mask word {word} of {n} elements"
    );
    // SAFETY: plain values in and out; the word index was checked above.
    unsafe { ffi::ditto_host_dropout_mask_word(seed, offset, word, n, p) }
}

/// `ditto_dropout_backward_mask_block<T>`.
///
/// # Panics
/// If lengths disagree or `block` is not a block of the op.
pub fn dropout_backward_mask_block<T: ElementwiseFloat>(
    block: u64,
    scale: f32,
    mask: &[u32],
    grad: &[T],
    grad_in: &mut [T],
) {
    assert_eq!(grad.len(), grad_in.len());
    assert_eq!(
        mask.len() as u64,
        kernels::packed_mask_words(grad.len() as u64)
    );
    check_block(block, grad.len(), 1);
    let n = grad.len() as u64;
    // SAFETY: buffers sized as the kernel expects, checked above.
    unsafe {
        (T::ELEMENTWISE.backward)(
            block,
            n,
            scale,
            mask.as_ptr(),
            grad.as_ptr(),
            grad_in.as_mut_ptr(),
        )
    };
}

// ---- whole ops, as a launch would compute them ----------------------------------------

/// The order in which a grid-stride loop with `threads` threads in all visits `items`
/// work items, thread by thread (last thread first, to expose any order dependence).
pub fn grid_stride_order(items: u64, threads: u64) -> impl Iterator<Item = u64> {
    let threads = threads.max(1);
    let step = usize::try_from(threads).unwrap_or(usize::MAX);
    (0..threads.min(items))
        .rev()
        .flat_map(move |t| (t..items).step_by(step))
}

/// Threads of the emulated launch behind the whole-op helpers.
const THREADS: u64 = 7;

/// Runs `body(block, out)` over every block of an op on `n` elements, in launch order.
fn whole_op<T: Copy + Default>(
    n: usize,
    words_per_element: u64,
    mut body: impl FnMut(u64, &mut [T]),
) -> Vec<T> {
    let mut out = vec![T::default(); n];
    for b in grid_stride_order(blocks_for(n as u64, words_per_element), THREADS) {
        body(b, &mut out);
    }
    out
}

/// Everything `ditto_bits_u32_kernel` writes for an op on `n` elements.
#[must_use]
pub fn bits(seed: u64, offset: u64, n: usize) -> Vec<u32> {
    whole_op(n, 1, |b, out| bits_block(seed, offset, b, out))
}

/// Everything `ditto_uniform_<T>_kernel` writes.
#[must_use]
pub fn uniform<T: SampleFloat>(seed: u64, offset: u64, n: usize, low: f32, high: f32) -> Vec<T> {
    whole_op(n, 1, |b, out| {
        uniform_block(seed, offset, b, low, high, out)
    })
}

/// Everything `ditto_uniform_f64_kernel` writes.
#[must_use]
pub fn uniform_f64_op(seed: u64, offset: u64, n: usize, low: f64, high: f64) -> Vec<f64> {
    whole_op(n, 2, |b, out| {
        uniform_f64_block(seed, offset, b, low, high, out)
    })
}

/// Everything `ditto_randint_i64_kernel` writes.
#[must_use]
pub fn randint(seed: u64, offset: u64, n: usize, low: i64, range: u64) -> Vec<i64> {
    whole_op(n, 2, |b, out| {
        randint_block(seed, offset, b, low, range, out)
    })
}

/// Everything `ditto_normal_<T>_kernel` writes.
#[must_use]
pub fn normal<T: SampleFloat>(seed: u64, offset: u64, n: usize, mean: f32, std: f32) -> Vec<T> {
    whole_op(n, 1, |b, out| normal_block(seed, offset, b, mean, std, out))
}

/// Everything `ditto_bernoulli_<T>_kernel` writes (float output).
#[must_use]
pub fn bernoulli_op<T: ElementwiseFloat>(seed: u64, offset: u64, n: usize, p: f32) -> Vec<T> {
    whole_op(n, 1, |b, out| bernoulli_block(seed, offset, b, p, out))
}

/// Everything `ditto_bernoulli_u8_kernel` writes (u8 and bool output).
#[must_use]
pub fn bernoulli_u8(seed: u64, offset: u64, n: usize, p: f32) -> Vec<u8> {
    whole_op(n, 1, |b, out| bernoulli_block_u8(seed, offset, b, p, out))
}

/// Everything `ditto_dropout_<T>_kernel` writes: `y`, and the packed mask when
/// `with_mask` (as in the kernel, from a second loop over mask words).
#[must_use]
pub fn dropout<T: ElementwiseFloat>(
    seed: u64,
    offset: u64,
    p: f32,
    scale: f32,
    x: &[T],
    with_mask: bool,
) -> (Vec<T>, Option<Vec<u32>>) {
    let n = x.len() as u64;
    let mut y = vec![T::default(); x.len()];
    for b in grid_stride_order(blocks_for(n, 1), THREADS) {
        dropout_block(seed, offset, b, p, scale, x, &mut y);
    }
    if !with_mask {
        return (y, None);
    }
    let mut mask =
        vec![0; usize::try_from(kernels::packed_mask_words(n)).expect("mask fits in memory")];
    for w in grid_stride_order(mask.len() as u64, THREADS) {
        mask[w as usize] = dropout_mask_word(seed, offset, w, n, p);
    }
    (y, Some(mask))
}

/// Everything `ditto_dropout_backward_<T>_kernel` writes when given a packed mask.
#[must_use]
pub fn dropout_backward_mask<T: ElementwiseFloat>(scale: f32, mask: &[u32], grad: &[T]) -> Vec<T> {
    whole_op(grad.len(), 1, |b, out| {
        dropout_backward_mask_block(b, scale, mask, grad, out)
    })
}
