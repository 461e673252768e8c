//! torchrun's environment: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`,
//! `MASTER_PORT`, read with typed errors naming the variable.

use crate::{DistError, Result};

/// Where this process sits in a job launched torchrun-style (one process per GPU).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchEnv {
    /// Global rank, `0..world_size`.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
    /// Rank within this machine: the GPU this process drives.
    pub local_rank: usize,
    /// Host of the rendezvous store (rank 0's machine).
    pub master_addr: String,
    /// Port of the rendezvous store.
    pub master_port: u16,
}

impl LaunchEnv {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self> {
        LaunchEnv::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `get` (for tests). `LOCAL_RANK` defaults to `RANK`
    /// and `MASTER_ADDR` / `MASTER_PORT` to `127.0.0.1:29500` (torchrun's defaults for
    /// a single machine); `RANK` and `WORLD_SIZE` are required.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        fn parse<T: std::str::FromStr>(name: &'static str, value: String, what: &str) -> Result<T> {
            value.trim().parse().map_err(|_| DistError::Environment {
                name,
                message: format!("{value:?} is not {what}"),
            })
        }
        let required = |name: &'static str| {
            get(name).ok_or(DistError::Environment {
                name,
                message: "is not set (launch with torchrun-style variables: RANK, WORLD_SIZE, \
                          LOCAL_RANK, MASTER_ADDR, MASTER_PORT)"
                    .into(),
            })
        };
        let rank: usize = parse("RANK", required("RANK")?, "a rank")?;
        let world_size: usize = parse("WORLD_SIZE", required("WORLD_SIZE")?, "a process count")?;
        if world_size == 0 || rank >= world_size {
            return Err(DistError::Environment {
                name: "RANK",
                message: format!("rank {rank} is not in 0..{world_size} (WORLD_SIZE)"),
            });
        }
        let local_rank = match get("LOCAL_RANK") {
            Some(v) => parse("LOCAL_RANK", v, "a local rank")?,
            None => rank,
        };
        let master_addr = get("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let master_port = match get("MASTER_PORT") {
            Some(v) => parse("MASTER_PORT", v, "a TCP port (0..65535)")?,
            None => 29500,
        };
        Ok(LaunchEnv {
            rank,
            world_size,
            local_rank,
            master_addr,
            master_port,
        })
    }

    /// `MASTER_ADDR:MASTER_PORT`.
    #[must_use]
    pub fn master(&self) -> String {
        format!("{}:{}", self.master_addr, self.master_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<LaunchEnv> {
        LaunchEnv::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_string())
        })
    }

    #[test]
    fn torchrun_variables_are_read_with_typed_errors() {
        let e = env(&[("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1234")]).unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank), (1, 2, 1));
        assert_eq!(e.master(), "127.0.0.1:1234");
        let name = |r: Result<LaunchEnv>| match r {
            Err(DistError::Environment { name, .. }) => name,
            other => panic!("expected an environment error, got {other:?}"),
        };
        assert_eq!(name(env(&[("WORLD_SIZE", "2")])), "RANK");
        assert_eq!(name(env(&[("RANK", "x"), ("WORLD_SIZE", "2")])), "RANK");
        assert_eq!(name(env(&[("RANK", "2"), ("WORLD_SIZE", "2")])), "RANK");
        assert_eq!(
            name(env(&[
                ("RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("MASTER_PORT", "70000")
            ])),
            "MASTER_PORT"
        );
    }
}
