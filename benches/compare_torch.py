#!/usr/bin/env python3
"""PyTorch's rand / randn / dropout on the same GPU, in gpu_bench's table format.

Same sizes (2^26 elements), dtypes (f32, f16), timing (CUDA events around 20 calls
after 3 warm-up calls) and columns as `benches/gpu_bench.rs`, so the two tables can be
read side by side. Outputs are preallocated where PyTorch allows it (`out=` / in-place),
as ditto's launchers write into an existing buffer.

Run on a GPU machine with torch installed: python3 benches/compare_torch.py
Without torch or a GPU it prints `skipping: <reason>` and exits 0.
"""
import sys

N = 1 << 26
WARMUP, ITERS = 3, 20


def main() -> int:
    try:
        import torch
    except ImportError:
        print("skipping: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("skipping: torch sees no CUDA device")
        return 0
    dev = torch.device("cuda", 0)

    def time_ms(fn) -> float:
        for _ in range(WARMUP):
            fn()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ITERS):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / ITERS

    rows = []
    for dtype, name in [(torch.float32, "f32"), (torch.float16, "f16")]:
        size = torch.tensor([], dtype=dtype).element_size()
        nbytes = N * size
        src = torch.zeros(N, dtype=dtype, device=dev)
        dst = torch.empty_like(src)
        out = torch.empty_like(src)
        copy_ms = time_ms(lambda: dst.copy_(src))
        copy_gbs = nbytes / (copy_ms * 1e-3) / 1e9
        rows.append(("copy (d2d)", name, copy_ms, nbytes, copy_gbs))
        rows.append(("rand", name, time_ms(lambda: torch.rand(N, dtype=dtype, device=dev, out=out)), nbytes, copy_gbs))
        rows.append(("randn", name, time_ms(lambda: torch.randn(N, dtype=dtype, device=dev, out=out)), nbytes, copy_gbs))
        drop = torch.nn.functional.dropout
        rows.append(("dropout p=0.1", name, time_ms(lambda: drop(src, p=0.1, training=True)), nbytes, copy_gbs))
        # PyTorch keeps a byte (bool) mask per element for backward.
        rows.append(("dropout p=0.1 + bool mask", name,
                     time_ms(lambda: torch.ops.aten.native_dropout(src, 0.1, True)), nbytes + N, copy_gbs))

    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(dev)}, {N} elements, "
          f"mean of {ITERS} calls after {WARMUP} warm-up (CUDA events)\n")
    print("| op | dtype | ms / call | output GB/s | % of d2d copy |")
    print("|---|---|---:|---:|---:|")
    for op, name, ms, nbytes, copy_gbs in rows:
        gbs = nbytes / (ms * 1e-3) / 1e9
        print(f"| {op} | {name} | {ms:.3f} | {gbs:.0f} | {100 * gbs / copy_gbs:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
