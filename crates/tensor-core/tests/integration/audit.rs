//! The audit: what a trace records, per-stream numbering across threads, and what the
//! diff names. One process-wide trace, so the tests take turns through `LOCK`.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use tensor_core::audit::diff::{diff, Divergence, Trace};
use tensor_core::audit::{self, OpRecorder, Record, RngRecord};
use tensor_core::{DType, Device, Tensor};

static LOCK: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// An in-memory trace file.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with the audit recording into a buffer; returns the trace text. The test
/// harness names each test's thread after the test, so `f` runs in a stream named
/// `main`, as a program's main thread would.
fn record(f: impl FnOnce()) -> String {
    let buffer = Buffer::default();
    audit::start_writer(Box::new(buffer.clone())).unwrap();
    audit::stream(|| "main".into(), f);
    audit::stop().unwrap();
    let bytes = buffer.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

fn records(text: &str) -> Vec<Record> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.parse().unwrap())
        .collect()
}

fn t(values: &[f32]) -> Tensor {
    Tensor::from_slice(values, &[values.len()], Device::Cpu).unwrap()
}

#[test]
fn ops_record_their_call_site_inputs_and_output() {
    test_support::own_process!(ops_record_their_call_site_inputs_and_output);
    let _turn = serial();
    let (a, b) = (t(&[1.0, 2.0, 3.0]), t(&[0.5, 0.25, 0.125]));
    let mut line_of_add = 0;
    let text = record(|| {
        line_of_add = line!() + 1;
        let sum = a.add(&b).unwrap();
        let mut acc = sum.clone();
        acc.axpy_(2.0, &b).unwrap();
        // A view and a copy back: not ops. index_add_ on a strided tensor runs
        // index_add and copy_from_ inside: only the outer op records.
        let mut grid = Tensor::zeros(&[3, 2], DType::F32, Device::Cpu)
            .unwrap()
            .t()
            .unwrap();
        let index = Tensor::from_slice(&[1i64, 1], &[2], Device::Cpu).unwrap();
        let ones = Tensor::ones(&[2, 2], DType::F32, Device::Cpu).unwrap();
        grid.index_add_(1, &index, &ones, 1.0).unwrap();
        let _ = acc.sum_all().unwrap().to_scalar::<f32>().unwrap();
    });
    assert!(text.starts_with(audit::trace::HEADER));
    let recs = records(&text);
    let ops: Vec<&str> = recs.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(ops, ["add", "axpy_", "index_add_", "sum_all"]);
    assert!(recs
        .iter()
        .enumerate()
        .all(|(i, r)| r.stream != "main" || r.seq == i as u64));
    let add = &recs[0];
    assert!(
        add.location
            .starts_with(&format!("{}:{line_of_add}:", file!())),
        "{}",
        add.location
    );
    assert_eq!(add.device, "cpu");
    assert_eq!(add.inputs.len(), 2);
    assert_eq!(add.inputs[0].dims, vec![3]);
    assert_eq!(add.inputs[0].hash, audit::hash::tensor_hash(&a).unwrap());
    let sum_hash = add.output.as_ref().unwrap().hash;
    // axpy_ hashed its target before the update (the add's output) and after.
    let axpy = &recs[1];
    assert_eq!(axpy.inputs[0].hash, sum_hash);
    assert_ne!(axpy.output.as_ref().unwrap().hash, sum_hash);
    assert!(recs[2].location.starts_with(file!()));
}

#[test]
fn a_closed_audit_records_nothing_and_failed_ops_leave_no_line() {
    test_support::own_process!(a_closed_audit_records_nothing_and_failed_ops_leave_no_line);
    let _turn = serial();
    assert!(!audit::is_enabled());
    assert_eq!(audit::stop().unwrap(), 0);
    let text = record(|| {
        assert!(audit::is_enabled());
        let bad = t(&[1.0, 2.0]).add(&t(&[1.0, 2.0, 3.0]));
        assert!(bad.is_err());
        t(&[1.0]).exp().unwrap();
    });
    let recs = records(&text);
    assert_eq!(recs.len(), 1);
    // The failed op used sequence number 0.
    assert_eq!((recs[0].op.as_str(), recs[0].seq), ("exp", 1));
    assert!(!audit::is_enabled());
}

