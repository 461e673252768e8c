//! `GlobalRows`: which rows of a global batch the next forward passes compute.
//!
//! A single process computes a batch in one forward pass; a data parallel rank computes
//! only some of its rows, and in ditto's world-size-invariant mode (outside portable
//! arithmetic) it computes them in several forwards, one per micro-shard. Random layers
//! must still give each row what
//! the single process gives it. So every rank, for every random layer, reserves the
//! layer's stretch of its generator for the *whole* global batch once (the generators of
//! all ranks stay in lockstep), and computes each of its rows at the row's global
//! element indices ([`rng_gen::dropout_rows`]). Layers learn the rows through
//! [`Module::set_global_rows`](crate::Module::set_global_rows).

use std::sync::Arc;

use crate::{NnError, Result};

/// The rows of a global batch that the next forward passes compute, in input order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalRows {
    batch: u64,
    batch_rows: u64,
    rows: Arc<[u64]>,
}

impl GlobalRows {
    /// Rows `rows` (each below `batch_rows`) of global batch number `batch`. `batch`
    /// numbers the global batches of a run (e.g. the step): a random layer reserves
    /// its stretch for the whole batch at its first forward of a new `batch` and
    /// reuses that reservation for the batch's later forwards.
    pub fn new(batch: u64, batch_rows: u64, rows: impl Into<Arc<[u64]>>) -> Result<Self> {
        let rows = rows.into();
        if let Some(&row) = rows.iter().find(|&&r| r >= batch_rows) {
            return Err(NnError::invalid(
                "GlobalRows::new",
                format!("row {row} is not in the global batch's 0..{batch_rows}"),
            ));
        }
        Ok(GlobalRows {
            batch,
            batch_rows,
            rows,
        })
    }

    /// Every row of a batch of `batch_rows`, in order: what a single process computes.
    pub fn all(batch: u64, batch_rows: u64) -> Self {
        GlobalRows {
            batch,
            batch_rows,
            rows: (0..batch_rows).collect(),
        }
    }

    /// The global batch's number.
    #[must_use]
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// Rows in the whole global batch.
    #[must_use]
    pub fn batch_rows(&self) -> u64 {
        self.batch_rows
    }

    /// The global index of each input row.
    #[must_use]
    pub fn rows(&self) -> &[u64] {
        &self.rows
    }
}
