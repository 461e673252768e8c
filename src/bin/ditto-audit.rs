//! `ditto-audit`: compares two audit traces and names the op where the runs diverged.
//!
//! ```text
//! DITTO_AUDIT=a.trace cargo run --release --example my_training
//! DITTO_AUDIT=b.trace cargo run --release --example my_training   # another thread count,
//!                                                                  # rank, or device
//! cargo run --release --bin ditto-audit -- diff a.trace b.trace
//! ```
//!
//! The report names, per stream, the first op whose output differs although its inputs
//! matched (op, sequence number, call site, both output hashes), or the first random op
//! whose generator reservation differs, or where the runs took different code paths.
//! See `docs/determinism.md` for reading it with two ranks or a CPU and a CUDA run.
//!
//! Exit status: 0 when the traces agree, 1 when they diverge, 2 for a usage or read
//! error (so scripts and CI can use it as a check).

use std::process::ExitCode;

use tensor_core::audit::diff::{diff, Trace};

const USAGE: &str = "usage: ditto-audit diff <a.trace> <b.trace>\n\
    \n\
    Prints the first op whose output differs while its inputs matched (with both hashes\n\
    and the call site), or the first random op whose reservation differs.\n\
    Exit status: 0 identical, 1 diverged, 2 usage or read error.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [command, a, b] if command == "diff" => run_diff(a, b),
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run_diff(a: &str, b: &str) -> ExitCode {
    let read = |path: &str| {
        Trace::read(path).map_err(|e| {
            eprintln!("ditto-audit: {e}");
            ExitCode::from(2)
        })
    };
    let (ta, tb) = match (read(a), read(b)) {
        (Ok(ta), Ok(tb)) => (ta, tb),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    println!(
        "a: {a} ({} records)\nb: {b} ({} records)",
        ta.len(),
        tb.len()
    );
    let report = diff(&ta, &tb);
    print!("{report}");
    if report.identical() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
