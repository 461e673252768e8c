//! The Gloo backend (feature `gloo`): CPU ranks, one process each, launched
//! torchrun-style, over Gloo, PyTorch's default CPU backend (Debian: `libgloo-dev`).
//!
//! ```text
//! cargo build --release --features gloo --example ddp_train
//! torchrun --nproc-per-node 4 --no-python target/release/examples/ddp_train --backend gloo ...
//! ```
//!
//! The job forms as an NCCL job does ([`crate::rendezvous`]): every rank joins torchrun's
//! agent store (or ditto's own on rank 0) and proves the job token; rank 0 hands every
//! rank a fresh random key prefix, sealed with the token; then Gloo's own rendezvous
//! (each rank's TCP address, under that prefix) runs over the same store, through
//! [`StoreBridge`]. A process that cannot prove the token never learns the prefix, so it
//! can neither read the addresses nor plant its own.
//!
//! Gloo is C++ without a C API: `gloo/shim.cpp` (compiled by `build.rs`) wraps the five
//! collectives in `extern "C"` functions that catch every exception. Movement
//! collectives send raw bytes (every dtype works); `all_reduce` uses Gloo's ring sum,
//! whose order depends on the world size (the fast mode; the invariant mode of
//! [`crate::ddp`] only moves data).
//!
//! Collectives complete inside their calls. Each one is bounded by the collective
//! timeout, which Gloo applies per operation. A rank that dies closes its sockets, so its
//! neighbours fail at once with an I/O error, and the ranks waiting on those neighbours
//! fail as they exit; a rank that stops without exiting is found by the timeout. Either
//! way the survivor asks the [`ProgressBoard`] which ranks went silent and names them
//! ([`DistError::PeerExited`], [`DistError::CollectiveTimeoutNamed`]). After a failure the
//! group is unusable ([`DistError::Broken`]), as Gloo's pairs are.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use launch::rendezvous::{nonce, JobToken, Rendezvous};
use launch::LaunchEnv;
use tensor_core::Device;

use crate::engine::{AllGather, AllToAll, Broadcast, Engine, GroupInfo, Sum, SumDtype};
use crate::host::{like, with_element, with_summable, AsBytes};
use crate::{Backend, DistError, ProgressBoard, Result};

mod connect;

use connect::{connect, local_address_towards, StoreBridge};

/// Gloo's context (`DittoGloo` in the shim).
#[repr(C)]
struct RawContext {
    _opaque: [u8; 0],
}

extern "C" {
    fn ditto_gloo_free(gloo: *mut RawContext);
    fn ditto_gloo_sum(
        g: *mut RawContext,
        dtype: c_int,
        data: *mut c_void,
        count: usize,
        tag: u32,
        ms: i64,
        err: *mut c_char,
        cap: usize,
    ) -> c_int;
    fn ditto_gloo_broadcast(
        g: *mut RawContext,
        data: *mut c_void,
        bytes: usize,
        root: c_int,
        tag: u32,
        ms: i64,
        err: *mut c_char,
        cap: usize,
    ) -> c_int;
    fn ditto_gloo_all_gather(
        g: *mut RawContext,
        input: *const c_void,
        input_bytes: usize,
        output: *mut c_void,
        counts: *const usize,
        tag: u32,
        ms: i64,
        err: *mut c_char,
        cap: usize,
    ) -> c_int;
    fn ditto_gloo_all_to_all(
        g: *mut RawContext,
        input: *const c_void,
        sent: *const i64,
        output: *mut c_void,
        received: *const i64,
        tag: u32,
        ms: i64,
        err: *mut c_char,
        cap: usize,
    ) -> c_int;
    fn ditto_gloo_barrier(
        g: *mut RawContext,
        tag: u32,
        ms: i64,
        err: *mut c_char,
        cap: usize,
    ) -> c_int;
}

/// Room for Gloo's error messages.
const ERROR_CAP: usize = 1024;
/// The shim's return code for Gloo's `IoException` (a closed peer, a timeout).
const IO_ERROR: c_int = 2;

/// The shim's context, freed on drop.
struct Context(*mut RawContext);

// SAFETY: Gloo's context may be used from any thread; `GlooGroup` runs one collective at
// a time (behind its mutex).
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: made by `ditto_gloo_connect`, freed once.
        unsafe { ditto_gloo_free(self.0) }
    }
}

/// What one collective call needs: the context, the next collective's number, and the
/// first failure (after which Gloo's pairs are in no defined state).
struct State {
    context: Context,
    sequence: u64,
    broken: Option<String>,
}

