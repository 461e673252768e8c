//! CPU random ops, one thread and rayon's default pool: `rand`, `uniform`, `randn`,
//! `normal`, `bernoulli`, `bits`, `dropout` (with and without the packed mask) and
//! `dropout_backward` (packed mask and regenerated mask), f32, at 32768 elements (one
//! dropout layer of the demo MLP at batch 128) and 2^20 elements. Results are in
//! `benches/RESULTS.md` ("CPU random ops").
//!
//! Run: `cargo bench --bench cpu_random` (add `-- --quick` for short runs, or a filter
//! such as `-- dropout/t1`). Throughput is reported as output bytes per second; each
//! benchmark name carries the pool (`t1` = one thread, `tN` = rayon's default pool).

use criterion::{BenchmarkId, Criterion, Throughput};
use rayon::ThreadPoolBuilder;
use rng_gen::{Generator, Key};
use tensor_core::{DType, Device, Tensor};

const SIZES: [usize; 2] = [32_768, 1 << 20];
const P: f64 = 0.1;

fn bench_all(c: &mut Criterion, pool: &str) {
    let g = Generator::from_key(Device::Cpu, Key::new(42));
    let cpu = Device::Cpu;
    for n in SIZES {
        let x = rng_gen::rand(&[n], DType::F32, cpu, Some(&g)).unwrap();
        let (_, mask_state) = rng_gen::dropout_with_mask(&x, P, true, Some(&g)).unwrap();
        let (_, key_state) = rng_gen::dropout(&x, P, true, Some(&g)).unwrap();
        let mut group = c.benchmark_group(format!("cpu_random/{pool}"));
        group.throughput(Throughput::Bytes((n * 4) as u64));
        let id = |name: &str| BenchmarkId::new(name, n);
        group.bench_function(id("bits"), |b| {
            b.iter(|| rng_gen::bits(&[n], cpu, Some(&g)).unwrap());
        });
        group.bench_function(id("rand"), |b| {
            b.iter(|| rng_gen::rand(&[n], DType::F32, cpu, Some(&g)).unwrap());
        });
        group.bench_function(id("uniform"), |b| {
            b.iter(|| rng_gen::uniform(&[n], -2.0, 3.0, DType::F32, cpu, Some(&g)).unwrap());
        });
        group.bench_function(id("randn"), |b| {
            b.iter(|| rng_gen::randn(&[n], DType::F32, cpu, Some(&g)).unwrap());
        });
        group.bench_function(id("normal"), |b| {
            b.iter(|| rng_gen::normal(&[n], 1.0, 0.5, DType::F32, cpu, Some(&g)).unwrap());
        });
        group.bench_function(id("bernoulli"), |b| {
            b.iter(|| rng_gen::bernoulli(&[n], 0.3, DType::F32, cpu, Some(&g)).unwrap());
        });
        group.bench_function(id("dropout"), |b| {
            b.iter(|| rng_gen::dropout(&x, P, true, Some(&g)).unwrap());
        });
        group.bench_function(id("dropout_with_mask"), |b| {
            b.iter(|| rng_gen::dropout_with_mask(&x, P, true, Some(&g)).unwrap());
        });
        group.bench_function(id("dropout_backward_mask"), |b| {
            b.iter(|| rng_gen::dropout_backward(&x, &mask_state).unwrap());
        });
        group.bench_function(id("dropout_backward_regen"), |b| {
            b.iter(|| rng_gen::dropout_backward(&x, &key_state).unwrap());
        });
        group.finish();
        drop::<Tensor>(x);
    }
}

fn main() {
    // Each configuration runs inside its own pool (`install`), so the ops see that pool
    // as "the current one" without changing rayon's global pool.
    for (threads, label) in [(1, "t1"), (0, "tN")] {
        let pool = ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        pool.install(|| {
            let mut c = Criterion::default().configure_from_args();
            bench_all(&mut c, label);
            c.final_summary();
        });
    }
}
