//! The CUDA stand-in's deferred mode (DITTO_CUDA_STANDIN_MODE=deferred) shows ordering
//! bugs that its eager mode hides. One deliberately wrong program, three mistakes a GPU
//! punishes: a pinned host buffer rewritten right after its asynchronous upload, a pinned
//! host buffer read right after its asynchronous download (before the stream was
//! synchronised), and an event queried as if recording it meant the work before it ran.
//! Pageable buffers are staged (upload) or completed (download) inside the call, as the
//! driver does, in both modes: the program does that right, and must see it work.
//!
//! The program runs in a child process per mode (the mode is read once per process),
//! with DITTO_CUDA_STANDIN_DEFER_MS so large that queued work runs only at a
//! synchronisation, and prints what it saw. In the eager mode each call completes
//! inside itself, so the wrong program looks right; in the deferred mode each mistake
//! shows. Stand-in only: on a real GPU (or without one) every test skips.

use crate::support;

use std::process::Command;
use std::sync::OnceLock;

use ditto::tensor_core::cuda;
use ditto::tensor_core::cudarc::driver::sys::{self, CUevent_flags, CUresult};
use ditto::tensor_core::cudarc::driver::{result, DevicePtr, DriverError};
use support::{gpu, on_standin, STANDIN_LABEL};

/// Set in the child: the body of `wrong_program_child` runs only there.
const CHILD_ENV: &str = "DITTO_TEST_DEFERRED_CHILD";

const N: usize = 64;

/// What the wrong program saw in `mode` ("eager" or "deferred"): its stdout.
fn observed(mode: &str) -> &'static str {
    static EAGER: OnceLock<String> = OnceLock::new();
    static DEFERRED: OnceLock<String> = OnceLock::new();
    let cell = if mode == "eager" { &EAGER } else { &DEFERRED };
    cell.get_or_init(|| run_child("wrong_program_child", mode))
}

/// What the racing-streams program saw in `mode`: its stdout.
fn observed_streams(mode: &str) -> &'static str {
    static EAGER: OnceLock<String> = OnceLock::new();
    static DEFERRED: OnceLock<String> = OnceLock::new();
    let cell = if mode == "eager" { &EAGER } else { &DEFERRED };
    cell.get_or_init(|| run_child("racing_streams_child", mode))
}

