//! Comparing two traces: the first op where they diverge, and why.
//!
//! Both traces are read per stream and walked in sequence order, side by side. In each
//! stream the walk stops at the first of:
//! * **a different op or call site** at the same position (the runs took different code
//!   paths; everything after is incomparable), or one trace ending first;
//! * **a different RNG reservation** (another seed, offset or block count);
//! * **an output that differs while every input matched**: the op itself computed
//!   differently. This is the root cause the audit exists to find.
//!
//! Ops whose inputs already differ are expected to differ and are passed over (two
//! ranks of a data-parallel run see different data from the first op on), but the first
//! of them is kept: if nothing else explains the divergence, the difference entered the
//! stream from outside the recorded ops (another stream, such as a loader batch, or code
//! that touched raw buffers).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::path::Path;

use super::trace::{Record, TensorDigest};
use crate::{Result, TensorError};

/// A parsed trace: each stream's records in sequence order.
#[derive(Debug, Default)]
pub struct Trace {
    /// Records by stream name, each list sorted by `seq`.
    pub streams: BTreeMap<String, Vec<Record>>,
}

impl Trace {
    /// Parses a trace's text (comment lines skipped). Errors name the line.
    pub fn parse(text: &str, name: &str) -> Result<Trace> {
        let mut streams: BTreeMap<String, Vec<Record>> = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let record: Record = line.parse().map_err(|message| TensorError::Audit {
                message: format!("{name}:{}: {message}", number + 1),
            })?;
            streams
                .entry(record.stream.clone())
                .or_default()
                .push(record);
        }
        for records in streams.values_mut() {
            records.sort_by_key(|r| r.seq);
        }
        Ok(Trace { streams })
    }

    /// Reads and parses the trace file at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Trace> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| TensorError::Audit {
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        Trace::parse(&text, &path.display().to_string())
    }

    /// Number of records.
    #[must_use]
    pub fn len(&self) -> usize {
        self.streams.values().map(Vec::len).sum()
    }

    /// True when the trace holds no record.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a stream's records stop agreeing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Divergence {
    /// Same op, same inputs, different output: the op computed differently.
    Output,
    /// A random op reserved a different stretch of its generator.
    Rng,
    /// The inputs differ and no earlier record of the stream explains it.
    UnexplainedInputs,
    /// A different op or call site at this position: the runs took different paths.
    Path,
    /// One trace's stream ends here while the other's goes on.
    Ended,
}

/// The first divergence of one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The stream.
    pub stream: String,
    /// What kind of divergence.
    pub kind: Divergence,
    /// The record in the first trace (`None` when that trace ended).
    pub a: Option<Record>,
    /// The record in the second trace.
    pub b: Option<Record>,
    /// For a root cause, the first earlier record whose inputs already differed.
    pub earlier_inputs: Option<u64>,
}

/// The result of [`diff`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffReport {
    /// Records compared (pairs).
    pub compared: usize,
    /// Streams present in only one trace: (name, records, in the first trace?). Not a
    /// divergence: work one run did ahead of the other (a data loader with workers
    /// prefetches batches that a loader without them never loads before the end).
    pub lone_streams: Vec<(String, usize, bool)>,
    /// The first divergence of each stream that has one: `main` first, then by name.
    pub findings: Vec<Finding>,
}

impl DiffReport {
    /// True when every stream both traces hold agrees record for record, and they hold
    /// at least one stream in common (or are both empty).
    #[must_use]
    pub fn identical(&self) -> bool {
        let comparable = self.compared > 0 || self.lone_streams.is_empty();
        self.findings.is_empty() && comparable
    }
}

/// Compares two traces stream by stream (see the module docs).
#[must_use]
pub fn diff(a: &Trace, b: &Trace) -> DiffReport {
    let mut report = DiffReport::default();
    let names: BTreeSet<&String> = a.streams.keys().chain(b.streams.keys()).collect();
    let mut names: Vec<&String> = names.into_iter().collect();
    names.sort_by_key(|n| (n.as_str() != "main", n.as_str()));
    for name in names {
        match (a.streams.get(name), b.streams.get(name)) {
            (Some(ra), Some(rb)) => {
                let (compared, finding) = diff_stream(name, ra, rb);
                report.compared += compared;
                report.findings.extend(finding);
            }
            (Some(ra), None) => report.lone_streams.push((name.clone(), ra.len(), true)),
            (None, Some(rb)) => report.lone_streams.push((name.clone(), rb.len(), false)),
            (None, None) => {}
        }
    }
    report
}

fn same_inputs(a: &[TensorDigest], b: &[TensorDigest]) -> bool {
    a == b
}

/// The same stretch of the same stream: seed, offset and blocks. The generator's device
/// is informational like the record's (a CPU run and a CUDA run reserve alike).
fn same_reservation(a: &Record, b: &Record) -> bool {
    let stretch = |r: &Record| r.rng.map(|g| (g.seed, g.offset, g.blocks));
    stretch(a) == stretch(b)
}