/// This process's rank in a group of CPU processes joined over Gloo.
pub struct GlooGroup {
    state: Mutex<State>,
    info: GroupInfo,
    timeout: Duration,
    /// Each rank's progress in the job's store, to name the ranks that went silent.
    progress: ProgressBoard,
}

impl std::fmt::Debug for GlooGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlooGroup")
            .field("rank", &self.info.rank)
            .field("world_size", &self.info.world_size)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl GlooGroup {
    /// Joins the job described by torchrun's variables ([`LaunchEnv::from_env`]), forming
    /// it within `timeout` through the rendezvous store, and bounds each collective by
    /// `DITTO_COLLECTIVE_TIMEOUT_S` (default [`crate::DEFAULT_TIMEOUT`]). Gloo listens on
    /// this host's address towards `MASTER_ADDR`, or on the interface `GLOO_SOCKET_IFNAME`
    /// (PyTorch's variable) or else `HOROVOD_GLOO_IFACE` (horovodrun's) names.
    pub fn from_env(timeout: Duration) -> Result<GlooGroup> {
        let env = LaunchEnv::from_env()?;
        let token = JobToken::from_env(&env)?;
        let mut rendezvous = Rendezvous::join(&env, &token, timeout)?;
        let made = if env.rank == 0 { Some(nonce()?) } else { None };
        let prefix = rendezvous.exchange(made.as_ref().map(|n| &n[..]))?;
        for refusal in rendezvous.take_refusals() {
            eprintln!("rendezvous on {}: {refusal}", env.master());
        }
        let hex: String = prefix.iter().map(|b| format!("{b:02x}")).collect();
        let mut bridge = StoreBridge {
            prefix: format!("{}/gloo/{hex}/", rendezvous.keys().base()),
            store: rendezvous.store(),
            timeout,
            error: None,
        };
        // PyTorch's variable, else the interface horovodrun picked for its workers.
        let iface = std::env::var("GLOO_SOCKET_IFNAME")
            .or_else(|_| std::env::var("HOROVOD_GLOO_IFACE"))
            .unwrap_or_default();
        let address = local_address_towards(&env)?;
        let context = connect(
            env.rank,
            env.world_size,
            &address,
            &iface,
            timeout,
            env.collective_timeout,
            &mut bridge,
        )?;
        let progress = ProgressBoard::start(rendezvous, env.rank, env.world_size)?;
        Ok(GlooGroup {
            state: Mutex::new(State {
                context,
                sequence: 0,
                broken: None,
            }),
            info: GroupInfo {
                rank: env.rank,
                world_size: env.world_size,
                backend: Backend::Gloo,
                device: Device::Cpu,
            },
            timeout: env.collective_timeout,
            progress,
        })
    }

    /// Sets how long one collective may take (default: the launch's
    /// `DITTO_COLLECTIVE_TIMEOUT_S`).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs collective `op` through the shim: `call(context, tag, timeout_ms, err)`.
    fn collective(
        &self,
        op: &'static str,
        call: impl FnOnce(*mut RawContext, u32, i64, *mut c_char) -> c_int,
    ) -> Result<()> {
        let mut state = self.state();
        if let Some(reason) = &state.broken {
            return Err(DistError::Broken {
                reason: reason.clone(),
            });
        }
        let sequence = state.sequence;
        state.sequence += 1;
        self.progress.entered(sequence);
        let mut err = [0 as c_char; ERROR_CAP];
        let ms = i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX);
        // Gloo's tags tell concurrent collectives apart; ours run one at a time, so the
        // low bits of the number are enough.
        let code = call(state.context.0, sequence as u32, ms, err.as_mut_ptr());
        let result = match code {
            0 => Ok(()),
            _ => {
                // SAFETY: the shim always NUL-terminates within ERROR_CAP.
                let message = unsafe { CStr::from_ptr(err.as_ptr()) }
                    .to_string_lossy()
                    .into_owned();
                Err(self.diagnose(op, sequence, code, message))
            }
        };
        if let Err(e) = &result {
            state.broken = Some(e.to_string());
        }
        self.progress.finished(sequence, result)
    }

    /// Gloo's failure as ditto's error: a timeout (which the progress board then names),
    /// the ranks whose records went silent, or Gloo's message.
    fn diagnose(&self, op: &'static str, sequence: u64, code: c_int, message: String) -> DistError {
        if code == IO_ERROR && message.contains("Timed out") {
            return DistError::CollectiveTimeout {
                op,
                sequence,
                timeout: self.timeout,
                missing: None,
            };
        }
        // Only an I/O error (a peer's connection closed) is worth the board's read, which
        // waits two heartbeats.
        let silent = (code == IO_ERROR)
            .then(|| self.progress.stragglers(sequence))
            .flatten();
        match silent {
            Some(stragglers) if !stragglers.is_empty() => DistError::PeerExited {
                op: format!("{op} ({message})"),
                sequence: Some(sequence),
                ranks: stragglers.iter().map(|s| s.rank).collect(),
            },
            _ => DistError::Gloo { op, message },
        }
    }
}

