//! The audit: a trace of every tensor op, to find the first op where two runs diverged.
//!
//! Two runs that should agree (the same seed twice, two thread counts, two ranks of a
//! data-parallel job, a CPU run and a CUDA run) record a trace each; `ditto-audit diff
//! a.trace b.trace` then names the first op whose output differs although its inputs
//! matched, with its call site, or the first random op whose reservation differs. That is
//! the op that broke reproducibility; everything after it differs only because its
//! inputs do.
//!
//! # Recording
//! [`start`] (or the `DITTO_AUDIT=path` environment variable, read at the first op;
//! `{pid}` in it becomes the process id) opens a trace; [`stop`] closes it. While it is
//! open, every public tensor op that computes values records one line (see [`trace`]
//! for the format): its stream and sequence number, name, caller location
//! (`#[track_caller]`), device, and the dtype, dims and XXH64 hash of each input and of
//! the output; random ops add their generator's device, seed, reserved offset and
//! blocks. An op that calls other ops records only itself (the outermost op on a thread),
//! so a CPU op and its CUDA twin, which call different helpers, record alike. Views and
//! creation (`reshape`, `t`, `zeros`, `from_vec`, ...) are not ops here: they compute
//! nothing (a tensor made from data shows up, hashed, as an input of the op that uses it).
//! Closed, an op pays one relaxed atomic load.
//!
//! Crates above tensor-core record their own ops the same way, through
//! [`OpRecorder`]: nn-mini's one-pass SGD step does, and rng-gen's random ops add an
//! [`RngRecord`].
//!
//! # Threads and streams
//! Records are numbered per *stream*, not globally, so a trace does not depend on how
//! threads interleave. A thread records into its own stream: `main` on the main thread,
//! the thread's name elsewhere (or its id, which is only stable if threads start in the
//! same order). Work whose thread is an accident of scheduling runs inside a named
//! stream ([`stream`]): the data loader loads batch `b` of epoch `e` in stream
//! `loader/<key>/e<e>/b<b>` on whichever worker picks it up, so traces with 0, 2 or 8
//! workers compare equal. Lines of different streams interleave in the file; the diff
//! reads them per stream, in sequence order.
//!
//! # Comparing a CPU run with a CUDA run
//! Both record the same ops at the same call sites; the diff ignores the device column.
//! Since cuBLAS and libdevice round differently from the CPU, it names the first op
//! whose backends differ in the last bits (typically the first `matmul` or `exp`): a
//! real answer, not a bug.

pub mod diff;
pub mod hash;
pub mod trace;

use std::cell::RefCell;
use std::fs::File;
use std::io::{BufWriter, LineWriter, Write};
use std::panic::Location;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};

pub use trace::{Record, RngRecord, TensorDigest};

use crate::{Result, Tensor, TensorError};

/// The environment variable that starts the audit at a program's first op.
pub const ENV_VAR: &str = "DITTO_AUDIT";

const UNSET: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

/// Whether a trace is open; `UNSET` until the environment has been read.
static STATE: AtomicU8 = AtomicU8::new(UNSET);
static ENV_READ: Once = Once::new();
/// Bumped by every [`start`], so threads restart their sequence numbers.
static EPOCH: AtomicU64 = AtomicU64::new(0);
static SINK: Mutex<Option<Sink>> = Mutex::new(None);

struct Sink {
    out: Box<dyn Write + Send>,
    records: u64,
}

fn sink() -> MutexGuard<'static, Option<Sink>> {
    SINK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn io_error(what: &str, e: &std::io::Error) -> TensorError {
    TensorError::Audit {
        message: format!("{what}: {e}"),
    }
}

/// True while a trace is open: the one relaxed atomic load every op pays.
#[inline]
#[must_use]
pub fn is_enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => start_from_env(),
    }
}

/// Reads [`ENV_VAR`] once: starts the audit into that file, or leaves it off.
#[cold]
fn start_from_env() -> bool {
    ENV_READ.call_once(|| {
        let started = match std::env::var(ENV_VAR) {
            Ok(path) if !path.is_empty() => {
                let path = path.replace("{pid}", &std::process::id().to_string());
                // Nothing calls `stop` for a trace the environment started, and a
                // static's buffer is never flushed at exit: write line by line.
                File::create(&path)
                    .map_err(|e| io_error("cannot create the trace", &e))
                    .and_then(|file| install(Box::new(LineWriter::new(file))))
                    .map_err(|e| eprintln!("ditto: {ENV_VAR}={path}: {e}; the audit stays off"))
            }
            _ => Err(()),
        };
        if started.is_err() {
            let _ = STATE.compare_exchange(UNSET, OFF, Ordering::SeqCst, Ordering::SeqCst);
        }
    });
    STATE.load(Ordering::Relaxed) == ON
}

/// Opens a trace at `path` (created or truncated) and starts recording. A trace that was
/// already open is flushed and closed first. Errors with `TensorError::Audit` when the
/// file cannot be created.
pub fn start(path: impl AsRef<Path>) -> Result<()> {
    ENV_READ.call_once(|| {});
    open(path.as_ref())
}

