#!/usr/bin/env python3
"""PyTorch's side of the GPT parity check (issue 30): a nanoGPT-style `GPT` module, the
checkpoints of ditto's `train_gpt` run loaded into it by name, and one training step
compared with ditto's.

    python3 scripts/gpt_torch_parity.py STEP0 STEP1 BATCH

STEP0 and STEP1 are ditto checkpoints (safetensors) of the same run with dropout off,
before and after its first step; BATCH holds that step's `input` and `target` tokens
and ditto's `loss`. The script

1. builds the module from the run's configuration (`train.config` in STEP0's metadata)
   and loads STEP0's `model.*` tensors into it by name with `load_state_dict`: every
   key must load, and the only key left is `lm_head.weight`, tied to
   `transformer.wte.weight` as in nanoGPT;
2. checks the loss of BATCH against ditto's to 1e-5 relative;
3. takes one step as ditto's run does (global gradient-norm clipping, AdamW with the
   first step's scheduled rate, no weight decay on biases, layer norms and
   embeddings) and checks every parameter against STEP1's to 1e-5.

`crates/nn-mini/tests/integration/gpt_torch_parity.rs` writes the files and runs this. Prints one
line per check and exits 1 on the first failure.
"""
import json
import math
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        bias = c.get("bias", True)
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=bias)
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=bias)
        self.attn_dropout = nn.Dropout(c["dropout"])
        self.resid_dropout = nn.Dropout(c["dropout"])
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]
        # F.scaled_dot_product_attention (nanoGPT's flash path) instead of the masked softmax.
        self.sdpa, self.dropout = c.get("sdpa", False), c["dropout"]
        t = c["block_size"]
        # Not part of the state: nanoGPT's flash-attention variant has no mask buffer.
        self.register_buffer("mask", torch.tril(torch.ones(t, t)).view(1, 1, t, t), persistent=False)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        heads = lambda y: y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        if self.sdpa:
            p = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
            y = self.attn_dropout(F.softmax(att, dim=-1)) @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        bias = c.get("bias", True)
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=bias)
        self.dropout = nn.Dropout(c["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"], bias=c.get("bias", True))
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"], bias=c.get("bias", True))
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT (GELU with the tanh approximation, as GPT-2; `bias` as nanoGPT's,
    true when the configuration does not say)."""

    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            drop=nn.Dropout(c["dropout"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=nn.LayerNorm(c["n_embd"], bias=c.get("bias", True)),
        ))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def decays(name):
    """ditto's groups: only the linear layers' weight matrices decay."""
    return name.endswith(".weight") and any(k in name for k in (".c_attn.", ".c_proj.", ".c_fc."))


def lr_at(config, it):
    """ditto's WarmupCosine (nanoGPT's get_lr)."""
    lr, min_lr, warmup, decay = config["lr"], config["min_lr"], config["warmup"], config["decay_steps"]
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay:
        return min_lr
    ratio = (it - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def model_tensors(path):
    return {k[len("model."):]: v for k, v in load_file(path).items() if k.startswith("model.")}


def check(ok, line):
    print(("ok   " if ok else "FAIL ") + line)
    if not ok:
        sys.exit(1)


def main():
    step0, step1, batch_path = sys.argv[1:4]
    torch.set_num_threads(1)
    with safe_open(step0, framework="pt") as f:
        config = json.loads(f.metadata()["train.config"])
    c = config["model"]
    check(c["dropout"] == 0.0, "the run has dropout off (parity compares deterministic steps)")
    model = GPT(c)
    result = model.load_state_dict(model_tensors(step0), strict=False)
    check(result.unexpected_keys == [], f"every checkpoint tensor names a parameter: {result.unexpected_keys}")
    check(result.missing_keys == ["lm_head.weight"],
          f"only the tied head is left to load: {result.missing_keys}")
    check(model.lm_head.weight is model.transformer.wte.weight, "lm_head is tied to transformer.wte")

    batch = load_file(batch_path)
    loss = model(batch["input"], batch["target"])
    want = batch["loss"].item()
    rel = abs(loss.item() - want) / abs(want)
    check(rel <= 1e-5, f"loss: torch {loss.item():.9g}, ditto {want:.9g}, relative difference {rel:.2e}")

    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config["grad_clip"])
    print(f"     gradient norm {norm.item():.6g} (clipped to {config['grad_clip']})")
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if decays(n)], "weight_decay": config["weight_decay"]},
        {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0},
    ]
    betas = tuple(config["betas"])
    opt = torch.optim.AdamW(groups, lr=lr_at(config, 0), betas=betas, eps=config["eps"], foreach=False)
    opt.step()
    after = model_tensors(step1)
    worst = 0.0
    for name, p in named:
        want = after[name]
        diff = (p.detach() - want).abs().max().item() / max(1.0, want.abs().max().item())
        worst = max(worst, diff)
        check(diff <= 1e-5, f"{name} after one step: difference {diff:.2e}")
    print(f"     largest parameter difference after one AdamW step: {worst:.2e}")


if __name__ == "__main__":
    main()
