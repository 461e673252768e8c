//! Fingerprints of tensors for the audit: XXH64 (seed 0) of the elements' little-endian
//! bytes in row-major order of the logical shape.
//!
//! XXH64 is a published, stable, fast non-cryptographic hash (Yann Collet's xxHash
//! specification); written out here so the trace format depends on no crate's version.
//! A strided view and its contiguous copy hash alike; the dtype and dims are recorded
//! next to the hash, so equal hashes of different shapes are never confused.

use crate::{CpuStorage, Device, Result, Tensor};

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

fn round(acc: u64, lane: u64) -> u64 {
    acc.wrapping_add(lane.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

fn merge(acc: u64, v: u64) -> u64 {
    (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}

fn read_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

fn read_u32(b: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
}

/// XXH64 of `data` with seed 0.
#[must_use]
pub fn xxh64(data: &[u8]) -> u64 {
    let len = data.len() as u64;
    let mut rest = data;
    let mut h = if data.len() >= 32 {
        let mut v = [P1.wrapping_add(P2), P2, 0, 0u64.wrapping_sub(P1)];
        while rest.len() >= 32 {
            for (i, lane) in v.iter_mut().enumerate() {
                *lane = round(*lane, read_u64(&rest[i * 8..]));
            }
            rest = &rest[32..];
        }
        let mut h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for lane in v {
            h = merge(h, lane);
        }
        h
    } else {
        P5
    };
    h = h.wrapping_add(len);
    while rest.len() >= 8 {
        h = (h ^ round(0, read_u64(rest)))
            .rotate_left(27)
            .wrapping_mul(P1)
            .wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        h = (h ^ read_u32(rest).wrapping_mul(P1))
            .rotate_left(23)
            .wrapping_mul(P2)
            .wrapping_add(P3);
        rest = &rest[4..];
    }
    for &byte in rest {
        h = (h ^ u64::from(byte).wrapping_mul(P5))
            .rotate_left(11)
            .wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

/// The little-endian bytes of a contiguous host buffer's elements (bool as 0 / 1).
fn element_bytes(storage: &CpuStorage, start: usize, len: usize) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow;
    match storage {
        CpuStorage::F32(v) => Cow::Borrowed(bytemuck::cast_slice(&v[start..start + len])),
        CpuStorage::F64(v) => Cow::Borrowed(bytemuck::cast_slice(&v[start..start + len])),
        CpuStorage::F16(v) => Cow::Borrowed(bytemuck::cast_slice(&v[start..start + len])),
        CpuStorage::BF16(v) => Cow::Borrowed(bytemuck::cast_slice(&v[start..start + len])),
        CpuStorage::I64(v) => Cow::Borrowed(bytemuck::cast_slice(&v[start..start + len])),
        CpuStorage::U32(v) => Cow::Borrowed(bytemuck::cast_slice(&v[start..start + len])),
        CpuStorage::U8(v) => Cow::Borrowed(&v[start..start + len]),
        CpuStorage::Bool(v) => {
            Cow::Owned(v[start..start + len].iter().map(|&b| u8::from(b)).collect())
        }
    }
}

/// XXH64 of `t`'s elements in row-major order (copied to the host first when on a GPU,
/// gathered first when strided). The little-endian byte layout is that of x86-64 and
/// aarch64, the platforms ditto runs on.
pub fn tensor_hash(t: &Tensor) -> Result<u64> {
    let host = if t.device() == Device::Cpu {
        t.clone()
    } else {
        t.moved_to(Device::Cpu)?
    };
    let host = if host.is_contiguous() {
        host
    } else {
        host.contiguous()?
    };
    let bytes = element_bytes(
        host.cpu_storage()?,
        host.storage_offset(),
        host.elem_count(),
    );
    Ok(xxh64(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh64_known_answers() {
        // From the xxHash reference implementation (seed 0).
        assert_eq!(xxh64(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a"), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc"), 0x44BC_2CF5_AD77_0999);
        assert_eq!(
            xxh64(b"Nobody inspects the spammish repetition"),
            0xFBCE_A83C_8A37_8BF1
        );
        // Long inputs go through the four-lane loop and every tail length.
        let long: Vec<u8> = (0..=255u8).collect();
        let h: Vec<u64> = (30..40).map(|n| xxh64(&long[..n])).collect();
        assert_eq!(h.iter().collect::<std::collections::HashSet<_>>().len(), 10);
    }

    #[test]
    fn views_hash_like_their_contiguous_copies() {
        let t = Tensor::from_vec(
            (0..12).map(|i| i as f32).collect::<Vec<_>>(),
            &[3, 4],
            Device::Cpu,
        )
        .unwrap();
        let view = t.t().unwrap();
        assert_eq!(
            tensor_hash(&view).unwrap(),
            tensor_hash(&view.contiguous().unwrap()).unwrap()
        );
        assert_ne!(tensor_hash(&view).unwrap(), tensor_hash(&t).unwrap());
        let flags = Tensor::from_vec(vec![true, false], &[2], Device::Cpu).unwrap();
        assert_eq!(tensor_hash(&flags).unwrap(), xxh64(&[1, 0]));
    }
}