/// Walks one stream of both traces; returns the pairs compared and the first finding.
fn diff_stream(stream: &str, a: &[Record], b: &[Record]) -> (usize, Option<Finding>) {
    let mut first_input_difference: Option<(&Record, &Record)> = None;
    let finding = |kind, ra: Option<&Record>, rb: Option<&Record>, earlier: Option<u64>| Finding {
        stream: stream.to_string(),
        kind,
        a: ra.cloned(),
        b: rb.cloned(),
        earlier_inputs: earlier,
    };
    for i in 0..a.len().max(b.len()) {
        let (ra, rb) = match (a.get(i), b.get(i)) {
            (Some(ra), Some(rb)) => (ra, rb),
            (ra, rb) => return (i, Some(finding(Divergence::Ended, ra, rb, None))),
        };
        if ra.op != rb.op || ra.location != rb.location || ra.seq != rb.seq {
            return (
                i + 1,
                Some(finding(Divergence::Path, Some(ra), Some(rb), None)),
            );
        }
        let earlier = first_input_difference.map(|(x, _)| x.seq);
        if !same_reservation(ra, rb) {
            return (
                i + 1,
                Some(finding(Divergence::Rng, Some(ra), Some(rb), earlier)),
            );
        }
        if same_inputs(&ra.inputs, &rb.inputs) {
            if ra.output != rb.output {
                return (
                    i + 1,
                    Some(finding(Divergence::Output, Some(ra), Some(rb), earlier)),
                );
            }
        } else if first_input_difference.is_none() {
            first_input_difference = Some((ra, rb));
        }
    }
    let compared = a.len();
    let unexplained = first_input_difference
        .map(|(ra, rb)| finding(Divergence::UnexplainedInputs, Some(ra), Some(rb), None));
    (compared, unexplained)
}

fn digests(list: &[TensorDigest]) -> String {
    if list.is_empty() {
        return "-".into();
    }
    list.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("  ")
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = |r: &Record| {
            format!(
                "{} (seq {} of stream {}) at {}",
                r.op, r.seq, r.stream, r.location
            )
        };
        match (&self.kind, &self.a, &self.b) {
            (Divergence::Output, Some(a), Some(b)) => {
                writeln!(f, "first divergent op: {}", head(a))?;
                writeln!(f, "  inputs match:   {}", digests(&a.inputs))?;
                writeln!(
                    f,
                    "  output a:       {}  ({})",
                    a.output.as_ref().map_or("-".into(), ToString::to_string),
                    a.device
                )?;
                writeln!(
                    f,
                    "  output b:       {}  ({})",
                    b.output.as_ref().map_or("-".into(), ToString::to_string),
                    b.device
                )?;
                writeln!(f, "  this op computed a different result from identical inputs: it is where the runs diverge")?;
            }
            (Divergence::Rng, Some(a), Some(b)) => {
                let rng = |r: &Record| {
                    r.rng.map_or("none".into(), |g| {
                        format!(
                            "device {} seed {} offset {} blocks {}",
                            g.device, g.seed, g.offset, g.blocks
                        )
                    })
                };
                writeln!(f, "first divergent random op: {}", head(a))?;
                writeln!(f, "  reservation a:  {}", rng(a))?;
                writeln!(f, "  reservation b:  {}", rng(b))?;
            }
            (Divergence::UnexplainedInputs, Some(a), Some(b)) => {
                writeln!(f, "first op with different inputs: {}", head(a))?;
                writeln!(f, "  inputs a:       {}", digests(&a.inputs))?;
                writeln!(f, "  inputs b:       {}", digests(&b.inputs))?;
                writeln!(f, "  no earlier record of this stream differs: the difference came from outside the recorded ops (another stream, or raw buffer access)")?;
            }
            (Divergence::Path, Some(a), Some(b)) => {
                writeln!(
                    f,
                    "the runs took different paths at seq {} of stream {}:",
                    a.seq, a.stream
                )?;
                writeln!(f, "  a: {} at {}", a.op, a.location)?;
                writeln!(f, "  b: {} at {}", b.op, b.location)?;
            }
            (_, a, b) => {
                let (present, which) = if a.is_some() { (a, "b") } else { (b, "a") };
                let r = present.as_ref().expect("one side is present");
                writeln!(
                    f,
                    "trace {which} ends in stream {} before {}",
                    r.stream,
                    head(r)
                )?;
            }
        }
        if let Some(seq) = self.earlier_inputs {
            writeln!(f, "  (inputs had already differed from seq {seq} of this stream, without a recorded cause)")?;
        }
        Ok(())
    }
}

impl fmt::Display for DiffReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        for (name, count, in_a) in &self.lone_streams {
            let (has, lacks) = if *in_a { ("a", "b") } else { ("b", "a") };
            writeln!(
                out,
                "note: stream {name} ({count} records) is in trace {has} only, not in {lacks} \
                 (work one run did ahead of the other, such as a prefetched batch)"
            )?;
        }
        for finding in &self.findings {
            write!(out, "{finding}")?;
        }
        if self.compared == 0 && !self.lone_streams.is_empty() {
            writeln!(
                out,
                "the traces have no stream in common: nothing to compare"
            )?;
        }
        if self.identical() {
            writeln!(
                out,
                "identical: {} records compared, no divergence",
                self.compared
            )?;
        }
        f.write_str(&out)
    }
}
