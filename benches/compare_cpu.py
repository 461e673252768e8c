#!/usr/bin/env python3
"""ditto's CPU random ops next to NumPy, PyTorch and JAX, from one interleaved run.

Installs NumPy, PyTorch and JAX (CPU) into benches/.venv if they are missing there
(pip, from the configured index: on PyPI the Linux torch wheel is the CUDA build, which
runs on the CPU; point pip at a CPU-only torch index with PIP_EXTRA_INDEX_URL to get the
smaller one) and re-runs itself in that venv. Builds ditto's probe
(benches/cpu_random_probe.rs, release) and times single calls: each round goes through
every case, and within a case through every library (in a rotating order), so all of
them see the same machine load. Reports medians over the rounds, in millions of elements
per second, of wall time and, for one-thread calls where it is meaningful, of the
calling thread's CPU time (which other processes on a shared machine do not inflate);
names the machine and prints the load average before and after; checks issue 10's
targets.

Run: python3 benches/compare_cpu.py [--rounds N] [--n ELEMENTS] [--quick]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "benches", ".venv")
VENV_PY = os.path.join(VENV, "bin", "python")
PEER_PACKAGES = ["numpy", "torch", "jax[cpu]"]


def ensure_venv():
    """Re-runs this script in benches/.venv, creating it and installing peers if needed."""
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VENV_PY):
        print(f"creating {VENV}", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    probe = "import numpy, torch, jax"
    if subprocess.call([VENV_PY, "-c", probe], stderr=subprocess.DEVNULL) != 0:
        print(f"installing {' '.join(PEER_PACKAGES)} into {VENV} (once)", file=sys.stderr)
        subprocess.check_call([VENV_PY, "-m", "pip", "install", "-q", *PEER_PACKAGES])
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__), *sys.argv[1:]])


ensure_venv()

# JAX fixes its threads at import: one intra-op thread, like the one-thread rows.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def machine():
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu_flags = next(line for line in f if line.startswith("flags")).split()
        flags = "AVX-512" if "avx512f" in cpu_flags else ("AVX2" if "avx2" in cpu_flags else "SSE")
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} CPUs ({flags}), {platform.system()} {platform.release()}"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


class Ditto:
    """The probe process: one request per call, answered with (wall, thread CPU) s."""

    def __init__(self):
        out = subprocess.run(
            ["cargo", "bench", "--bench", "cpu_random_probe", "--no-run",
             "--message-format=json"],
            cwd=ROOT, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        exe = None
        for line in out.stdout.splitlines():
            msg = json.loads(line)
            if msg.get("reason") == "compiler-artifact" and msg.get("executable") and \
                    msg["target"]["name"] == "cpu_random_probe":
                exe = msg["executable"]
        if exe is None:
            sys.exit("could not find the cpu_random_probe executable")
        self.proc = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, op, dtype, mode, threads, n):
        self.proc.stdin.write(f"{op} {dtype} {mode} {threads} {n}\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split()
        if not reply or reply[0] == "error":
            raise RuntimeError(f"ditto probe: {' '.join(reply)}")
        return float(reply[0]), float(reply[1])


def timed(fn):
    wall, cpu = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - wall, time.thread_time() - cpu


TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                "f64": torch.float64}
JAX_DTYPES = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}


def peers(op, dtype, mode, threads, n):
    """{library: zero-argument callable} for the peers that have this op."""
    out = {}
    rng = np.random.default_rng(42)
    td = TORCH_DTYPES.get(dtype)
    if dtype in ("f32", "f64"):
        nd = np.float32 if dtype == "f32" else np.float64
        buf = np.empty(n, nd)
        if op == "uniform":
            out["numpy"] = (lambda: rng.random(dtype=nd, out=buf)) if mode == "inplace" \
                else (lambda: rng.random(n, dtype=nd))
        if op == "normal":
            out["numpy"] = (lambda: rng.standard_normal(dtype=nd, out=buf)) if mode == "inplace" \
                else (lambda: rng.standard_normal(n, dtype=nd))
    if op == "randint" and mode == "alloc":
        out["numpy"] = lambda: rng.integers(0, 1000, n, dtype=np.int64)
    if op == "randperm":
        out["numpy"] = lambda: rng.permutation(n)

    def with_threads(fn):
        def run():
            torch.set_num_threads(threads)
            return fn()
        return run

    if td is not None:
        t = torch.empty(n, dtype=td)
        x = torch.rand(n, dtype=td)
        y = torch.empty(n, dtype=td)
        if op == "uniform":
            out["torch"] = (lambda: t.uniform_()) if mode == "inplace" \
                else (lambda: torch.rand(n, dtype=td))
        if op == "normal":
            out["torch"] = (lambda: t.normal_()) if mode == "inplace" \
                else (lambda: torch.randn(n, dtype=td))
        if op == "bernoulli":
            out["torch"] = (lambda: t.bernoulli_(0.5)) if mode == "inplace" \
                else (lambda: torch.empty(n, dtype=td).bernoulli_(0.5))
        if op == "dropout":
            drop = torch.nn.functional.dropout
            # "Into a given output": torch has only inplace=True (on a buffer, same traffic).
            out["torch"] = (lambda: drop(y, 0.1, True, inplace=True)) if mode == "inplace" \
                else (lambda: drop(x, 0.1, True))
    if op == "randint":
        ti = torch.empty(n, dtype=torch.int64)
        out["torch"] = (lambda: ti.random_(0, 1000)) if mode == "inplace" \
            else (lambda: torch.randint(0, 1000, (n,)))
    if op == "randperm":
        out["torch"] = lambda: torch.randperm(n)
    out = {k: with_threads(v) for k, v in out.items()}

    jd = JAX_DTYPES.get(dtype)
    if threads == 1 and mode == "alloc":
        key = jax.random.PRNGKey(42)
        fn = None
        if op == "uniform" and jd is not None:
            fn = jax.jit(lambda k: jax.random.uniform(k, (n,), jd))
        if op == "normal" and jd is not None:
            fn = jax.jit(lambda k: jax.random.normal(k, (n,), jd))
        if op == "bernoulli" and jd is not None:
            fn = jax.jit(lambda k: jax.random.bernoulli(k, 0.5, (n,)).astype(jd))
        if op == "dropout" and jd is not None:
            xj = jnp.ones(n, jd)
            fn = jax.jit(lambda k: jnp.where(jax.random.bernoulli(k, 0.9, (n,)), xj / 0.9, 0))
        if op == "randint":
            fn = jax.jit(lambda k: jax.random.randint(k, (n,), 0, 1000))
        if op == "randperm":
            fn = jax.jit(lambda k: jax.random.permutation(k, n))
        if fn is not None:
            out["jax"] = lambda fn=fn: fn(key).block_until_ready()
    return out


LIBS = ["ditto", "numpy", "torch", "jax"]


def cases(n, quick):
    one = [
        ("uniform", "f32", "inplace"), ("uniform", "f32", "alloc"),
        ("uniform", "f16", "inplace"), ("uniform", "f16", "alloc"),
        ("uniform", "bf16", "inplace"), ("uniform", "bf16", "alloc"),
        ("uniform", "f64", "inplace"),
        ("normal", "f32", "inplace"), ("normal", "f32", "alloc"),
        ("normal", "f16", "inplace"), ("normal", "bf16", "inplace"),
        ("normal", "f16", "alloc"), ("normal", "bf16", "alloc"),
        ("bernoulli", "f32", "inplace"), ("bernoulli", "f32", "alloc"),
        ("dropout", "f32", "inplace"), ("dropout", "f32", "alloc"),
        ("randint", "i64", "alloc"), ("randperm", "i64", "alloc"),
    ]
    two = [("uniform", "f32", "inplace"), ("normal", "f32", "inplace"),
           ("bernoulli", "f32", "inplace"), ("dropout", "f32", "inplace"),
           ("uniform", "f32", "alloc"), ("normal", "f32", "alloc")]
    if quick:
        one, two = one[:2] + one[7:9], two[:2]
    return [(op, d, m, 1, n) for op, d, m in one] + [(op, d, m, 2, n) for op, d, m in two]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--quick", action="store_true", help="a few cases, 3 rounds")
    args = ap.parse_args()
    rounds = 3 if args.quick else args.rounds
    ditto = Ditto()
    todo = cases(args.n, args.quick)
    fns = {}
    for case in todo:
        fns[case] = peers(*case)
        fns[case]["ditto"] = lambda case=case: ditto.call(*case)
    load_before = loadavg()
    times = {(case, lib): [] for case in todo for lib in LIBS}
    for case in todo:  # warm-up: allocations, JIT compilation
        for lib, fn in fns[case].items():
            fn()
    for r in range(rounds):
        for case in todo:
            libs = [lib for lib in LIBS if lib in fns[case]]
            libs = libs[r % len(libs):] + libs[:r % len(libs)]
            for lib in libs:
                if lib == "ditto":
                    times[(case, lib)].append(fns[case][lib]())
                else:
                    times[(case, lib)].append(timed(fns[case][lib]))
    load_after = loadavg()

    def rate(case, lib, which=0):
        samples = times[(case, lib)]
        if not samples:
            return None
        return case[4] / statistics.median(s[which] for s in samples) / 1e6

    print(f"machine: {machine()}")
    print(f"ditto (this checkout), numpy {np.__version__} (PCG64), torch {torch.__version__}, "
          f"jax {jax.__version__}; {args.n} elements; median of {rounds} interleaved rounds; "
          f"load average {load_before} before, {load_after} after")
    print()
    print("M elements/s, wall time (thread CPU time in brackets for one-thread ditto, numpy, "
          "torch calls)")
    print()
    print("| op | dtype | form | threads | ditto | numpy | torch | jax |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for case in todo:
        op, dtype, mode, threads, _ = case
        cells = []
        for lib in LIBS:
            wall = rate(case, lib)
            if wall is None:
                cells.append("—")
                continue
            cell = f"{wall:,.0f}"
            if threads == 1 and lib != "jax":
                cell += f" ({rate(case, lib, 1):,.0f})"
            cells.append(cell)
        print(f"| {op} | {dtype} | {mode} | {threads} | " + " | ".join(cells) + " |")

    print()
    print("Issue 10's targets (one thread, in-place unless said; wall (CPU) M/s):")

    def d(op, dtype, mode="inplace", threads=1, which=0):
        return rate((op, dtype, mode, threads, args.n), "ditto", which) if \
            (op, dtype, mode, threads, args.n) in fns else None

    def check(name, value, goal, unit=""):
        if value is None:
            return
        verdict = "met" if value >= goal else f"missed by {100 * (1 - value / goal):.0f}%"
        print(f"- {name}: {value:,.2f}{unit} vs >= {goal:,.2f}{unit}: {verdict}")

    for op, goal in [("uniform", 2000), ("normal", 1000), ("bernoulli", 1000), ("dropout", 1000)]:
        check(f"{op} f32 (wall)", d(op, "f32"), goal)
        check(f"{op} f32 (thread CPU time)", d(op, "f32", which=1), goal)
    for op in ["uniform", "normal"]:
        for half in ["f16", "bf16"]:
            f32, h = d(op, "f32"), d(op, half)
            if f32 and h:
                check(f"{op} {half} / f32", h / f32, 0.8, "x")
    for op in ["uniform", "normal", "bernoulli", "dropout"]:
        case = (op, "f32", "alloc", 1, args.n)
        if (case, "torch") in times and times[(case, "torch")]:
            check(f"{op} f32 allocating / torch allocating", rate(case, "ditto") / rate(case, "torch"), 2.0, "x")
    for op in ["uniform", "normal", "bernoulli", "dropout"]:
        one, two = d(op, "f32"), d(op, "f32", threads=2)
        if one and two:
            check(f"{op} f32 in place, 2 threads / 1 thread", two / one, 1.8, "x")
    ditto.proc.stdin.write("\n")
    ditto.proc.stdin.flush()


if __name__ == "__main__":
    main()
