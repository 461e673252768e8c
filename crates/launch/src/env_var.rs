//! One environment variable read as a number in a range, with the typed error every
//! launch variable gets (the variable's name and the range it must lie in).
//!
//! Both the launch environment (`launch_env.rs`) and the collective timeout
//! (`collective_timeout.rs`) read variables this way; the timeout is also part of the
//! launch environment, so this sits below both of them.

use crate::{LaunchError, Result};

/// A variable's value that is not what it must be.
pub(crate) fn bad(name: &'static str, message: String) -> LaunchError {
    LaunchError::Environment { name, message }
}

/// `value` parsed as an integer in `range`; the error names the variable and the range.
pub(crate) fn parse_in(
    name: &'static str,
    value: &str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64> {
    match value.trim().parse::<u64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        Ok(n) => Err(bad(
            name,
            format!("{n} is not in {}..={}", range.start(), range.end()),
        )),
        Err(_) => Err(bad(
            name,
            format!(
                "{value:?} is not a whole number; expected {}..={}",
                range.start(),
                range.end()
            ),
        )),
    }
}
