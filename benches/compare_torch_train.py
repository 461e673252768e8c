"""PyTorch twin of benches/train_step.rs: one training step of the 64-256-256-10 MLP.

Same work as the Rust bench's `train_step/model_only`: batch 128 of 64 features,
Linear-ReLU-Dropout(0.1)-Linear-ReLU-Dropout(0.1)-Linear, cross-entropy (mean), backward,
SGD(lr=0.05, momentum=0.9); one CPU thread. Prints steps/s (median of several timed
rounds, after warm-up).

    python benches/compare_torch_train.py [--rounds 15] [--steps-per-round 200]
"""

import argparse
import statistics
import time

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps-per-round", type=int, default=200)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(7)
    model = nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(256, 256), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(256, 10),
    )
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(128, 64)
    y = torch.randint(0, 10, (128,))

    def step() -> None:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(200):  # warm-up: allocator caches, momentum buffers
        step()
    rates = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.steps_per_round):
            step()
        rates.append(args.steps_per_round / (time.perf_counter() - start))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"steps/s: median {statistics.median(rates):.1f}  "
          f"(min {min(rates):.1f}, max {max(rates):.1f}, {args.rounds} rounds of "
          f"{args.steps_per_round} steps)")
    print(f"time per step: {1e6 / statistics.median(rates):.1f} us")


if __name__ == "__main__":
    main()
