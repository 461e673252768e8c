//! Host <-> device byte copies for every dtype.
//!
//! Numeric types are copied as their little-endian in-memory bytes (`bytemuck`); bool is
//! stored as one byte per element, 0 or 1, and any non-zero byte reads back as `true`.

use std::borrow::Cow;
use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::{CudaSlice, CudaStream};

use super::driver_error;
use crate::creation::try_filled;
use crate::{CpuStorage, DType, Element, Result};

/// The bytes to upload for a host buffer (borrowed except for bool).
pub(crate) fn host_bytes(cpu: &CpuStorage) -> Cow<'_, [u8]> {
    match cpu {
        CpuStorage::F32(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::F64(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::F16(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::BF16(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::I64(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::U32(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::U8(v) => Cow::Borrowed(v),
        CpuStorage::Bool(v) => Cow::Owned(v.iter().map(|&b| u8::from(b)).collect()),
    }
}

/// Downloads elements `start..start + len` of a device buffer holding `T`s and waits for
/// the copy to finish.
fn download<T: Pod + Element>(
    stream: &Arc<CudaStream>,
    bytes: &CudaSlice<u8>,
    ordinal: usize,
    start: usize,
    len: usize,
) -> Result<Vec<T>> {
    let mut out = try_filled(len, T::zeroed(), T::DTYPE)?;
    if len > 0 {
        let size = std::mem::size_of::<T>();
        let view = bytes.slice(start * size..(start + len) * size);
        let host: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        stream
            .memcpy_dtoh(&view, host)
            .map_err(driver_error(ordinal, "to_cpu"))?;
        stream
            .synchronize()
            .map_err(driver_error(ordinal, "to_cpu"))?;
    }
    Ok(out)
}

/// Downloads elements `start..start + len` of a device buffer of `dtype` to the host.
pub(crate) fn download_range(
    stream: &Arc<CudaStream>,
    bytes: &CudaSlice<u8>,
    dtype: DType,
    ordinal: usize,
    start: usize,
    len: usize,
) -> Result<CpuStorage> {
    macro_rules! get {
        () => {
            download(stream, bytes, ordinal, start, len)?
        };
    }
    Ok(match dtype {
        DType::F32 => CpuStorage::F32(get!()),
        DType::F64 => CpuStorage::F64(get!()),
        DType::F16 => CpuStorage::F16(get!()),
        DType::BF16 => CpuStorage::BF16(get!()),
        DType::I64 => CpuStorage::I64(get!()),
        DType::U32 => CpuStorage::U32(get!()),
        DType::U8 => CpuStorage::U8(get!()),
        DType::Bool => {
            let raw: Vec<u8> = get!();
            CpuStorage::Bool(raw.into_iter().map(|b| b != 0).collect())
        }
    })
}
