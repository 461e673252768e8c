//! How a Gloo group forms: Gloo's own rendezvous (each rank's TCP address under a key)
//! answered from ditto's store through three C callbacks, and the address Gloo binds.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::net::UdpSocket;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use launch::rendezvous::Store;
use launch::{LaunchEnv, LaunchError};

use super::{Context, RawContext, ERROR_CAP};
use crate::{DistError, Result};

/// The store callbacks the shim calls (`DittoGlooStore` in `gloo/shim.cpp`).
#[repr(C)]
struct StoreCallbacks {
    store: *mut c_void,
    set: extern "C" fn(*mut c_void, *const c_char, *const c_char, usize) -> c_int,
    get: extern "C" fn(
        *mut c_void,
        *const c_char,
        *mut c_void,
        extern "C" fn(*mut c_void, *const c_char, usize),
    ) -> c_int,
    wait: extern "C" fn(*mut c_void, *const *const c_char, usize, i64) -> c_int,
}

extern "C" {
    fn ditto_gloo_connect(
        rank: c_int,
        size: c_int,
        hostname: *const c_char,
        iface: *const c_char,
        connect_ms: i64,
        timeout_ms: i64,
        store: *const StoreCallbacks,
        err: *mut c_char,
        cap: usize,
    ) -> *mut RawContext;
}

/// Gloo's rendezvous keys, answered from ditto's store under this job's prefix. A store
/// error is kept here (Gloo only learns that the call failed).
pub(super) struct StoreBridge<'a> {
    pub(super) store: &'a mut dyn Store,
    pub(super) prefix: String,
    pub(super) timeout: Duration,
    pub(super) error: Option<LaunchError>,
}

impl StoreBridge<'_> {
    /// Runs `body` on the bridge behind `ctx`, as a C return code.
    fn call(ctx: *mut c_void, body: impl FnOnce(&mut Self) -> launch::Result<()>) -> c_int {
        // SAFETY: `ctx` is the `&mut StoreBridge` that `connect` passed to the shim,
        // alive and not otherwise borrowed for the whole of `ditto_gloo_connect`.
        let bridge = unsafe { &mut *ctx.cast::<StoreBridge<'_>>() };
        match catch_unwind(AssertUnwindSafe(|| body(bridge))) {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => {
                bridge.error.get_or_insert(e);
                1
            }
            Err(_) => 1,
        }
    }

    fn key(&self, key: *const c_char) -> String {
        // SAFETY: the shim passes NUL-terminated key strings that live across the call.
        let key = unsafe { CStr::from_ptr(key) }.to_string_lossy();
        format!("{}{key}", self.prefix)
    }

    fn missing(&self, key: &str) -> LaunchError {
        LaunchError::Timeout {
            op: format!("Gloo's rendezvous (waiting for {key})"),
            missing: Vec::new(),
            timeout: self.timeout,
        }
    }
}

extern "C" fn bridge_set(
    ctx: *mut c_void,
    key: *const c_char,
    data: *const c_char,
    len: usize,
) -> c_int {
    StoreBridge::call(ctx, |b| {
        // SAFETY: the shim passes `len` readable bytes at `data` (a std::vector's).
        let value = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
        let key = b.key(key);
        b.store.set(&key, value)
    })
}

extern "C" fn bridge_get(
    ctx: *mut c_void,
    key: *const c_char,
    out: *mut c_void,
    fill: extern "C" fn(*mut c_void, *const c_char, usize),
) -> c_int {
    StoreBridge::call(ctx, |b| {
        let key = b.key(key);
        let value = b
            .store
            .get(&key, b.timeout)?
            .ok_or_else(|| b.missing(&key))?;
        fill(out, value.as_ptr().cast(), value.len());
        Ok(())
    })
}

extern "C" fn bridge_wait(
    ctx: *mut c_void,
    keys: *const *const c_char,
    count: usize,
    ms: i64,
) -> c_int {
    StoreBridge::call(ctx, |b| {
        // SAFETY: the shim passes `count` key pointers that live across the call.
        let names = unsafe { std::slice::from_raw_parts(keys, count) };
        let names: Vec<String> = names.iter().map(|&k| b.key(k)).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let timeout = Duration::from_millis(ms.max(0) as u64).min(b.timeout);
        match b.store.wait(&refs, timeout)? {
            true => Ok(()),
            false => Err(b.missing(&names.join(", "))),
        }
    })
}

/// Connects the full mesh through `bridge`, or says why not (the store's own error first).
pub(super) fn connect(
    rank: usize,
    world: usize,
    address: &str,
    iface: &str,
    connect: Duration,
    collective: Duration,
    bridge: &mut StoreBridge<'_>,
) -> Result<Context> {
    let c_string = |s: &str| {
        CString::new(s)
            .map_err(|_| DistError::invalid("gloo connect", format!("{s:?} contains a NUL byte")))
    };
    let (address, iface) = (c_string(address)?, c_string(iface)?);
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let callbacks = StoreCallbacks {
        store: (bridge as *mut StoreBridge<'_>).cast(),
        set: bridge_set,
        get: bridge_get,
        wait: bridge_wait,
    };
    let mut err = [0 as c_char; ERROR_CAP];
    let too_many = |_| {
        DistError::invalid(
            "gloo connect",
            format!("{world} ranks do not fit Gloo's int"),
        )
    };
    // SAFETY: every pointer is valid for the call; the shim keeps none of them.
    let raw = unsafe {
        ditto_gloo_connect(
            c_int::try_from(rank).map_err(too_many)?,
            c_int::try_from(world).map_err(too_many)?,
            address.as_ptr(),
            iface.as_ptr(),
            ms(connect),
            ms(collective),
            &callbacks,
            err.as_mut_ptr(),
            ERROR_CAP,
        )
    };
    if raw.is_null() {
        if let Some(e) = bridge.error.take() {
            return Err(e.into());
        }
        // SAFETY: the shim NUL-terminates its message within ERROR_CAP.
        let message = unsafe { CStr::from_ptr(err.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        return Err(DistError::Gloo {
            op: "connect",
            message,
        });
    }
    Ok(Context(raw))
}

/// The address of this host that traffic to `MASTER_ADDR` leaves from (a UDP "connect"
/// sends nothing; it only asks the kernel for the route). Gloo's own default, the
/// address of the host name, is often not routable (containers, network namespaces).
pub(super) fn local_address_towards(env: &LaunchEnv) -> Result<String> {
    let route = || -> std::io::Result<String> {
        let socket = UdpSocket::bind(("0.0.0.0", 0))?;
        socket.connect((env.master_addr.as_str(), env.master_port))?;
        Ok(socket.local_addr()?.ip().to_string())
    };
    route().map_err(|source| DistError::Io {
        context: format!(
            "finding this host's address towards MASTER_ADDR {}",
            env.master()
        ),
        source,
    })
}
