//! Where a tensor's bytes live.

use std::fmt;
use std::str::FromStr;

use crate::TensorError;

/// A compute device. `Cuda(i)` is the CUDA device with ordinal `i`.
///
/// Parses from and prints as PyTorch's spelling: `cpu`, `cuda` (= `cuda:0`), `cuda:1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Device {
    /// Host memory.
    #[default]
    Cpu,
    /// The CUDA device with this ordinal.
    Cuda(usize),
}

impl Device {
    /// True for `Device::Cuda(_)`.
    #[must_use]
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    /// `devices` without repeats, in the order first given: what every API that takes a
    /// list of devices (`fork_rng`, a checkpoint's default generators) acts on, so a
    /// device listed twice is saved, forked or restored once.
    #[must_use]
    pub fn distinct(devices: &[Device]) -> Vec<Device> {
        let mut out: Vec<Device> = Vec::with_capacity(devices.len());
        for &device in devices {
            if !out.contains(&device) {
                out.push(device);
            }
        }
        out
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for Device {
    type Err = TensorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || TensorError::InvalidDevice {
            given: s.to_string(),
        };
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => {
                let index = s.strip_prefix("cuda:").ok_or_else(bad)?;
                index.parse().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pytorch_spellings() {
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!("cuda:3".parse::<Device>().unwrap(), Device::Cuda(3));
        assert_eq!(Device::Cuda(2).to_string(), "cuda:2");
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", ""] {
            assert!(matches!(
                bad.parse::<Device>(),
                Err(TensorError::InvalidDevice { .. })
            ));
        }
    }
}
