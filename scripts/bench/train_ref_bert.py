#!/usr/bin/python3
"""PyTorch reference of the BERT-small benchmark (the README's benchmark section,
"BERT-small masked LM"): the same token ids as tfm-train reads (train.npy,
val.npy from scripts/bench/bert_data.py), the anchor's model, masking,
optimizer and schedule.  Prints "torch ms_per_step=" (median), "torch
val_loss=" (MLM loss over every masked position of 200 validation batches of
16, own seed, eval mode) and "torch masked_accuracy=".

    train_ref_bert.py --train train.npy --val val.npy [--steps 2000]
                      [--threads 2] [--log ref.tsv]"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

V, C, L, NH, FF, T, B = 8005, 128, 4, 4, 512, 128, 16
CLS, SEP, MASK, N_SPECIAL = 2, 3, 4, 5
CONTENT, NA, K = T - 3, 63, 19


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln1 = nn.LayerNorm(C, eps=1e-12)
        self.fc = nn.Linear(C, FF)
        self.out = nn.Linear(FF, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-12)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, NH, C // NH).permute(2, 0, 3, 1, 4)
        att = self.drop(F.softmax(q @ k.transpose(-1, -2) / math.sqrt(C // NH), dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, C)
        x = self.ln1(x + self.drop(self.proj(y)))
        return self.ln2(x + self.drop(self.out(F.gelu(self.fc(x)))))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.wse = nn.Embedding(2, C)
        self.ln_e = nn.LayerNorm(C, eps=1e-12)
        self.drop = nn.Dropout(0.1)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.dense = nn.Linear(C, C)
        self.ln_m = nn.LayerNorm(C, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(V))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x, seg, pick):
        h = self.wte(x) + self.wpe.weight[None, : x.shape[1]] + self.wse(seg)
        h = self.drop(self.ln_e(h))
        for layer in self.layers:
            h = layer(h)
        h = h.reshape(-1, C)[pick]           # logits only at the chosen positions
        h = self.ln_m(F.gelu(self.dense(h)))
        return h @ self.wte.weight.T + self.bias


def batch(data, g):
    """The anchor's sequences: [CLS] A(63) [SEP] B(62) [SEP] of a window of 125
    tokens; 19 content positions chosen, 80% [MASK], 10% kept, 10% random."""
    off = g.integers(0, len(data) - CONTENT + 1, size=B)
    x = np.empty((B, T), np.int64)
    for r in range(B):
        w = data[off[r]:off[r] + CONTENT]
        x[r] = np.concatenate(([CLS], w[:NA], [SEP], w[NA:], [SEP]))
    seg = np.zeros((B, T), np.int64)
    seg[:, NA + 2:] = 1
    content = np.concatenate((np.arange(1, NA + 1), np.arange(NA + 2, T - 1)))
    pick = np.stack([np.sort(g.choice(content, K, replace=False)) for _ in range(B)])
    pick = (pick + np.arange(B)[:, None] * T).reshape(-1)
    y = x.reshape(-1)[pick].copy()
    u = g.random(len(pick))
    flat = x.reshape(-1)
    flat[pick[u < 0.8]] = MASK
    rnd = pick[u >= 0.9]
    flat[rnd] = g.integers(N_SPECIAL, V, size=len(rnd))
    return (torch.from_numpy(x), torch.from_numpy(seg), torch.from_numpy(pick),
            torch.from_numpy(y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    train = np.load(a.train).astype(np.int64)
    val = np.load(a.val).astype(np.int64)
    model = Bert()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=5e-4, betas=(0.9, 0.999), eps=1e-6)
    lr = lambda s: 5e-4 * ((s + 1) / 100 if s < 100 else max(a.steps - s, 0) / (a.steps - 100))
    g = np.random.default_rng(1)
    log = open(a.log, "w") if a.log else None
    if log:
        log.write("step\ttrain_loss\n")
    times = []
    model.train()
    for s in range(a.steps):
        t0 = time.perf_counter()
        x, seg, pick, y = batch(train, g)
        for grp in opt.param_groups:
            grp["lr"] = lr(s)
        loss = F.cross_entropy(model(x, seg, pick), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        if log and (s + 1) % 10 == 0:
            log.write(f"{s + 1}\t{loss.item():.6f}\n")
    model.eval()
    gv = np.random.default_rng(2)
    tot = right = n = 0
    with torch.no_grad():
        for _ in range(200):
            x, seg, pick, y = batch(val, gv)
            z = model(x, seg, pick)
            tot += F.cross_entropy(z, y, reduction="sum").item()
            right += (z.argmax(-1) == y).sum().item()
            n += len(y)
    print(f"torch ms_per_step={1000 * float(np.median(times)):.1f}")
    print(f"torch val_loss={tot / n:.4f}")
    print(f"torch masked_accuracy={right / n:.4f}")


if __name__ == "__main__":
    main()
