//! torchrun's environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`,
//! `MASTER_PORT`, and under torchrun's agent `TORCHELASTIC_USE_AGENT_STORE`,
//! `TORCHELASTIC_RESTART_COUNT`) and ditto's own launch variables (`DITTO_JOB_ID`,
//! `DITTO_RENDEZVOUS_BIND`, `DITTO_COLLECTIVE_TIMEOUT_S`), read with typed errors that
//! name the variable and the range it must lie in. Everything is checked here, at
//! start-up, before any socket is opened or any collective runs: a bad launch fails on
//! every rank at once with the same message, instead of as a hang or a confusing error
//! from the rendezvous.

use std::time::Duration;

use crate::collective_timeout::collective_timeout_from_vars;
use crate::env_var::{bad, parse_in};
use crate::Result;

/// The largest world size accepted (NCCL counts ranks in an `int`; the rendezvous in a
/// `u32`; a million ranks is far beyond any cluster ditto runs on).
pub const MAX_WORLD_SIZE: usize = 1 << 20;

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
    /// The job's id, from which the rendezvous token is derived
    /// ([`crate::rendezvous::JobToken`]): `DITTO_JOB_ID`, else torchrun's
    /// `TORCHELASTIC_RUN_ID`, else `MASTER_ADDR:MASTER_PORT/world=WORLD_SIZE`.
    pub job_id: String,
    /// The address rank 0's rendezvous listens on: `DITTO_RENDEZVOUS_BIND` (e.g.
    /// `0.0.0.0` for every interface), else `MASTER_ADDR`.
    pub rendezvous_bind: String,
    /// How long a collective may take before every rank gives up:
    /// `DITTO_COLLECTIVE_TIMEOUT_S`, else [`crate::DEFAULT_TIMEOUT`].
    pub collective_timeout: Duration,
    /// torchrun's agent hosts the job's TCPStore on `MASTER_ADDR:MASTER_PORT`
    /// (`TORCHELASTIC_USE_AGENT_STORE=True`): every rank joins it as a client and no
    /// rank binds the port.
    pub agent_store: bool,
    /// How many times torchrun has restarted the workers (`TORCHELASTIC_RESTART_COUNT`,
    /// default 0); the rendezvous keys of each attempt live under their own prefix.
    pub restart_count: u64,
    /// horovodrun launched the job (`HOROVOD_RANK` set, `RANK` not): its HTTP rendezvous
    /// server on `MASTER_ADDR:MASTER_PORT` (from `HOROVOD_GLOO_RENDEZVOUS_ADDR` /
    /// `_PORT`) hosts the job's store, and every rank joins it as a client.
    pub horovod_store: bool,
}

/// The names a launcher gives the variables ditto reads.
struct Names {
    rank: &'static str,
    world_size: &'static str,
    local_rank: &'static str,
    local_world_size: &'static str,
    master_addr: &'static str,
    master_port: &'static str,
}

/// torchrun's (and `scripts/launch_local.sh`'s).
const TORCHRUN: Names = Names {
    rank: "RANK",
    world_size: "WORLD_SIZE",
    local_rank: "LOCAL_RANK",
    local_world_size: "LOCAL_WORLD_SIZE",
    master_addr: "MASTER_ADDR",
    master_port: "MASTER_PORT",
};

/// horovodrun's in its Gloo mode (`horovod/runner/gloo_run.py`). Its MPI mode sets
/// MPI's variables instead, which the MPI backend reads.
const HOROVOD: Names = Names {
    rank: "HOROVOD_RANK",
    world_size: "HOROVOD_SIZE",
    local_rank: "HOROVOD_LOCAL_RANK",
    local_world_size: "HOROVOD_LOCAL_SIZE",
    master_addr: "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    master_port: "HOROVOD_GLOO_RENDEZVOUS_PORT",
};

/// The largest restart count accepted (torchrun's `--max-restarts` is far below it).
pub const MAX_RESTART_COUNT: u64 = 1_000_000;

/// The reminder every "not set" error carries.
const LAUNCH_HINT: &str = "launch with torchrun-style variables: RANK, WORLD_SIZE, \
                           LOCAL_RANK, MASTER_ADDR, MASTER_PORT";

