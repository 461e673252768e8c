"""PyTorch eager twin of train_gpt's step (issue 30): the default GPT (4 layers, 4 heads,
width 128, context 64, batch 16, dropout 0.1, byte vocabulary) with AdamW (lr 1e-3,
betas (0.9, 0.95), weight decay 0.1 on the weight matrices), clipping at 1.0; random
byte windows. Prints the median time per step over several timed rounds after a
warm-up, at the thread count given (torch.set_num_threads).

    python benches/compare_torch_gpt.py --threads 1 [--rounds 7] [--steps-per-round 20]
    bash benches/compare_train_step.sh --gpt          # beside ditto's, interleaved
    python benches/compare_torch_gpt.py --threads 2 --layers 6 --heads 6 --width 384 \
        --block 256 --batch 8 --dropout 0.2 --no-bias --beta2 0.99   # a recipe's shape

Shape flags default to train_gpt's defaults (`--recipe` prints the values a recipe uses).
With --train-steps N it trains instead of timing: nanoGPT's loop (its initialisation,
random windows of the first 90% of --data, warm-up and cosine schedule, clipping) for N
steps, then prints the mean train and val loss over --eval-iters batches of each split,
dropout off (nanoGPT's estimate_loss), to set beside `train_gpt --recipe`'s.

    python benches/compare_torch_gpt.py --threads 2 --train-steps 2000 --eval-iters 20 \
        --batch 12 --dropout 0 --no-bias --beta2 0.99 --decay-steps 2000   # the CPU recipe

With --generate N it times nanoGPT's sample.py loop instead (no cache: the cropped
context forward for every new byte, multinomial draws) at --batch requests, printing new
bytes per second, to set beside benches/generate_bench.rs.

The module is scripts/gpt_torch_parity.py's nanoGPT-style GPT, the one the parity test
loads ditto's checkpoints into; compare with `train_gpt`'s steps/s at the same thread
count (RAYON_NUM_THREADS), interleaved on the same machine (benches/RESULTS.md).
"""

import argparse
import contextlib
import math
import os
import statistics
import sys
import time

import torch

# The repository keeps the module in scripts/; the GPU bundle puts it beside this file.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch_parity import GPT, decays, lr_at  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps-per-round", type=int, default=20)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (rounds end synchronised)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--block", type=int, default=64, help="block size and context")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--no-bias", action="store_true", help="nanoGPT's bias=False")
    parser.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                        help="f32 (TF32 off, as ditto) or bf16 autocast (torch.autocast)")
    parser.add_argument("--attention", choices=["manual", "sdpa"], default="manual",
                        help="nanoGPT's masked softmax, or F.scaled_dot_product_attention (its flash kernel)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--beta2", type=float, default=0.95)
    parser.add_argument("--train-steps", type=int, default=0, help="train, then evaluate")
    parser.add_argument("--generate", type=int, default=0, help="time N new bytes of nanoGPT's generate")
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data", "tinyshakespeare.txt"))
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--eval-iters", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--min-lr", type=float, default=1e-4)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--decay-steps", type=int, default=5000)
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = dict(vocab_size=256, block_size=args.block, n_layer=args.layers, n_head=args.heads,
                  n_embd=args.width, dropout=args.dropout, bias=not args.no_bias,
                  sdpa=args.attention == "sdpa")
    t, batch = args.block, args.batch
    if device.type == "cuda":
        # ditto's f32 GEMMs are plain f32: so are PyTorch's here.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = GPT(config).to(device)
    model.train()
    forward = torch.compile(model) if args.compile else model
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if args.precision == "bf16"
                else contextlib.nullcontext())
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if decays(n)], "weight_decay": 0.1},
        {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, args.beta2))
    data = torch.randint(0, 256, (100_000,), device=device)
    if args.train_steps:
        return train(args, model, opt, device)
    if args.generate:
        return generate(args, model, device)

    def step() -> None:
        starts = torch.randint(0, len(data) - t - 1, (batch,)).tolist()
        x = torch.stack([data[s : s + t] for s in starts])
        y = torch.stack([data[s + 1 : s + t + 1] for s in starts])
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(10):
        step()
    times = []
    for _ in range(args.rounds):
        sync()
        start = time.perf_counter()
        for _ in range(args.steps_per_round):
            step()
        sync()
        times.append((time.perf_counter() - start) / args.steps_per_round)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
          f"model {config}, batch {batch}, {args.precision}, attention {args.attention}"
          f"{', compiled' if args.compile else ''}")
    median = statistics.median(times)
    memory = (f", peak device memory {torch.cuda.max_memory_allocated(device) / 2**20:.1f} MiB"
              if device.type == "cuda" else "")
    print(f"time per step: median {1e3 * median:.2f} ms "
          f"(min {1e3 * min(times):.2f}, max {1e3 * max(times):.2f}, {args.rounds} rounds): "
          f"{1 / median:.2f} steps/s{memory}")


@torch.no_grad()
def generate(args, model, device) -> None:
    """nanoGPT's generate (sample.py): crop to the block, forward, last row's logits,
    softmax, multinomial; every new byte runs the whole cropped context."""
    model.eval()
    tr = model.transformer

    def logits(idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=device)
        x = tr.drop(tr.wte(idx) + tr.wpe(pos))
        for block in tr.h:
            x = block(x)
        return model.lm_head(tr.ln_f(x[:, -1, :]))

    rates = []
    for _ in range(args.rounds):
        idx = torch.full((args.batch, 1), 10, dtype=torch.long, device=device)
        start = time.perf_counter()
        for _ in range(args.generate):
            probs = torch.softmax(logits(idx[:, -args.block :]), dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        rates.append(args.batch * args.generate / (time.perf_counter() - start))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, nanoGPT generate, "
          f"batch {args.batch}, {args.generate} new bytes: {statistics.median(rates):.1f} bytes/s")


def train(args, model, opt, device) -> None:
    """nanoGPT's train.py loop on the text's first (1 - val_fraction), then its
    estimate_loss on both splits."""
    for name, p in model.named_parameters():  # nanoGPT's _init_weights
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif p.dim() == 2:
            std = 0.02 / math.sqrt(2 * args.layers) if name.endswith("c_proj.weight") else 0.02
            torch.nn.init.normal_(p, mean=0.0, std=std)
    with open(args.data, "rb") as f:
        text = torch.tensor(list(f.read()), dtype=torch.long, device=device)
    n = len(text)
    splits = {"train": text[: int(n * (1 - args.val_fraction))], "val": text[int(n * (1 - args.val_fraction)) :]}
    t, batch = args.block, args.batch

    def get_batch(split):
        data = splits[split]
        starts = torch.randint(len(data) - t, (batch,)).tolist()
        return (torch.stack([data[s : s + t] for s in starts]), torch.stack([data[s + 1 : s + t + 1] for s in starts]))

    schedule = dict(lr=args.lr, min_lr=args.min_lr, warmup=args.warmup, decay_steps=args.decay_steps)
    start = time.perf_counter()
    for it in range(args.train_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(schedule, it)
        x, y = get_batch("train")
        opt.zero_grad(set_to_none=True)
        model(x, y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    minutes = (time.perf_counter() - start) / 60
    model.eval()
    with torch.no_grad():
        losses = {s: sum(model(*get_batch(s)).item() for _ in range(args.eval_iters)) / args.eval_iters for s in splits}
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}: after {args.train_steps} steps "
          f"({minutes:.1f} min of training): train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")


if __name__ == "__main__":
    main()
