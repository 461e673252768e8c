//! CPU random ops: every op and dtype, allocating and in place, on one thread and on two,
//! at 2^24 elements (the size of issue 10's targets; `benches/RESULTS.md`, "CPU random
//! ops"). Throughput is reported in elements per second.
//!
//! Run: `cargo bench --bench cpu_random` (about 5 minutes); a filter picks a subset, e.g.
//! `cargo bench --bench cpu_random -- 't1/.*normal'`. Names are
//! `t<threads>/<op>/<dtype>/<alloc|inplace>`. `benches/compare_cpu.py` prints these ops
//! next to NumPy, PyTorch and JAX from one interleaved run.

use std::time::Duration;

use criterion::{Criterion, Throughput};
use rayon::ThreadPoolBuilder;
use rng_gen::{Generator, Key};
use tensor_core::{DType, Device, Tensor};

const N: usize = 1 << 24;
const CPU: Device = Device::Cpu;
const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

/// One benchmark: `run` is called once per iteration.
fn bench(c: &mut Criterion, name: &str, mut run: impl FnMut()) {
    let mut group = c.benchmark_group("cpu_random");
    group.throughput(Throughput::Elements(N as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    group.bench_function(name, |b| b.iter(&mut run));
    group.finish();
}

fn bench_all(c: &mut Criterion, pool: &str) {
    let g = Generator::from_key(CPU, Key::new(42));
    for dtype in FLOATS {
        let d = format!("{dtype}");
        let mut t = Tensor::zeros(&[N], dtype, CPU).unwrap();
        bench(c, &format!("{pool}/uniform/{d}/alloc"), || {
            rng_gen::rand(&[N], dtype, CPU, Some(&g)).unwrap();
        });
        bench(c, &format!("{pool}/uniform/{d}/inplace"), || {
            rng_gen::uniform_(&mut t, 0.0, 1.0, Some(&g)).unwrap();
        });
        bench(c, &format!("{pool}/normal/{d}/alloc"), || {
            rng_gen::randn(&[N], dtype, CPU, Some(&g)).unwrap();
        });
        bench(c, &format!("{pool}/normal/{d}/inplace"), || {
            rng_gen::normal_(&mut t, 0.0, 1.0, Some(&g)).unwrap();
        });
        bench(c, &format!("{pool}/bernoulli/{d}/alloc"), || {
            rng_gen::bernoulli(&[N], 0.5, dtype, CPU, Some(&g)).unwrap();
        });
        bench(c, &format!("{pool}/bernoulli/{d}/inplace"), || {
            rng_gen::bernoulli_(&mut t, 0.5, Some(&g)).unwrap();
        });
        let x = rng_gen::rand(&[N], dtype, CPU, Some(&g)).unwrap();
        let mut y = Tensor::zeros(&[N], dtype, CPU).unwrap();
        bench(c, &format!("{pool}/dropout/{d}/alloc"), || {
            rng_gen::dropout(&x, 0.1, true, Some(&g)).unwrap();
        });
        bench(c, &format!("{pool}/dropout/{d}/inplace"), || {
            rng_gen::dropout_into(&x, 0.1, true, &mut y, Some(&g), false).unwrap();
        });
        bench(c, &format!("{pool}/dropout_with_mask/{d}/alloc"), || {
            rng_gen::dropout_with_mask(&x, 0.1, true, Some(&g)).unwrap();
        });
        let (_, masked) = rng_gen::dropout_with_mask(&x, 0.1, true, Some(&g)).unwrap();
        let (_, keyed) = rng_gen::dropout(&x, 0.1, true, Some(&g)).unwrap();
        bench(
            c,
            &format!("{pool}/dropout_backward_mask/{d}/alloc"),
            || {
                rng_gen::dropout_backward(&x, &masked).unwrap();
            },
        );
        bench(
            c,
            &format!("{pool}/dropout_backward_regen/{d}/alloc"),
            || {
                rng_gen::dropout_backward(&x, &keyed).unwrap();
            },
        );
    }
    for dtype in [DType::U8, DType::Bool] {
        let mut t = Tensor::zeros(&[N], dtype, CPU).unwrap();
        bench(c, &format!("{pool}/bernoulli/{dtype}/alloc"), || {
            rng_gen::bernoulli(&[N], 0.5, dtype, CPU, Some(&g)).unwrap();
        });
        bench(c, &format!("{pool}/bernoulli/{dtype}/inplace"), || {
            rng_gen::bernoulli_(&mut t, 0.5, Some(&g)).unwrap();
        });
    }
    let mut words = Tensor::zeros(&[N], DType::U32, CPU).unwrap();
    bench(c, &format!("{pool}/bits/u32/alloc"), || {
        rng_gen::bits(&[N], CPU, Some(&g)).unwrap();
    });
    bench(c, &format!("{pool}/bits/u32/inplace"), || {
        rng_gen::bits_(&mut words, Some(&g)).unwrap();
    });
    let mut ints = Tensor::zeros(&[N], DType::I64, CPU).unwrap();
    bench(c, &format!("{pool}/randint/i64/alloc"), || {
        rng_gen::randint(0, 1000, &[N], CPU, Some(&g)).unwrap();
    });
    bench(c, &format!("{pool}/randint/i64/inplace"), || {
        rng_gen::random_(&mut ints, 0, 1000, Some(&g)).unwrap();
    });
    bench(c, &format!("{pool}/randperm/i64/alloc"), || {
        rng_gen::randperm(N, CPU, Some(&g)).unwrap();
    });
}

fn main() {
    // Each configuration runs inside its own pool (`install`), so the ops see that pool
    // as "the current one" without changing rayon's global pool.
    for threads in [1, 2] {
        let pool = ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        pool.install(|| {
            let mut c = Criterion::default().configure_from_args();
            bench_all(&mut c, &format!("t{threads}"));
            c.final_summary();
        });
    }
}
