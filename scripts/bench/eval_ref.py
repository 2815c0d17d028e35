#!/usr/bin/env python3
# PyTorch reference for scripts/bench/eval: perplexity of token ids with a
# tfm model file, the same windows as tfm-eval (context N, stride = N: each
# window after the first overlaps the previous by one token), float32,
# no_grad, the same batch.  Prints "ce=... tok_per_s=... tokens=...".
#   eval_ref.py MODEL IDS.npy BATCH THREADS
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def main():
    path, ids_path, batch, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    P = {k: torch.from_numpy(np.frombuffer(blob[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]],
                                           dtype="<f4").reshape(t["shape"]).copy())
         for k, t in header.items()}
    cfg, sec = {}, None
    for line in meta["config"].splitlines():
        if not line.startswith(" "):
            sec = line.rstrip(":")
        elif sec == "model":
            k, v = line.strip().split(": ")
            cfg[k] = v
    L, H, T = int(cfg["n_layer"]), int(cfg["n_head"]), int(cfg["block_size"])
    C = P["wte.weight"].shape[1]
    ids = np.load(ids_path).astype(np.int64)
    spans, end = [(0, min(T, len(ids)), 1)], min(T, len(ids))
    while end < len(ids):
        prev, end = end, min(end + T - 1, len(ids))
        spans.append((end - T, end, prev))

    def forward(x):
        B, S = x.shape
        h = P["wte.weight"][x] + P["wpe.weight"][:S]
        mask = torch.tril(torch.ones(S, S, dtype=torch.bool))
        for i in range(L):
            p = lambda k: P["h.%d.%s" % (i, k)]
            a = F.layer_norm(h, (C,), p("ln_1.weight"), p("ln_1.bias"), 1e-5)
            qkv = a @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
            q, k, v = [t.view(B, S, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2)]
            att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // H)).masked_fill(~mask, float("-inf"))
            o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, S, C)
            h = h + o @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
            a = F.layer_norm(h, (C,), p("ln_2.weight"), p("ln_2.bias"), 1e-5)
            f = F.gelu(a @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
            h = h + f @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
        h = F.layer_norm(h, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
        return h @ P["wte.weight"].t()

    t0 = time.perf_counter()
    nll, scored = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(spans), batch):
            group = spans[i:i + batch]
            S = max(e - b for b, e, _ in group)
            x = torch.zeros(len(group), S, dtype=torch.long)
            for j, (b, e, _) in enumerate(group):
                x[j, :e - b] = torch.from_numpy(ids[b:e])
            lp = forward(x).log_softmax(-1)
            for j, (b, e, s) in enumerate(group):
                tgt = torch.from_numpy(ids[s:e])
                nll -= lp[j, s - b - 1:e - b - 1].gather(1, tgt[:, None]).sum().item()
                scored += e - s
    dt = time.perf_counter() - t0
    print("ce=%.7f tok_per_s=%.1f tokens=%d seconds=%.3f" % (nll / scored, scored / dt, scored, dt))


if __name__ == "__main__":
    main()