impl LaunchEnv {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self> {
        LaunchEnv::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `get` (for tests). `RANK` and `WORLD_SIZE` are
    /// required; `LOCAL_RANK` defaults to `RANK` and `MASTER_ADDR` / `MASTER_PORT` to
    /// `127.0.0.1:29500` (torchrun's defaults for a single machine). When
    /// `LOCAL_WORLD_SIZE` is set, `LOCAL_RANK` must lie below it.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let horovod = get("RANK").is_none() && get("HOROVOD_RANK").is_some();
        let names = if horovod { &HOROVOD } else { &TORCHRUN };
        let required = |name: &'static str| {
            get(name).ok_or_else(|| bad(name, format!("is not set ({LAUNCH_HINT})")))
        };
        // An optional number: in `range` when set, else `default`.
        let or_default = |name: &'static str, range, default: u64| {
            get(name).map_or(Ok(default), |v| parse_in(name, &v, range))
        };
        let world_size = parse_in(
            names.world_size,
            &required(names.world_size)?,
            1..=MAX_WORLD_SIZE as u64,
        )? as usize;
        let rank = parse_in(
            names.rank,
            &required(names.rank)?,
            0..=world_size as u64 - 1,
        )? as usize;
        let world = world_size as u64;
        let local_world = or_default(names.local_world_size, 1..=world, world)?;
        let local_rank = or_default(names.local_rank, 0..=local_world - 1, rank as u64)? as usize;
        // horovodrun always says where its rendezvous server is.
        let master_addr = match horovod {
            true => Some(required(names.master_addr)?),
            false => get(names.master_addr),
        }
        .unwrap_or_else(|| "127.0.0.1".into());
        if master_addr.trim().is_empty() {
            return Err(bad(
                names.master_addr,
                "is empty; expected rank 0's host name or IP address".into(),
            ));
        }
        let master_addr = master_addr.trim().to_string();
        if horovod {
            required(names.master_port)?;
        }
        let master_port = or_default(names.master_port, 1..=65535, 29500)? as u16;
        let job_id = match (get("DITTO_JOB_ID"), get("TORCHELASTIC_RUN_ID")) {
            (Some(id), _) => non_empty("DITTO_JOB_ID", id)?,
            (None, Some(id)) => non_empty("TORCHELASTIC_RUN_ID", id)?,
            (None, None) if horovod => {
                format!("horovod:{master_addr}:{master_port}/world={world_size}")
            }
            (None, None) => format!("{master_addr}:{master_port}/world={world_size}"),
        };
        let rendezvous_bind = match get("DITTO_RENDEZVOUS_BIND") {
            Some(addr) => non_empty("DITTO_RENDEZVOUS_BIND", addr)?,
            None => master_addr.clone(),
        };
        let collective_timeout = collective_timeout_from_vars(&get)?;
        // torchrun writes Python's str(True) / str(False).
        let agent_store = match get("TORCHELASTIC_USE_AGENT_STORE")
            .as_deref()
            .map(str::trim)
        {
            None | Some("False") => false,
            Some("True") => true,
            Some(other) => {
                return Err(bad(
                    "TORCHELASTIC_USE_AGENT_STORE",
                    format!("{other:?}; expected True or False (torchrun sets it)"),
                ))
            }
        };
        let restart_count = or_default("TORCHELASTIC_RESTART_COUNT", 0..=MAX_RESTART_COUNT, 0)?;
        Ok(LaunchEnv {
            rank,
            world_size,
            local_rank,
            master_addr,
            master_port,
            job_id,
            rendezvous_bind,
            collective_timeout,
            agent_store,
            restart_count,
            horovod_store: horovod,
        })
    }

    /// `MASTER_ADDR:MASTER_PORT`.
    #[must_use]
    pub fn master(&self) -> String {
        format!("{}:{}", self.master_addr, self.master_port)
    }

    /// `LOCAL_RANK` names a device this machine has (`0..device_count`): checked before
    /// the rank joins anything, so a launcher that starts more processes per machine
    /// than it has GPUs fails at once, naming the variable.
    pub fn check_local_rank(&self, device_count: usize) -> Result<()> {
        if self.local_rank < device_count {
            return Ok(());
        }
        Err(bad(
            "LOCAL_RANK",
            match device_count {
                0 => format!("is {}, but this machine has no GPU", self.local_rank),
                n => format!(
                    "{} is not in 0..={} (this machine has {n} GPU(s))",
                    self.local_rank,
                    n - 1
                ),
            },
        ))
    }
}

