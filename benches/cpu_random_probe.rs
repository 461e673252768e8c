//! Times single calls of ditto's CPU random ops on request, for `benches/compare_cpu.py`,
//! which interleaves them with NumPy, PyTorch and JAX calls in one run.
//!
//! Reads lines `<op> <dtype> <alloc|inplace> <threads> <n>` on stdin and answers each
//! with `<wall seconds> <thread CPU seconds>` for one call (the CPU time of the calling
//! thread: with one thread it is the op's own time, unaffected by other processes
//! holding the core; with more threads only wall time means anything), or `error
//! <message>`. An empty line or end of input stops it. Ops: uniform, normal, bernoulli,
//! dropout, bits, randint, randperm.

use std::io::{BufRead, Write};
use std::time::Instant;

use rng_gen::{Generator, Key};
use tensor_core::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

/// CPU time of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; the clock id is a constant every Linux has.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn dtype(name: &str) -> Result<DType, String> {
    Ok(match name {
        "f32" => DType::F32,
        "f64" => DType::F64,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "u8" => DType::U8,
        "bool" => DType::Bool,
        "u32" => DType::U32,
        "i64" => DType::I64,
        other => return Err(format!("unknown dtype {other}")),
    })
}

/// The buffers in-place calls write, kept between calls (as a training loop would).
#[derive(Default)]
struct Buffers {
    out: Option<Tensor>,
    input: Option<Tensor>,
}

impl Buffers {
    fn out(&mut self, dtype: DType, n: usize) -> &mut Tensor {
        let fits = |t: &Tensor| t.dtype() == dtype && t.elem_count() == n;
        if !self.out.as_ref().is_some_and(fits) {
            self.out = Some(Tensor::zeros(&[n], dtype, CPU).unwrap());
        }
        self.out.as_mut().unwrap()
    }

    fn input(&mut self, dtype: DType, n: usize, g: &Generator) -> Tensor {
        let fits = |t: &Tensor| t.dtype() == dtype && t.elem_count() == n;
        if !self.input.as_ref().is_some_and(fits) {
            self.input = Some(rng_gen::rand(&[n], dtype, CPU, Some(g)).unwrap());
        }
        self.input.clone().unwrap()
    }
}

fn run(request: &str, g: &Generator, buffers: &mut Buffers) -> Result<(f64, f64), String> {
    let parts: Vec<&str> = request.split_whitespace().collect();
    let [op, dtype_name, mode, threads, n] = parts[..] else {
        return Err(format!("expected 5 fields, got {request:?}"));
    };
    let dtype = dtype(dtype_name)?;
    let threads: usize = threads.parse().map_err(|e| format!("threads: {e}"))?;
    let n: usize = n.parse().map_err(|e| format!("n: {e}"))?;
    let inplace = mode == "inplace";
    let x = (op == "dropout").then(|| buffers.input(dtype, n, g));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| e.to_string())?;
    let out = if inplace {
        Some(buffers.out(dtype, n))
    } else {
        None
    };
    pool.install(|| {
        let (wall, cpu) = (Instant::now(), thread_cpu_seconds());
        let result = match (op, out) {
            ("uniform", Some(t)) => rng_gen::uniform_(t, 0.0, 1.0, Some(g)),
            ("uniform", None) => rng_gen::rand(&[n], dtype, CPU, Some(g)).map(drop),
            ("normal", Some(t)) => rng_gen::normal_(t, 0.0, 1.0, Some(g)),
            ("normal", None) => rng_gen::randn(&[n], dtype, CPU, Some(g)).map(drop),
            ("bernoulli", Some(t)) => rng_gen::bernoulli_(t, 0.5, Some(g)),
            ("bernoulli", None) => rng_gen::bernoulli(&[n], 0.5, dtype, CPU, Some(g)).map(drop),
            ("dropout", Some(t)) => {
                rng_gen::dropout_into(x.as_ref().unwrap(), 0.1, true, t, Some(g), false).map(drop)
            }
            ("dropout", None) => {
                rng_gen::dropout(x.as_ref().unwrap(), 0.1, true, Some(g)).map(drop)
            }
            ("bits", Some(t)) => rng_gen::bits_(t, Some(g)),
            ("bits", None) => rng_gen::bits(&[n], CPU, Some(g)).map(drop),
            ("randint", Some(t)) => rng_gen::random_(t, 0, 1000, Some(g)),
            ("randint", None) => rng_gen::randint(0, 1000, &[n], CPU, Some(g)).map(drop),
            ("randperm", _) => rng_gen::randperm(n, CPU, Some(g)).map(drop),
            _ => return Err(format!("unknown op {op}")),
        };
        let times = (wall.elapsed().as_secs_f64(), thread_cpu_seconds() - cpu);
        result.map(|()| times).map_err(|e| e.to_string())
    })
}

fn main() {
    let g = Generator::from_key(CPU, Key::new(42));
    let mut buffers = Buffers::default();
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            break;
        }
        let reply = match run(&line, &g, &mut buffers) {
            Ok((wall, cpu)) => format!("{wall:.9} {cpu:.9}"),
            Err(e) => format!("error {e}"),
        };
        let mut out = stdout.lock();
        let _ = writeln!(out, "{reply}");
        let _ = out.flush();
    }
}
