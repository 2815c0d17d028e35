#!/usr/bin/python3
"""PyTorch reference for scripts/bench/train: the same GPT as tfm-train
(pre-LN, learned positions, tied LM head, tanh GELU, LayerNorm eps 1e-5,
GPT-2 initialisation), the same AdamW (decay on matrices only), the same
schedule (linear warmup (step+1)/W, then cosine to min_lr at max_steps), the
same clipping, random windows of the token stream, and the validation loss as
the mean over N random validation batches.

Prints "torch ms_per_step=..." and "torch val_loss=..." on stdout; with
--log, writes step/train_loss lines (TSV) for the loss curve.

Run it with BLIS_ARCH_TYPE=0 BLIS_NUM_THREADS=T OMP_NUM_THREADS=T: Debian's
PyTorch uses the system BLIS, which is 4x slower on this CPU without them."""
import argparse
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, eps):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C, eps=eps)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=eps)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C, eps=1e-5):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, H, eps) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=eps)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight"):
                    std = 0.02 / math.sqrt(2 * L)
                nn.init.normal_(p, 0.0, std)
            elif "ln" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    p = min(1.0, max(0.0, (step - a.warmup) / max(1, a.steps - a.warmup)))
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * p))


def batch(data, B, T, gen):
    ix = torch.randint(len(data) - T, (B,), generator=gen)
    x = torch.stack([torch.from_numpy(data[i:i + T].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--vocab", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--eval-batches", type=int, default=200)
    ap.add_argument("--log")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train = np.load(a.train, mmap_mode="r")
    val = np.load(a.val, mmap_mode="r")
    V = a.vocab or int(max(train.max(), val.max())) + 1
    model = GPT(V, a.ctx, a.layers, a.heads, a.width)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed)
    log = open(a.log, "w") if a.log else None
    if log:
        log.write("step\ttrain_loss\n")
    times = []
    since = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = batch(train, a.batch, a.ctx, gen)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        times.append(time.perf_counter() - t0)
        since.append(loss.item())
        # like tfm's log.tsv: the mean train loss since the previous line
        if log and ((step + 1) % 10 == 0 or step + 1 == a.steps):
            log.write("%d\t%.6f\n" % (step + 1, sum(since) / len(since)))
            since = []
    model.eval()
    vgen = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        vl = [model(*batch(val, a.batch, a.ctx, vgen)).item() for _ in range(a.eval_batches)]
    print("torch ms_per_step=%.2f" % (1000 * statistics.median(times)))
    print("torch val_loss=%.4f" % (sum(vl) / len(vl)))
    print("torch params=%d" % sum(p.numel() for p in model.parameters()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
