//! How long one collective may take before every rank gives up on it.
//!
//! A rank that dies or stops inside a collective would otherwise leave the others
//! waiting forever (NCCL spins in its kernels, MPI blocks in its progress engine). Every
//! backend bounds each collective by this one limit: the threads backend in its hub,
//! NCCL with a watchdog thread that aborts the communicator. The default is generous
//! (10 minutes, like PyTorch's), because a slow first step or a checkpoint written by
//! rank 0 while the others wait must not be mistaken for a dead rank.

use std::time::Duration;

use crate::env_var::parse_in;
use crate::Result;

/// The limit unless `DITTO_COLLECTIVE_TIMEOUT_S` or the program says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The environment variable that sets the limit, in whole seconds.
pub const COLLECTIVE_TIMEOUT_VAR: &str = "DITTO_COLLECTIVE_TIMEOUT_S";

/// The accepted range of the limit, in seconds (one second to one day).
pub const COLLECTIVE_TIMEOUT_RANGE_S: std::ops::RangeInclusive<u64> = 1..=86_400;

/// The limit from [`COLLECTIVE_TIMEOUT_VAR`] read through `get`, or
/// [`DEFAULT_TIMEOUT`] when it is not set; a typed error naming the variable and the
/// range when it is malformed.
pub fn collective_timeout_from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Duration> {
    match get(COLLECTIVE_TIMEOUT_VAR) {
        None => Ok(DEFAULT_TIMEOUT),
        Some(value) => Ok(Duration::from_secs(parse_in(
            "DITTO_COLLECTIVE_TIMEOUT_S",
            &value,
            COLLECTIVE_TIMEOUT_RANGE_S,
        )?)),
    }
}

/// [`collective_timeout_from_vars`] on the process environment.
pub fn collective_timeout_from_env() -> Result<Duration> {
    collective_timeout_from_vars(|name| std::env::var(name).ok())
}
