//! Every op with a nondeterministic fast path, described once, as data: the ops consult
//! their entry to pick a path ([`FastPath::choose`]) and the documentation's table is
//! generated from the same entries ([`markdown_table`]), so the two cannot drift.
//!
//! A crate above tensor-core that adds such an op (nn-mini's data loader, or a user's
//! custom op) declares its own `static` [`FastPath`] and calls `choose` the same way.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{check_nondeterministic, deterministic_mode, Algorithm, Chosen, DeterministicMode};
use crate::{Device, Result};

/// One op's nondeterministic fast path on one kind of device, and its deterministic
/// alternative.
#[derive(Debug)]
pub struct FastPath {
    /// The op as a user calls it (`"index_add"`); also the key of the once-per-op warning.
    pub op: &'static str,
    /// The devices this entry covers, for the table (`"CPU"`, `"CUDA"`).
    pub devices: &'static str,
    /// What the fast path does and why it is nondeterministic.
    pub fast: &'static str,
    /// What the deterministic path does and what it guarantees.
    pub deterministic: &'static str,
    /// When `Algorithm::Auto` takes the fast path in `Off` mode (`None`: never; the
    /// fast path runs only when asked for, like the loader's `in_order(false)`).
    pub auto_fast_when: Option<&'static str>,
    /// How a caller gets the deterministic path; the error and warning name it.
    pub alternative: &'static str,
    /// How many times [`FastPath::choose`] picked the fast path in this process
    /// (`AtomicU64::new(0)` in a declaration): lets a program or a test see which path
    /// its ops took. Read it with [`FastPath::fast_runs`].
    pub fast_runs: AtomicU64,
}

impl FastPath {
    /// The path to run for a caller's `algorithm` under the current mode (see the table
    /// in [`crate::determinism`]). `fast_pays` is the op's own judgement that the fast
    /// path would be faster for this call (enough work, more than one thread); it only
    /// matters for `Auto` in `Off` mode. An explicit `Fast` is checked with
    /// [`check_nondeterministic`]: it warns in `Warn` mode and fails in `Error` mode.
    pub fn choose(
        &'static self,
        algorithm: Algorithm,
        device: Device,
        fast_pays: bool,
    ) -> Result<Chosen> {
        let chosen = self.pick(algorithm, device, fast_pays)?;
        if chosen == Chosen::Fast {
            self.fast_runs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(chosen)
    }

    /// How many times this op has taken its fast path in this process.
    #[must_use]
    pub fn fast_runs(&self) -> u64 {
        self.fast_runs.load(Ordering::Relaxed)
    }

    fn pick(
        &'static self,
        algorithm: Algorithm,
        device: Device,
        fast_pays: bool,
    ) -> Result<Chosen> {
        match algorithm {
            Algorithm::Deterministic => Ok(Chosen::Deterministic),
            Algorithm::Auto => {
                let off = deterministic_mode() == DeterministicMode::Off;
                if off && fast_pays && self.auto_fast_when.is_some() {
                    Ok(Chosen::Fast)
                } else {
                    Ok(Chosen::Deterministic)
                }
            }
            Algorithm::Fast => {
                check_nondeterministic(self.op, device, self.alternative)?;
                Ok(Chosen::Fast)
            }
        }
    }

    /// What each mode does with this op, as the three cells of its table row.
    #[must_use]
    pub fn mode_cells(&self) -> [String; 3] {
        let off = match self.auto_fast_when {
            Some(when) => format!("fast path {when}; deterministic otherwise"),
            None => "deterministic unless the fast path is asked for".to_string(),
        };
        let warn = "deterministic; an explicit fast-path request runs it and warns once".into();
        let error = "deterministic; an explicit fast-path request fails with \
                     `NondeterministicOp`"
            .into();
        [off, warn, error]
    }
}

/// `index_add` on the CPU.
pub static INDEX_ADD_CPU: FastPath = FastPath {
    op: "index_add",
    devices: "CPU",
    fast: "workers claim chunks of source rows as they get to them, add them into private \
           copies of the targets and merge those into the shared rows under per-row locks \
           as they finish (with many targets: straight into the shared rows under the \
           locks); arrival order decides the rounding",
    deterministic:
        "the fixed grouped order of `ops::accumulate::grouped` (1024-position groups summed \
                    in index order, group sums added in order), computed through per-group \
                    buffers (few targets), per-thread row ranges streaming the source, or \
                    row owners; the same bits for every thread count, and CUDA's",
    auto_fast_when: Some(
        "with 2+ rayon threads, 32768+ source elements and at least 4 per target element \
         and thread",
    ),
    alternative: "Algorithm::Deterministic (or Auto)",
    fast_runs: AtomicU64::new(0),
};

/// `index_add` on a CUDA device.
pub static INDEX_ADD_CUDA: FastPath = FastPath {
    op: "index_add",
    devices: "CUDA",
    fast: "one thread per source element, `atomicAdd` into the target (arrival order)",
    deterministic: "one thread per target element walks its contributions (sorted on the \
                    host) in the CPU's grouped order: bit-identical to the CPU's \
                    deterministic path, for every launch configuration",
    auto_fast_when: Some(
        "always, except for indices placed with their sort \
                          (`CheckedIndex`, as `Embedding` does), where the deterministic \
                          path needs no copy to the host and costs no more",
    ),
    alternative: "Algorithm::Deterministic (or Auto)",
    fast_runs: AtomicU64::new(0),
};

/// `scatter_add` on a CUDA device.
pub static SCATTER_ADD_CUDA: FastPath = FastPath {
    op: "scatter_add",
    devices: "CUDA",
    fast: "one thread per index element, `atomicAdd` into the target (arrival order)",
    deterministic: "one thread per target element sums its contributions in index order \
                    (positions sorted on the host); bit-identical to the CPU, for every \
                    launch configuration",
    auto_fast_when: Some("always"),
    alternative: "Algorithm::Deterministic (or Auto)",
    fast_runs: AtomicU64::new(0),
};

/// `sum` / `mean` (`sum_with`, `mean_with`) on a CUDA device.
pub static SUM_CUDA: FastPath = FastPath {
    op: "sum",
    devices: "CUDA",
    fast: "one pass: each GPU thread sums about 4096 elements (a grid-stride walk) in f64 \
           and `atomicAdd`s its sum into its lane's f64 total (arrival order), rounded once",
    deterministic: "block sums, then each lane's blocks added left to right: the CPU's \
                    documented order, bit-identical to it",
    auto_fast_when: Some("for lanes of 2^26+ elements (measured faster on an H100 only there)"),
    alternative: "Algorithm::Deterministic (or Auto)",
    fast_runs: AtomicU64::new(0),
};

/// tensor-core's entries, in the order of the documentation's table. (`scatter_add` on
/// the CPU has no fast path: see `benches/RESULTS.md`.)
pub static TENSOR_OPS: [&FastPath; 4] = [
    &INDEX_ADD_CPU,
    &INDEX_ADD_CUDA,
    &SCATTER_ADD_CUDA,
    &SUM_CUDA,
];

/// The markdown table of `entries`: one row per op and device, with what its fast and
/// deterministic paths do and what each mode does with `Algorithm::Auto`.
#[must_use]
pub fn markdown_table(entries: &[&FastPath]) -> String {
    let mut out = String::from(
        "| op | device | fast path | deterministic path | Off | Warn | Error |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for e in entries {
        let [off, warn, error] = e.mode_cells();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {off} | {warn} | {error} |\n",
            e.op, e.devices, e.fast, e.deterministic
        ));
    }
    out
}
