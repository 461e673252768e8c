//! The worker threads of a [`DataLoader`](super::DataLoader): real `std::thread`s that
//! load whole batches ahead of the training loop.
//!
//! Jobs go out on one shared queue (any idle worker takes the next one) and results
//! come back on one channel, tagged with a ticket. Arrival order is whatever the
//! scheduler makes it; the loader puts results back in ticket order before delivering
//! (see `loader.rs`), so *when* and *where* a batch was loaded never shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rng_gen::Key;

use super::batch::{load_batch_guarded, Batch};
use super::Dataset;
use crate::{NnError, Result};

/// One batch to load.
pub(crate) struct Job {
    /// The pipeline generation that asked for it; stale jobs are skipped.
    pub generation: u64,
    /// Its place in delivery order within the generation.
    pub ticket: u64,
    pub key: Key,
    pub epoch: u64,
    pub batch: u64,
    pub indices: Vec<usize>,
}

/// A loaded (or failed) batch.
pub(crate) struct Done {
    pub generation: u64,
    pub ticket: u64,
    pub result: Result<Batch>,
}

/// The threads and the two channels.
pub(crate) struct WorkerPool {
    jobs: Option<Sender<Job>>,
    results: Receiver<Done>,
    /// The generation currently wanted; workers skip jobs of older ones (after a
    /// `set_state` or an error) instead of loading batches nobody will take.
    live_generation: Arc<AtomicU64>,
    handles: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Starts `workers` threads over `dataset`.
    pub fn spawn(workers: usize, dataset: Arc<dyn Dataset>) -> Result<Self> {
        let (job_tx, job_rx) = channel::<Job>();
        let (done_tx, done_rx) = channel::<Done>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let live_generation = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::with_capacity(workers);
        for worker in 0..workers {
            let (jobs, done, dataset, live) = (
                Arc::clone(&job_rx),
                done_tx.clone(),
                Arc::clone(&dataset),
                Arc::clone(&live_generation),
            );
            let handle = std::thread::Builder::new()
                .name(format!("ditto-loader-{worker}"))
                .spawn(move || worker_loop(worker, &jobs, &done, &*dataset, &live))
                .map_err(|e| NnError::WorkersUnavailable {
                    reason: format!("could not spawn worker {worker}: {e}"),
                })?;
            handles.push(handle);
        }
        Ok(WorkerPool {
            jobs: Some(job_tx),
            results: done_rx,
            live_generation,
            handles,
        })
    }

    /// Marks `generation` as the one wanted from now on.
    pub fn set_generation(&self, generation: u64) {
        self.live_generation.store(generation, Ordering::Release);
    }

    /// Queues a job.
    pub fn submit(&self, job: Job) -> Result<()> {
        self.jobs
            .as_ref()
            .and_then(|tx| tx.send(job).ok())
            .ok_or_else(|| NnError::WorkersUnavailable {
                reason: "all worker threads have exited".into(),
            })
    }

    /// Waits for the next result, in arrival order.
    pub fn receive(&self) -> Result<Done> {
        self.results
            .recv()
            .map_err(|_| NnError::WorkersUnavailable {
                reason: "all worker threads have exited".into(),
            })
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // Closing the queue ends every worker's loop once it finishes its current job.
        self.live_generation.store(u64::MAX, Ordering::Release);
        self.jobs = None;
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

/// Takes jobs until the queue closes. A panic inside the dataset becomes an error for
/// that batch (see `load_batch_guarded`), so the loader reports it instead of waiting
/// forever for the ticket.
fn worker_loop(
    worker: usize,
    jobs: &Mutex<Receiver<Job>>,
    done: &Sender<Done>,
    dataset: &dyn Dataset,
    live: &AtomicU64,
) {
    loop {
        let job = {
            let queue = jobs.lock().unwrap_or_else(|p| p.into_inner());
            match queue.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        if job.generation != live.load(Ordering::Acquire) {
            continue;
        }
        let result = load_batch_guarded(
            dataset,
            Some(worker),
            job.key,
            job.epoch,
            job.batch,
            job.indices,
        );
        let reply = Done {
            generation: job.generation,
            ticket: job.ticket,
            result,
        };
        if done.send(reply).is_err() {
            return;
        }
    }
}