impl Engine for GlooGroup {
    fn info(&self) -> GroupInfo {
        self.info
    }

    fn run_sum(&self, args: Sum<'_>) -> Result<()> {
        let Sum { tensor, dtype } = args;
        let code = match dtype {
            SumDtype::F32 => 0,
            SumDtype::F64 => 1,
            SumDtype::I64 => 2,
        };
        *tensor = with_summable!(dtype, T => {
            let mut values = tensor.as_slice::<T>()?.to_vec();
            // Every rank has the same count, so all of them skip an empty sum together.
            if !values.is_empty() {
                self.collective("all_reduce", |g, tag, ms, err| unsafe {
                    // SAFETY: `values` holds `len` elements of the dtype `code` names.
                    ditto_gloo_sum(g, code, values.as_mut_ptr().cast(), values.len(), tag, ms, err, ERROR_CAP)
                })?;
            }
            like(tensor, values)?
        });
        Ok(())
    }

    fn run_broadcast(&self, args: Broadcast<'_>) -> Result<()> {
        let Broadcast { tensor, src } = args;
        *tensor = with_element!(tensor.dtype(), T => {
            let mut bytes = T::bytes(tensor.as_slice::<T>()?).to_vec();
            if !bytes.is_empty() {
                self.collective("broadcast", |g, tag, ms, err| unsafe {
                    // SAFETY: `bytes` is valid for its length; `src` is a checked rank.
                    ditto_gloo_broadcast(g, bytes.as_mut_ptr().cast(), bytes.len(), src as c_int, tag, ms, err, ERROR_CAP)
                })?;
            }
            like(tensor, T::from_bytes(&bytes))?
        });
        Ok(())
    }

    fn run_all_gather(&self, args: AllGather<'_>) -> Result<()> {
        let (output, input) = (args.output, args.input);
        let size = output.dtype().size_in_bytes();
        let counts: Vec<usize> = args.counts.iter().map(|&c| c * size).collect();
        *output = with_element!(output.dtype(), T => {
            let send = T::bytes(input.as_slice::<T>()?);
            let mut received = vec![0u8; output.elem_count() * size];
            if !received.is_empty() {
                self.collective("all_gather", |g, tag, ms, err| unsafe {
                    // SAFETY: the checks made `counts` sum to `received`'s length, with
                    // this rank's entry `send`'s length; one entry per rank.
                    ditto_gloo_all_gather(g, send.as_ptr().cast(), send.len(), received.as_mut_ptr().cast(), counts.as_ptr(), tag, ms, err, ERROR_CAP)
                })?;
            }
            like(output, T::from_bytes(&received))?
        });
        Ok(())
    }

    fn run_all_to_all(&self, args: AllToAll<'_>) -> Result<()> {
        let (output, input) = (args.output, args.input);
        let size = output.dtype().size_in_bytes();
        let bytes =
            |counts: &[usize]| -> Vec<i64> { counts.iter().map(|&c| (c * size) as i64).collect() };
        let (sent, expected) = (bytes(args.input_counts), bytes(args.output_counts));
        *output = with_element!(output.dtype(), T => {
            let send = T::bytes(input.as_slice::<T>()?);
            let mut received = vec![0u8; output.elem_count() * size];
            self.collective("all_to_all", |g, tag, ms, err| unsafe {
                // SAFETY: the checks made each count list sum to its buffer's length,
                // one entry per rank.
                ditto_gloo_all_to_all(g, send.as_ptr().cast(), sent.as_ptr(), received.as_mut_ptr().cast(), expected.as_ptr(), tag, ms, err, ERROR_CAP)
            })?;
            like(output, T::from_bytes(&received))?
        });
        Ok(())
    }

    fn run_barrier(&self) -> Result<()> {
        self.collective("barrier", |g, tag, ms, err| unsafe {
            // SAFETY: `g` is this group's live context.
            ditto_gloo_barrier(g, tag, ms, err, ERROR_CAP)
        })
    }
}