#[test]
fn streams_number_records_whatever_thread_runs_them() {
    test_support::own_process!(streams_number_records_whatever_thread_runs_them);
    let _turn = serial();
    let work = |batch: u64| {
        let x = t(&[batch as f32, 1.0]);
        x.mul(&x).unwrap().sum_all().unwrap();
    };
    let tail = || {
        t(&[1.0]).neg().unwrap();
    };
    // Batches 0..6 on the main thread, then on three threads in any order.
    let sequential = record(|| {
        for b in 0..6 {
            audit::stream(|| format!("batch/{b}"), || work(b));
        }
        tail();
    });
    let threaded = record(|| {
        // Unnamed threads record into their own streams, by thread id; inside a named
        // stream the thread does not matter.
        std::thread::scope(|s| {
            for first in 0..3 {
                s.spawn(move || {
                    for b in [5 - first, first] {
                        audit::stream(|| format!("batch/{b}"), || work(b));
                    }
                });
            }
        });
        tail();
    });
    let (a, b) = (
        Trace::parse(&sequential, "a").unwrap(),
        Trace::parse(&threaded, "b").unwrap(),
    );
    assert_eq!(a.streams.len(), 7);
    assert_eq!(
        a.streams["batch/3"]
            .iter()
            .map(|r| r.seq)
            .collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(a.streams["main"][0].op, "neg");
    let report = diff(&a, &b);
    assert!(report.identical(), "{report}");
    assert_eq!(report.compared, 13);
}

/// A downstream random op, recorded through the public API.
#[track_caller]
fn noise(n: usize, seed: u64, offset: u64) -> Tensor {
    let mut recorder = OpRecorder::begin("my_crate::noise", &[]);
    recorder.rng(RngRecord {
        device: Device::Cpu,
        seed,
        offset,
        blocks: n.div_ceil(4) as u64,
    });
    let out = Tensor::from_vec(vec![seed as f32; n], &[n], Device::Cpu).unwrap();
    recorder.finish(&out);
    out
}

/// A tiny "training run" with knobs for each kind of divergence.
fn run(seed: u64, scale: f64, data: f32, swap: bool) -> String {
    record(|| {
        let x = t(&[data, 2.0, 3.0, 4.0]);
        let w = noise(4, seed, 0);
        let h = x.mul(&w).unwrap();
        let h = if swap {
            h.exp().unwrap()
        } else {
            h.relu().unwrap()
        };
        let y = h.mul_scalar(scale).unwrap();
        y.sum_all().unwrap();
    })
}

#[test]
fn the_diff_names_the_first_divergent_op() {
    test_support::own_process!(the_diff_names_the_first_divergent_op);
    let _turn = serial();
    let parse = |text: &str| Trace::parse(text, "t").unwrap();
    let base = parse(&run(7, 0.5, 1.0, false));
    assert!(diff(&base, &parse(&run(7, 0.5, 1.0, false))).identical());

    // The scale differs: mul_scalar gets equal inputs and gives another output.
    let report = diff(&base, &parse(&run(7, 0.5000001, 1.0, false)));
    let f = &report.findings[0];
    assert_eq!(
        (
            f.kind.clone(),
            f.a.as_ref().unwrap().op.as_str(),
            f.a.as_ref().unwrap().seq
        ),
        (Divergence::Output, "mul_scalar", 3)
    );
    assert!(f.a.as_ref().unwrap().location.starts_with(file!()));
    let text = report.to_string();
    assert!(
        text.contains("first divergent op: mul_scalar (seq 3 of stream main)"),
        "{text}"
    );

    // Another seed: the random op's reservation differs.
    let report = diff(&base, &parse(&run(8, 0.5, 1.0, false)));
    assert_eq!(report.findings[0].kind, Divergence::Rng);
    assert!(report.to_string().contains("seed 7") && report.to_string().contains("seed 8"));

    // Other data from outside any op: the first op whose inputs differ is named.
    let report = diff(&base, &parse(&run(7, 0.5, 9.0, false)));
    let f = &report.findings[0];
    assert_eq!(
        (f.kind.clone(), f.a.as_ref().unwrap().op.as_str()),
        (Divergence::UnexplainedInputs, "mul")
    );

    // Another code path.
    let report = diff(&base, &parse(&run(7, 0.5, 1.0, true)));
    let f = &report.findings[0];
    assert_eq!(
        (f.kind.clone(), f.b.as_ref().unwrap().op.as_str()),
        (Divergence::Path, "exp")
    );

    // A truncated trace.
    let cut: String = run(7, 0.5, 1.0, false)
        .lines()
        .take(4)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        diff(&base, &parse(&cut)).findings[0].kind,
        Divergence::Ended
    );
    assert!(Trace::parse("main\tnot a number", "bad").is_err());
}

/// The child half of `ditto_audit_in_the_environment_records_from_the_first_op`.
#[test]
fn env_child() {
    test_support::own_process!(env_child);
    if std::env::var_os("DITTO_AUDIT").is_none() {
        return;
    }
    let a = t(&[1.0, 2.0]);
    a.add(&a).unwrap();
    // No `stop`: a program traced through the environment just exits.
}

#[test]
fn ditto_audit_in_the_environment_records_from_the_first_op() {
    test_support::own_process!(ditto_audit_in_the_environment_records_from_the_first_op);
    let dir = std::env::temp_dir().join(format!("ditto-audit-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test_support::exact_name(module_path!(), "env_child").as_str(),
            "--test-threads=1",
        ])
        .env("DITTO_AUDIT", dir.join("run-{pid}.trace"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let traces: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let name = traces[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("run-") && !name.contains("{pid}"),
        "{name}"
    );
    let text = std::fs::read_to_string(&traces[0]).unwrap();
    let ops: Vec<Record> = records(&text);
    assert_eq!(ops.len(), 1, "{text}");
    assert_eq!(ops[0].op, "add");
    std::fs::remove_dir_all(&dir).unwrap();
}