fn open(path: &Path) -> Result<()> {
    let file = File::create(path)
        .map_err(|e| io_error(&format!("cannot create {}", path.display()), &e))?;
    install(Box::new(BufWriter::new(file)))
}

/// Starts recording into `out` (a file, a buffer for tests, `io::sink()` to measure).
pub fn start_writer(out: Box<dyn Write + Send>) -> Result<()> {
    ENV_READ.call_once(|| {});
    install(out)
}

/// Opens the trace `out`. Never touches `ENV_READ`: [`start_from_env`] calls this from
/// inside `ENV_READ.call_once`, where a nested `call_once` would deadlock.
fn install(mut out: Box<dyn Write + Send>) -> Result<()> {
    let mut sink = sink();
    if let Some(mut old) = sink.take() {
        old.out
            .flush()
            .map_err(|e| io_error("flushing the previous trace", &e))?;
    }
    writeln!(out, "{}\n{}", trace::HEADER, trace::FIELDS)
        .map_err(|e| io_error("writing the trace header", &e))?;
    *sink = Some(Sink { out, records: 0 });
    EPOCH.fetch_add(1, Ordering::SeqCst);
    STATE.store(ON, Ordering::SeqCst);
    Ok(())
}

/// Stops recording, flushes and closes the trace; returns how many records it holds.
/// Without an open trace, returns 0.
pub fn stop() -> Result<u64> {
    ENV_READ.call_once(|| {});
    STATE.store(OFF, Ordering::SeqCst);
    match sink().take() {
        Some(mut s) => {
            s.out
                .flush()
                .map_err(|e| io_error("flushing the trace", &e))?;
            Ok(s.records)
        }
        None => Ok(0),
    }
}

/// Flushes the open trace (for a program that may be killed before [`stop`]).
pub fn flush() -> Result<()> {
    match sink().as_mut() {
        Some(s) => s
            .out
            .flush()
            .map_err(|e| io_error("flushing the trace", &e)),
        None => Ok(()),
    }
}

/// The recording state of one thread.
struct ThreadState {
    /// Ops currently running on this thread (only the outermost records).
    depth: u32,
    /// The [`EPOCH`] the sequence numbers belong to.
    epoch: u64,
    /// The current stream (`None`: the thread's default, named on first use).
    stream: Option<Arc<str>>,
    /// The next sequence number in the current stream.
    seq: u64,
    /// The streams this thread is nested in, with their next sequence numbers.
    outer: Vec<(Option<Arc<str>>, u64)>,
}

thread_local! {
    static THREAD: RefCell<ThreadState> = const {
        RefCell::new(ThreadState { depth: 0, epoch: 0, stream: None, seq: 0, outer: Vec::new() })
    };
}

/// The default stream of the calling thread: `main`, the thread's name, or its id.
fn thread_stream() -> Arc<str> {
    let thread = std::thread::current();
    match thread.name() {
        Some(name) => Arc::from(name),
        None => Arc::from(format!("{:?}", thread.id()).as_str()),
    }
}

/// Runs `f` with this thread's records in the stream `name()` (numbered from 0), then
/// returns to the enclosing stream. Use it for work whose thread depends on scheduling
/// (worker pools): give each unit of work a name that identifies it in every run. `name`
/// is only called while a trace is open.
pub fn stream<R>(name: impl FnOnce() -> String, f: impl FnOnce() -> R) -> R {
    if !is_enabled() {
        return f();
    }
    let name: Arc<str> = Arc::from(trace::clean(&name()).as_str());
    THREAD.with(|t| {
        let mut t = t.borrow_mut();
        let outer = (t.stream.take(), t.seq);
        t.outer.push(outer);
        t.stream = Some(name);
        t.seq = 0;
    });
    /// Restores the enclosing stream, also when `f` panics.
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            THREAD.with(|t| {
                let mut t = t.borrow_mut();
                if let Some((stream, seq)) = t.outer.pop() {
                    t.stream = stream;
                    t.seq = seq;
                }
            });
        }
    }
    let _leave = Leave;
    f()
}

/// Records one op: created by [`OpRecorder::begin`] before the op runs (so an in-place
/// op's inputs are hashed before they change), finished with its output.
///
/// ```
/// use tensor_core::audit::OpRecorder;
/// use tensor_core::{Device, Result, Tensor};
///
/// /// A downstream crate's op, audited like ditto's own.
/// #[track_caller]
/// fn double(x: &Tensor) -> Result<Tensor> {
///     let recorder = OpRecorder::begin("my_crate::double", &[x]);
///     recorder.finish_result(x.add(x))
/// }
/// # double(&Tensor::ones(&[2], tensor_core::DType::F32, Device::Cpu)?)?;
/// # Ok::<(), tensor_core::TensorError>(())
/// ```
#[must_use = "an op's record is written by `finish`"]
pub struct OpRecorder {
    state: Recording,
}