/// `value`, trimmed, when not empty; the error names the variable.
fn non_empty(name: &'static str, value: String) -> Result<String> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(bad(
            name,
            "is set but empty; set a value or unset it".into(),
        ));
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LaunchError;

    fn env(vars: &[(&str, &str)]) -> Result<LaunchEnv> {
        LaunchEnv::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_string())
        })
    }

    /// The variable a bad launch names, and its message.
    fn refusal(vars: &[(&str, &str)]) -> (&'static str, String) {
        match env(vars) {
            Err(LaunchError::Environment { name, message }) => (name, message),
            other => panic!("{vars:?}: expected an environment error, got {other:?}"),
        }
    }

    #[test]
    fn torchrun_variables_are_read_with_defaults() {
        let e = env(&[("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1234")]).unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank), (1, 2, 1));
        assert_eq!(e.master(), "127.0.0.1:1234");
        assert_eq!(e.job_id, "127.0.0.1:1234/world=2");
        assert_eq!(e.rendezvous_bind, "127.0.0.1");
        assert_eq!(e.collective_timeout, crate::DEFAULT_TIMEOUT);
        assert_eq!((e.agent_store, e.restart_count), (false, 0));
        let e = env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ])
        .unwrap();
        assert_eq!((e.agent_store, e.restart_count), (true, 2));
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "tr-7"),
            ("DITTO_RENDEZVOUS_BIND", "0.0.0.0"),
            ("DITTO_COLLECTIVE_TIMEOUT_S", "30"),
        ])
        .unwrap();
        assert_eq!(e.job_id, "tr-7");
        assert_eq!(e.rendezvous_bind, "0.0.0.0");
        assert_eq!(e.collective_timeout, Duration::from_secs(30));
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "tr-7"),
            ("DITTO_JOB_ID", "mine"),
        ])
        .unwrap();
        assert_eq!(e.job_id, "mine", "DITTO_JOB_ID comes first");
    }

    /// Rank 1's variables under `horovodrun -np 2 -H localhost:2 --gloo` (Horovod
    /// 0.28.1, recorded 2026-11-29); no RANK, WORLD_SIZE or MASTER_ADDR among them.
    const HOROVODRUN_RANK1: [(&str, &str); 13] = [
        ("HOROVOD_CONTROLLER", "gloo"),
        ("HOROVOD_CPU_OPERATIONS", "gloo"),
        ("HOROVOD_CROSS_RANK", "0"),
        ("HOROVOD_CROSS_SIZE", "1"),
        ("HOROVOD_GLOO_IFACE", "lo"),
        ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1"),
        ("HOROVOD_GLOO_RENDEZVOUS_PORT", "42839"),
        ("HOROVOD_HOSTNAME", "localhost"),
        ("HOROVOD_LOCAL_RANK", "1"),
        ("HOROVOD_LOCAL_SIZE", "2"),
        ("HOROVOD_RANK", "1"),
        ("HOROVOD_SIZE", "2"),
        ("NCCL_SOCKET_IFNAME", "lo"),
    ];

    #[test]
    fn horovodruns_variables_are_read_as_torchruns() {
        let e = env(&HOROVODRUN_RANK1).unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank), (1, 2, 1));
        assert_eq!(e.master(), "127.0.0.1:42839");
        assert!(e.horovod_store && !e.agent_store);
        assert_eq!(e.job_id, "horovod:127.0.0.1:42839/world=2");
        // torchrun's variables win when both are set (a torchrun job inside a Horovod
        // environment), and without HOROVOD_RANK nothing is Horovod's.
        let mut both = HOROVODRUN_RANK1.to_vec();
        both.extend([("RANK", "0"), ("WORLD_SIZE", "1")]);
        let e = env(&both).unwrap();
        assert_eq!((e.rank, e.world_size, e.horovod_store), (0, 1, false));
        // horovodrun always names its server; a launch that does not is refused by name.
        let without_port: Vec<_> = HOROVODRUN_RANK1
            .iter()
            .copied()
            .filter(|(k, _)| *k != "HOROVOD_GLOO_RENDEZVOUS_PORT")
            .collect();
        assert_eq!(refusal(&without_port).0, "HOROVOD_GLOO_RENDEZVOUS_PORT");
        let mut bad_rank = HOROVODRUN_RANK1.to_vec();
        bad_rank.retain(|(k, _)| *k != "HOROVOD_RANK");
        bad_rank.push(("HOROVOD_RANK", "2"));
        let (name, message) = refusal(&bad_rank);
        assert_eq!(name, "HOROVOD_RANK");
        assert!(message.contains("0..=1"), "{message}");
    }

    #[test]
    fn every_bad_launch_variable_is_named_with_its_range() {
        let ok = [("RANK", "1"), ("WORLD_SIZE", "4")];
        let with = |name: &'static str, value: &'static str| {
            let mut vars: Vec<(&str, &str)> =
                ok.iter().filter(|(k, _)| *k != name).copied().collect();
            vars.push((name, value));
            vars
        };
        let without = |name: &str| -> Vec<(&str, &str)> {
            ok.iter().filter(|(k, _)| *k != name).copied().collect()
        };
        for (vars, name, says) in [
            (without("RANK"), "RANK", "is not set"),
            (without("WORLD_SIZE"), "WORLD_SIZE", "is not set"),
            (
                with("WORLD_SIZE", "0"),
                "WORLD_SIZE",
                "0 is not in 1..=1048576",
            ),
            (
                with("WORLD_SIZE", "four"),
                "WORLD_SIZE",
                "not a whole number; expected 1..=",
            ),
            (with("WORLD_SIZE", "-2"), "WORLD_SIZE", "not a whole number"),
            (with("RANK", "4"), "RANK", "4 is not in 0..=3"),
            (
                with("RANK", "x"),
                "RANK",
                "\"x\" is not a whole number; expected 0..=3",
            ),
            (with("LOCAL_RANK", "-1"), "LOCAL_RANK", "expected 0..=3"),
            (with("LOCAL_RANK", "9"), "LOCAL_RANK", "9 is not in 0..=3"),
            (
                with("LOCAL_WORLD_SIZE", "8"),
                "LOCAL_WORLD_SIZE",
                "8 is not in 1..=4",
            ),
            (
                with("MASTER_PORT", "70000"),
                "MASTER_PORT",
                "70000 is not in 1..=65535",
            ),
            (
                with("MASTER_PORT", "0"),
                "MASTER_PORT",
                "0 is not in 1..=65535",
            ),
            (
                with("MASTER_PORT", "http"),
                "MASTER_PORT",
                "not a whole number",
            ),
            (with("MASTER_ADDR", " "), "MASTER_ADDR", "is empty"),
            (with("DITTO_JOB_ID", ""), "DITTO_JOB_ID", "empty"),
            (
                with("DITTO_RENDEZVOUS_BIND", ""),
                "DITTO_RENDEZVOUS_BIND",
                "empty",
            ),
            (
                with("DITTO_COLLECTIVE_TIMEOUT_S", "0"),
                "DITTO_COLLECTIVE_TIMEOUT_S",
                "0 is not in 1..=86400",
            ),
            (
                with("TORCHELASTIC_USE_AGENT_STORE", "yes"),
                "TORCHELASTIC_USE_AGENT_STORE",
                "expected True or False",
            ),
            (
                with("TORCHELASTIC_RESTART_COUNT", "-1"),
                "TORCHELASTIC_RESTART_COUNT",
                "not a whole number",
            ),
            (
                with("DITTO_COLLECTIVE_TIMEOUT_S", "10m"),
                "DITTO_COLLECTIVE_TIMEOUT_S",
                "not a whole number",
            ),
        ] {
            let (named, message) = refusal(&vars);
            assert_eq!(named, name, "{vars:?}: {message}");
            assert!(
                message.contains(says),
                "{vars:?}: {message:?} lacks {says:?}"
            );
        }
        let e = env(&[("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "3")]).unwrap();
        assert!(e.check_local_rank(4).is_ok());
        for (devices, says) in [
            (2, "3 is not in 0..=1 (this machine has 2 GPU(s))"),
            (0, "no GPU"),
        ] {
            match e.check_local_rank(devices) {
                Err(LaunchError::Environment { name, message }) => {
                    assert_eq!(name, "LOCAL_RANK");
                    assert!(message.contains(says), "{message}");
                }
                other => panic!("expected an environment error, got {other:?}"),
            }
        }
    }
}