/// Runs the ignored test `child` of this module in a process of its own in `mode`, with
/// queued work held until a synchronisation; its stdout.
fn run_child(child: &str, mode: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args(["--exact", &format!("cuda_standin_deferred::{child}")])
        .args(["--include-ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, "1")
        .env("DITTO_CUDA_STANDIN_MODE", mode)
        .env("DITTO_CUDA_STANDIN_DEFER_MS", "600000")
        .output()
        .expect("cannot start the child process");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{child} failed in the {mode} mode ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The value the line `key: value` of `out` (a child's stdout) gives.
fn value_of(out: &str, mode: &str, key: &str) -> String {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no '{key}' line in the {mode} child's output:\n{out}"));
    line.trim().to_owned()
}

/// The value the wrong program printed for `key` in `mode`.
fn seen(mode: &str, key: &str) -> String {
    value_of(observed(mode), mode, key)
}

/// The value the racing-streams program printed for `key` in `mode`.
fn seen_streams(mode: &str, key: &str) -> String {
    value_of(observed_streams(mode), mode, key)
}

/// True when the stand-in runs this process; skips otherwise.
fn standin() -> bool {
    if !gpu() {
        return false;
    }
    if !on_standin() {
        println!("skipping: the deferred mode is the {STANDIN_LABEL}'s");
        return false;
    }
    true
}

/// N floats of pinned host memory (cuMemHostAlloc), freed on drop.
struct Pinned(*mut f32);

impl Pinned {
    fn new() -> Result<Self, DriverError> {
        // SAFETY: a fresh allocation of N floats, freed once in `drop`.
        let p = unsafe { result::malloc_host(N * std::mem::size_of::<f32>(), 0) }?;
        Ok(Self(p.cast()))
    }

    #[allow(clippy::mut_from_ref)] // the point: the host writes while a copy may read
    fn slice(&self) -> &mut [f32] {
        // SAFETY: N floats, zeroed at allocation; the tests read and write it from one thread.
        unsafe { std::slice::from_raw_parts_mut(self.0, N) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`; cuMemFreeHost waits for queued copies first.
        unsafe { result::free_host(self.0.cast()) }.expect("cuMemFreeHost");
    }
}

/// The first float at `ptr`, read back after a synchronisation.
fn download(
    ptr: u64,
    raw: ditto::tensor_core::cudarc::driver::sys::CUstream,
    stream: &ditto::tensor_core::cudarc::driver::CudaStream,
) -> Result<f32, DriverError> {
    stream.synchronize()?;
    let mut back = vec![0.0f32; N];
    // SAFETY: `ptr` holds N floats; synchronised before `back` is read.
    unsafe { result::memcpy_dtoh_async(&mut back, ptr, raw) }?;
    stream.synchronize()?;
    Ok(back[0])
}

/// The wrong program. Each step makes a mistake (or does it right) and prints what it saw.
#[test]
#[ignore = "the child process of the cuda_standin_deferred tests (runs only with their variable)"]
fn wrong_program_child() -> Result<(), DriverError> {
    if std::env::var_os(CHILD_ENV).is_none() || !standin() {
        return Ok(());
    }
    let stream = cuda::default_stream(0).unwrap();
    let raw = stream.cu_stream();
    let device = stream.alloc_zeros::<f32>(N).unwrap();
    let (ptr, guard) = device.device_ptr(&stream);

    // Done right: a pageable upload's source may be rewritten once the call returned
    // (the driver stages pageable memory before returning; cudarc and ditto rely on it).
    let mut pageable = vec![3.0f32; N];
    // SAFETY: `ptr` holds N floats.
    unsafe { result::memcpy_htod_async(ptr, &pageable, raw) }?;
    pageable.fill(9.0);
    println!(
        "pageable_upload_rewritten: {}",
        download(ptr, raw, &stream)?
    );

    // Mistake 1: a pinned upload's source is rewritten before the stream was synchronised.
    let pinned = Pinned::new()?;
    pinned.slice().fill(1.0);
    // SAFETY: `pinned` holds N floats and outlives the synchronisation below.
    unsafe { result::memcpy_htod_async(ptr, pinned.slice(), raw) }?;
    pinned.slice().fill(7.0);
    stream.synchronize()?;
    println!("pinned_upload_rewritten: {}", download(ptr, raw, &stream)?);

    // Mistake 2: a pinned download's destination is read before the stream was synchronised.
    let fives = vec![5.0f32; N];
    // SAFETY: `ptr` holds N floats.
    unsafe { result::memcpy_htod_async(ptr, &fives, raw) }?;
    pinned.slice().fill(0.0);
    // SAFETY: `pinned` outlives the synchronisation below.
    unsafe { result::memcpy_dtoh_async(pinned.slice(), ptr, raw) }?;
    println!("pinned_download_read_early: {}", pinned.slice()[0]);
    stream.synchronize()?;
    println!("pinned_download_read_after_sync: {}", pinned.slice()[0]);

    // Done right: a pageable download has completed when its call returns.
    let mut early = vec![0.0f32; N];
    // SAFETY: `early` holds N floats.
    unsafe { result::memcpy_dtoh_async(&mut early, ptr, raw) }?;
    println!("pageable_download_read_early: {}", early[0]);

    // Mistake 3: an event recorded behind a pinned copy, queried as if it had completed.
    let event = result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
    // SAFETY: `pinned` and `event` outlive the synchronisation below.
    unsafe {
        result::memcpy_dtoh_async(pinned.slice(), ptr, raw)?;
        result::event::record(event, raw)?;
    }
    let before = unsafe { result::event::query(event) };
    stream.synchronize()?;
    let after = unsafe { result::event::query(event) };
    let name = |r: Result<(), DriverError>| match r {
        Ok(()) => "ready".to_owned(),
        Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => "not_ready".to_owned(),
        Err(e) => format!("error {e:?}"),
    };
    println!("event_before_sync: {}", name(before));
    println!("event_after_sync: {}", name(after));
    // SAFETY: no work is queued behind the event any more.
    unsafe { result::event::destroy(event) }?;
    drop(guard);
    Ok(())
}

#[test]
fn a_pinned_upload_source_rewritten_before_synchronising_shows_only_when_deferred() {
    if !standin() {
        return;
    }
    assert_eq!(
        seen("eager", "pinned_upload_rewritten"),
        "1",
        "eager copies at the call"
    );
    assert_eq!(
        seen("deferred", "pinned_upload_rewritten"),
        "7",
        "the deferred copy reads the pinned buffer when it runs"
    );
}

#[test]
fn a_pinned_download_read_before_synchronising_shows_only_when_deferred() {
    if !standin() {
        return;
    }
    assert_eq!(seen("eager", "pinned_download_read_early"), "5");
    assert_eq!(
        seen("deferred", "pinned_download_read_early"),
        "0",
        "before a synchronisation the pinned destination still holds what it held"
    );
    assert_eq!(seen("deferred", "pinned_download_read_after_sync"), "5");
}

#[test]
fn pageable_copies_complete_their_host_side_in_the_call_in_both_modes() {
    if !standin() {
        return;
    }
    for mode in ["eager", "deferred"] {
        assert_eq!(seen(mode, "pageable_upload_rewritten"), "3", "{mode}");
        assert_eq!(seen(mode, "pageable_download_read_early"), "5", "{mode}");
    }
}

#[test]
fn an_event_behind_queued_work_is_not_ready_until_it_ran() {
    if !standin() {
        return;
    }
    assert_eq!(seen("eager", "event_before_sync"), "ready");
    assert_eq!(seen("deferred", "event_before_sync"), "not_ready");
    assert_eq!(seen("deferred", "event_after_sync"), "ready");
}

/// cuInit's answer, for `an_unknown_mode_is_refused_at_start_up`.
#[test]
#[ignore = "the child process of the cuda_standin_deferred tests (runs only with their variable)"]
fn init_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    println!("init: {:?}", result::init());
}

#[test]
fn an_unknown_mode_is_refused_at_start_up() {
    if !standin() {
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args(["--exact", "cuda_standin_deferred::init_child"])
        .args(["--include-ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, "1")
        .env("DITTO_CUDA_STANDIN_MODE", "lazy")
        .output()
        .expect("cannot start the child process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("CUDA_ERROR_INVALID_VALUE")
            && stdout
                .contains("DITTO_CUDA_STANDIN_MODE=lazy names no mode; expected eager or deferred"),
        "{stdout}"
    );
}

/// A copy from a host buffer that was already freed, for
/// `under_address_sanitizer_a_copy_from_freed_host_memory_is_reported`.
#[test]
#[ignore = "the child process of the cuda_standin_deferred tests (runs only with their variable)"]
fn freed_upload_child() {
    if std::env::var_os(CHILD_ENV).is_none() || !standin() {
        return;
    }
    let stream = cuda::default_stream(0).unwrap();
    let device = stream.alloc_zeros::<f32>(N).unwrap();
    let (ptr, _sync) = device.device_ptr(&stream);
    let freed = vec![1.0f32; N];
    let dangling = freed.as_ptr();
    drop(freed);
    // SAFETY: deliberately not: `dangling` points into freed heap memory.
    let code = unsafe { sys::cuMemcpyHtoD_v2(ptr, dangling.cast(), N * 4) };
    println!("copied from freed host memory without a report: {code:?}");
}

/// With the AddressSanitizer build of the stand-in (DITTO_CUDA_STANDIN_SANITIZE=address,
/// the runtime in LD_PRELOAD), a copy reading freed host heap memory ends the process
/// with ASan's report; the plain stand-in copies whatever the heap holds. Skips unless
/// the ASan runtime is loaded.
#[test]
fn under_address_sanitizer_a_copy_from_freed_host_memory_is_reported() {
    if !standin() {
        return;
    }
    if !std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("libasan")) {
        println!("skipping: the AddressSanitizer runtime is not loaded (LD_PRELOAD)");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args(["--exact", "cuda_standin_deferred::freed_upload_child"])
        .args(["--include-ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("cannot start the child process");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("AddressSanitizer: heap-use-after-free"),
        "expected ASan's report ({}):\n{}\n{stderr}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
}

/// One byte read back from `ptr` with a synchronous copy (issued to the legacy stream,
/// so it waits for no non-blocking stream).
fn first_byte(ptr: u64) -> Result<u8, DriverError> {
    let mut back = [0u8; N];
    // SAFETY: `ptr` holds N bytes.
    unsafe { result::memcpy_dtoh_sync(&mut back, ptr) }?;
    Ok(back[0])
}

/// The racing-streams program: stream A writes `x`, and work on stream B (or the legacy
/// stream) reads it into `y`, ordered by the program or not. Raw driver calls, so that
/// no library inserts the event waits the program leaves out.
#[test]
#[ignore = "the child process of the cuda_standin_deferred tests (runs only with their variable)"]
fn racing_streams_child() -> Result<(), DriverError> {
    use result::stream::{self as stream, StreamKind};
    if std::env::var_os(CHILD_ENV).is_none() || !standin() {
        return Ok(());
    }
    cuda::default_stream(0).unwrap(); // makes device 0's context current
    let a = stream::create(StreamKind::NonBlocking)?;
    let b = stream::create(StreamKind::NonBlocking)?;
    let blocking = stream::create(StreamKind::Default)?;
    let legacy = stream::null();
    let event = result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
    let wait = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
    // SAFETY: two fresh allocations of N bytes, freed at the end; every queued use of them
    // completes at a context synchronisation before they are reused or freed.
    unsafe {
        let x = result::malloc_sync(N)?;
        let y = result::malloc_sync(N)?;
        // Zeroes both, after whatever is still queued on any stream.
        let fresh = || -> Result<(), DriverError> {
            result::ctx::synchronize()?;
            result::memset_d8_sync(x, 0, N)?;
            result::memset_d8_sync(y, 0, N)?;
            result::ctx::synchronize()
        };

        // Mistake 4: B copies what A writes without waiting for it; the host waits for B.
        fresh()?;
        result::memset_d8_async(x, 7, N, a)?;
        result::memcpy_dtod_async(y, x, N, b)?;
        stream::synchronize(b)?;
        println!("unordered_then_stream_sync: {}", first_byte(y)?);

        // The same mistake; the host waits for the whole context.
        fresh()?;
        result::memset_d8_async(x, 7, N, a)?;
        result::memcpy_dtod_async(y, x, N, b)?;
        result::ctx::synchronize()?;
        println!("unordered_then_context_sync: {}", first_byte(y)?);

        // Done right: B waits for an event recorded on A behind the write.
        fresh()?;
        result::memset_d8_async(x, 7, N, a)?;
        result::event::record(event, a)?;
        stream::wait_event(b, event, wait)?;
        result::memcpy_dtod_async(y, x, N, b)?;
        stream::synchronize(b)?;
        println!("ordered_by_event: {}", first_byte(y)?);

        // Waiting for B does not run A: an event behind A's work is still pending, and
        // B, with nothing queued, is idle while A is not.
        fresh()?;
        result::memset_d8_async(x, 7, N, a)?;
        result::event::record(event, a)?;
        result::memset_d8_async(y, 1, N, b)?;
        stream::synchronize(b)?;
        println!(
            "other_stream_event_after_sync: {}",
            ready(result::event::query(event))
        );
        println!(
            "idle_stream_query: {}",
            ready(sys::cuStreamQuery(b).result())
        );
        println!(
            "busy_stream_query: {}",
            ready(sys::cuStreamQuery(a).result())
        );

        // Waiting for an event on A runs A's work up to it, not B's issued before it.
        fresh()?;
        result::memset_d8_async(y, 1, N, b)?;
        result::memset_d8_async(x, 7, N, a)?;
        result::event::record(event, a)?;
        result::event::synchronize(event)?;
        println!(
            "other_stream_after_event_sync: {}",
            ready(sys::cuStreamQuery(b).result())
        );

        // Done right without an event: the legacy stream waits for a blocking stream.
        fresh()?;
        result::memset_d8_async(x, 7, N, blocking)?;
        result::memcpy_dtod_async(y, x, N, legacy)?;
        stream::synchronize(legacy)?;
        println!("legacy_after_blocking: {}", first_byte(y)?);

        // Mistake 5: the legacy stream does not wait for a non-blocking stream.
        fresh()?;
        result::memset_d8_async(x, 7, N, a)?;
        result::memcpy_dtod_async(y, x, N, legacy)?;
        stream::synchronize(legacy)?;
        println!("legacy_after_non_blocking: {}", first_byte(y)?);

        fresh()?;
        result::event::destroy(event)?;
        for s in [a, b, blocking] {
            stream::destroy(s)?;
        }
        result::free_sync(x)?;
        result::free_sync(y)?;
    }
    Ok(())
}

/// "ready" or "not_ready" for an event or stream query's answer.
fn ready(r: Result<(), DriverError>) -> String {
    match r {
        Ok(()) => "ready".to_owned(),
        Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => "not_ready".to_owned(),
        Err(e) => format!("error {e:?}"),
    }
}

#[test]
fn a_copy_on_one_stream_of_what_another_writes_without_an_event_wait_shows_only_when_deferred() {
    if !standin() {
        return;
    }
    for key in ["unordered_then_stream_sync", "unordered_then_context_sync"] {
        assert_eq!(
            seen_streams("eager", key),
            "7",
            "eager runs each call at once: {key}"
        );
        assert_eq!(
            seen_streams("deferred", key),
            "0",
            "deferred: B's copy runs before A's write it does not wait for: {key}"
        );
    }
}

#[test]
fn a_copy_ordered_by_cu_stream_wait_event_is_right_in_both_modes() {
    if !standin() {
        return;
    }
    for mode in ["eager", "deferred"] {
        assert_eq!(seen_streams(mode, "ordered_by_event"), "7", "{mode}");
    }
}

#[test]
fn synchronising_one_stream_leaves_another_streams_work_queued() {
    if !standin() {
        return;
    }
    for (key, eager, deferred) in [
        ("other_stream_event_after_sync", "ready", "not_ready"),
        ("idle_stream_query", "ready", "ready"),
        ("busy_stream_query", "ready", "not_ready"),
        ("other_stream_after_event_sync", "ready", "not_ready"),
    ] {
        assert_eq!(seen_streams("eager", key), eager, "eager: {key}");
        assert_eq!(seen_streams("deferred", key), deferred, "deferred: {key}");
    }
}

#[test]
fn the_legacy_stream_waits_for_blocking_streams_but_not_for_non_blocking_ones() {
    if !standin() {
        return;
    }
    assert_eq!(seen_streams("eager", "legacy_after_blocking"), "7");
    assert_eq!(seen_streams("deferred", "legacy_after_blocking"), "7");
    assert_eq!(seen_streams("eager", "legacy_after_non_blocking"), "7");
    assert_eq!(
        seen_streams("deferred", "legacy_after_non_blocking"),
        "0",
        "a non-blocking stream's write is not ordered before the legacy stream's copy"
    );
}
