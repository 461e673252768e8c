//! # rendezvous_demo: the job token at work, one process per rank, on loopback
//!
//! Each process reads torchrun's variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
//! `MASTER_PORT`) and ditto's (`DITTO_JOB_ID`, `DITTO_RENDEZVOUS_SECRET`,
//! `DITTO_RENDEZVOUS_BIND`), derives the job token, and meets the others at the
//! rendezvous the NCCL backend uses (`distributed::rendezvous`), exchanging a greeting
//! instead of NCCL's id, so it runs without a GPU. Rank 0 prints the greeting it sent
//! and every connection it refused; the other ranks print what they received, or why
//! they were refused. `scripts/rendezvous_demo.sh` runs a 2-rank job while a process of
//! another job and an HTTP request knock on the same port:
//!
//! ```text
//! cargo build --release --example rendezvous_demo && bash scripts/rendezvous_demo.sh
//! ```
//!
//! Exit status: 0 the rank joined, 1 it was refused or the rendezvous failed, 2 bad
//! flags or launch variables.

use std::process::ExitCode;
use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use distributed::rendezvous::{JobToken, Rendezvous};
use distributed::{DistError, LaunchEnv};

/// One rank of a rendezvous-only job (see the file's documentation).
#[derive(Parser, Debug)]
#[command(name = "rendezvous_demo")]
struct Args {
    /// How long the ranks wait for each other, in seconds, 1..=600
    #[arg(long, value_name = "SECONDS", default_value_t = 20, value_parser = RangedU64ValueParser::<u64>::new().range(1..=600))]
    timeout: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let timeout = Duration::from_secs(args.timeout);
    let (env, token) = match LaunchEnv::from_env().and_then(|env| {
        let token = JobToken::from_env(&env)?;
        Ok((env, token))
    }) {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&env, &token, timeout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("rank {}: refused or failed: {e}", env.rank);
            ExitCode::from(1)
        }
    }
}

fn run(env: &LaunchEnv, token: &JobToken, timeout: Duration) -> Result<(), DistError> {
    let mut rendezvous = Rendezvous::join(env, token, timeout)?;
    if env.rank == 0 {
        let greeting = format!("hello from rank 0 of job {:?}", token.job_id());
        println!(
            "rank 0: listening on {} for {} rank(s) of job {:?}",
            rendezvous.store().address(),
            env.world_size - 1,
            token.job_id()
        );
        let formed = rendezvous.exchange(Some(greeting.as_bytes())).map(drop);
        let refusals = rendezvous.take_refusals();
        for refusal in &refusals {
            println!("rank 0: {refusal}");
        }
        formed?;
        println!(
            "rank 0: the job formed ({} rank(s) joined, {} connection(s) refused)",
            env.world_size,
            refusals.len()
        );
    } else {
        let payload = rendezvous.exchange(None)?;
        println!(
            "rank {}: joined; rank 0 says {:?}",
            env.rank,
            String::from_utf8_lossy(&payload)
        );
    }
    Ok(())
}
