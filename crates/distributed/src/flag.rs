//! `broadcast_flag`: one yes or no from one rank to all, the smallest agreement ranks
//! need before they go on (rank 0 could write the checkpoint; rank 0 can write the
//! run's outputs), so that a failure only one rank can see ends every rank at once
//! instead of leaving the others waiting in the next collective.

use tensor_core::{Device, Tensor};

use crate::{ProcessGroup, Result};

/// `src`'s `flag`, on every rank (the others' `flag` is ignored). A collective.
pub fn broadcast_flag(group: &dyn ProcessGroup, flag: bool, src: usize) -> Result<bool> {
    let mut t =
        Tensor::from_vec(vec![i64::from(flag)], &[1], Device::Cpu)?.to_device(group.device())?;
    group.broadcast(&mut t, src)?;
    Ok(t.to_vec::<i64>()?[0] == 1)
}