enum Recording {
    /// No trace open.
    Off,
    /// Inside another recorded op on this thread: not recorded.
    Nested,
    /// The outermost op: to be written at `finish`.
    Active(Box<Pending>),
}

struct Pending {
    op: &'static str,
    location: &'static Location<'static>,
    stream: Arc<str>,
    seq: u64,
    inputs: Vec<TensorDigest>,
    rng: Option<RngRecord>,
}

impl OpRecorder {
    /// Starts recording op `op` with its `inputs` (hashed now). The location recorded is
    /// the caller's, through any chain of `#[track_caller]` functions: mark public ops
    /// with it. Costs one relaxed atomic load when no trace is open.
    #[inline]
    #[track_caller]
    pub fn begin(op: &'static str, inputs: &[&Tensor]) -> OpRecorder {
        if !is_enabled() {
            return OpRecorder {
                state: Recording::Off,
            };
        }
        OpRecorder::begin_recording(op, Location::caller(), inputs)
    }

    #[cold]
    #[inline(never)]
    fn begin_recording(
        op: &'static str,
        location: &'static Location<'static>,
        inputs: &[&Tensor],
    ) -> OpRecorder {
        let position = THREAD.with(|t| {
            let mut t = t.borrow_mut();
            t.depth += 1;
            if t.depth > 1 {
                return None;
            }
            let epoch = EPOCH.load(Ordering::SeqCst);
            if t.epoch != epoch {
                t.epoch = epoch;
                t.seq = 0;
                t.outer.iter_mut().for_each(|(_, seq)| *seq = 0);
            }
            let stream = t.stream.get_or_insert_with(thread_stream).clone();
            let seq = t.seq;
            t.seq += 1;
            Some((stream, seq))
        });
        let Some((stream, seq)) = position else {
            return OpRecorder {
                state: Recording::Nested,
            };
        };
        // Hashing may run other ops (a GPU download): they see depth 1 and stay quiet.
        let inputs = inputs.iter().filter_map(|t| digest(t)).collect();
        OpRecorder {
            state: Recording::Active(Box::new(Pending {
                op,
                location,
                stream,
                seq,
                inputs,
                rng: None,
            })),
        }
    }

    /// True when this op will be written (a trace is open and it is the outermost op).
    #[must_use]
    pub fn is_recording(&self) -> bool {
        matches!(self.state, Recording::Active(_))
    }

    /// Adds a random op's generator reservation to the record.
    pub fn rng(&mut self, rng: RngRecord) {
        if let Recording::Active(pending) = &mut self.state {
            pending.rng = Some(rng);
        }
    }

    /// Writes the record with `output` (hashed now).
    #[inline]
    pub fn finish(self, output: &Tensor) {
        if let Recording::Active(_) = self.state {
            self.write(Some(output));
        }
    }

    /// [`OpRecorder::finish`] with an op's result: writes the record when it is `Ok`
    /// (a failed op records nothing) and hands the result back.
    #[inline]
    pub fn finish_result(self, result: Result<Tensor>) -> Result<Tensor> {
        if let (Recording::Active(_), Ok(output)) = (&self.state, &result) {
            self.write(Some(output));
        }
        result
    }

    #[cold]
    #[inline(never)]
    fn write(mut self, output: Option<&Tensor>) {
        let Recording::Active(pending) = std::mem::replace(&mut self.state, Recording::Nested)
        else {
            return;
        };
        let Pending {
            op,
            location,
            stream,
            seq,
            inputs,
            rng,
        } = *pending;
        let record = Record {
            stream: stream.to_string(),
            seq,
            op: op.to_string(),
            location: format!(
                "{}:{}:{}",
                location.file(),
                location.line(),
                location.column()
            ),
            device: output.map_or_else(|| "-".to_string(), |t| t.device().to_string()),
            inputs,
            output: output.and_then(digest),
            rng,
        };
        let line = format!("{record}\n");
        let mut sink = sink();
        if let Some(s) = sink.as_mut() {
            if let Err(e) = s.out.write_all(line.as_bytes()) {
                eprintln!("ditto: the audit trace could not be written ({e}); recording stops");
                STATE.store(OFF, Ordering::SeqCst);
                *sink = None;
            } else {
                s.records += 1;
            }
        }
    }
}

impl Drop for OpRecorder {
    fn drop(&mut self) {
        if !matches!(self.state, Recording::Off) {
            THREAD.with(|t| t.borrow_mut().depth -= 1);
        }
    }
}

/// `t`'s digest, or `None` (with a note on stderr) if its elements cannot be read.
fn digest(t: &Tensor) -> Option<TensorDigest> {
    match hash::tensor_hash(t) {
        Ok(hash) => Some(TensorDigest {
            dtype: t.dtype(),
            dims: t.dims().to_vec(),
            hash,
        }),
        Err(e) => {
            eprintln!(
                "ditto: the audit could not read a tensor ({e}); it is left out of the record"
            );
            None
        }
    }
}
