"""PyTorch twin of benches/train_step.rs: one training step of an MLP with dropout.

Same work and flags as the Rust bench: Linear-ReLU-Dropout(0.1) for every hidden layer,
then Linear; mean cross-entropy, backward, SGD(lr=0.05, momentum=0.9) on a fixed batch,
at torch.set_num_threads(--threads). Prints the same line as the Rust bench (median
steps/s of timed rounds after one warm-up round), so benches/compare_train_step.sh can
interleave the two and compare medians.

    python benches/compare_torch_train.py [--threads 2] [--widths 784,1024,1024,10]
                                          [--batch 256] [--rounds 5] [--seconds 1.0]
                                          [--device cuda] [--cuda-graph]

On a GPU (`--device cuda`) each round ends with a synchronisation, and `--cuda-graph`
captures the whole step (forward, backward, SGD) once and replays it, PyTorch's
whole-network capture recipe; scripts/gpu_bundle.sh runs both next to `train_resume
--device cuda:0` eager and `--cuda-graph` (which also upload a new batch every step).
"""

import argparse
import statistics
import time

import torch
from torch import nn


def widths(text: str) -> list[int]:
    values = [int(w) for w in text.split(",")]
    if len(values) < 2 or min(values) < 1:
        raise argparse.ArgumentTypeError("expected two or more positive widths, e.g. 64,256,10")
    return values


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (inputs, outputs) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(inputs, outputs))
        if i + 2 < len(sizes):
            layers += [nn.ReLU(), nn.Dropout(0.1)]
    return nn.Sequential(*layers)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=positive, default=1)
    parser.add_argument("--widths", type=widths, default=[64, 256, 256, 10])
    parser.add_argument("--batch", type=positive, default=128)
    parser.add_argument("--rounds", type=positive, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="capture the step as a CUDA graph and replay it")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.cuda_graph and device.type != "cuda":
        parser.error("--cuda-graph needs --device cuda")

    torch.set_num_threads(args.threads)
    torch.manual_seed(7)
    model = mlp(args.widths).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(args.batch, args.widths[0], device=device)
    y = torch.randint(0, args.widths[-1], (args.batch,), device=device)

    def step() -> None:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if args.cuda_graph:
        # Warm up on a side stream (creates the momentum buffers), then capture one step;
        # grads set to None before capture are allocated by the graph and rewritten by
        # every replay (https://pytorch.org/docs/stable/notes/cuda.html#whole-network-capture).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        step = graph.replay

    def timed() -> float:
        sync()
        start = time.perf_counter()
        steps = 0
        while time.perf_counter() - start < args.seconds:
            step()
            steps += 1
        sync()
        return steps / (time.perf_counter() - start)

    timed()  # warm-up: allocator caches, momentum buffers, threads
    rates = [timed() for _ in range(args.rounds)]
    shape = "-".join(str(w) for w in args.widths)
    where = "" if device.type == "cpu" else f" device={device}{' graphed' if args.cuda_graph else ''}"
    print(f"torch-{torch.__version__.split('+')[0]}{where} threads={torch.get_num_threads()} "
          f"widths={shape} batch={args.batch}: {statistics.median(rates):.1f} steps/s "
          f"(median of {len(rates)} rounds: {[round(r) for r in rates]})")


if __name__ == "__main__":
    main()
