#!/usr/bin/python3
"""PyTorch reference for scripts/bench/generate: greedy decoding of a tfm
model file (safetensors, pre-LN GPT) with its own key/value cache, and
without one (the whole sequence recomputed for every token).

  generate_ref.py MODEL.safetensors --prompt "1 2 3" --new N --threads T
                  [--runs R] [--no-cache-runs R]

Prints "torch tok_per_s=...", "torch nocache_tok_per_s=..." (medians over the
runs; tokens per second = new tokens / (prompt pass + decoding)) and
"torch ids=..." (the generated ids, for comparison with tfm's)."""
import argparse
import json
import re
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F


def load(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {})
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", name
        b, e = t["data_offsets"]
        tensors[name] = torch.from_numpy(
            np.frombuffer(data[b:e], dtype=np.float32).reshape(t["shape"]).copy())
    cfg = meta.get("config", "")

    def key(k, default):
        m = re.search(r"^\s*%s:\s*(\S+)" % k, cfg, re.M)
        return m.group(1) if m else default
    n_layer = 0
    while "h.%d.ln_1.weight" % n_layer in tensors:
        n_layer += 1
    C = tensors["wte.weight"].shape[1]
    conf = dict(n_layer=n_layer, n_head=int(key("n_head", max(1, C // 64))),
                eps=float(key("ln_eps", "1e-5")), norm=key("norm", "pre"))
    assert conf["norm"] == "pre", "the reference implements pre-LN (GPT-2) only"
    return tensors, conf


class GPT:
    def __init__(self, t, conf):
        self.t, self.L, self.nh, self.eps = t, conf["n_layer"], conf["n_head"], conf["eps"]
        self.C = t["wte.weight"].shape[1]
        self.head = t.get("lm_head.weight", t["wte.weight"])

    def forward(self, ids, pos0, cache):
        """ids: [T] new tokens at positions pos0..; cache: per layer [K, V]
        of shape [nh, pos0, hs] (extended in place).  Logits of the last."""
        t, C, nh = self.t, self.C, self.nh
        hs = C // nh
        T = ids.shape[0]
        x = t["wte.weight"][ids] + t["wpe.weight"][pos0:pos0 + T]
        for l in range(self.L):
            p = "h.%d." % l
            h = F.layer_norm(x, (C,), t[p + "ln_1.weight"], t[p + "ln_1.bias"], self.eps)
            qkv = torch.addmm(t[p + "attn.c_attn.bias"], h, t[p + "attn.c_attn.weight"])
            q, k, v = (z.view(T, nh, hs).transpose(0, 1) for z in qkv.split(C, dim=1))
            if cache[l] is not None:
                k = torch.cat([cache[l][0], k], dim=1)
                v = torch.cat([cache[l][1], v], dim=1)
            cache[l] = (k, v)
            att = (q @ k.transpose(-1, -2)) * (1.0 / hs ** 0.5)
            if T > 1:
                S = k.shape[1]
                mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
                att = att.masked_fill(~mask, float("-inf"))
            y = (att.softmax(-1) @ v).transpose(0, 1).reshape(T, C)
            x = x + torch.addmm(t[p + "attn.c_proj.bias"], y, t[p + "attn.c_proj.weight"])
            h = F.layer_norm(x, (C,), t[p + "ln_2.weight"], t[p + "ln_2.bias"], self.eps)
            h = F.gelu(torch.addmm(t[p + "mlp.c_fc.bias"], h, t[p + "mlp.c_fc.weight"]),
                       approximate="tanh")
            x = x + torch.addmm(t[p + "mlp.c_proj.bias"], h, t[p + "mlp.c_proj.weight"])
        x = F.layer_norm(x[-1:], (C,), t["ln_f.weight"], t["ln_f.bias"], self.eps)
        return (x @ self.head.T)[0]

    def greedy(self, prompt, new, use_cache=True):
        ids = list(prompt)
        if use_cache:
            cache = [None] * self.L
            logits = self.forward(torch.tensor(ids), 0, cache)
            for i in range(new):
                tok = int(torch.argmax(logits))
                ids.append(tok)
                if i + 1 < new:
                    logits = self.forward(torch.tensor([tok]), len(ids) - 1, cache)
        else:
            for i in range(new):
                logits = self.forward(torch.tensor(ids), 0, [None] * self.L)
                ids.append(int(torch.argmax(logits)))
        return ids[len(prompt):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-cache-runs", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t, conf = load(a.model)
    m = GPT(t, conf)
    prompt = [int(x) for x in a.prompt.split()]
    with torch.no_grad():
        ids = m.greedy(prompt, min(a.new, 4))  # warm-up
        rates = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            ids = m.greedy(prompt, a.new)
            rates.append(a.new / (time.perf_counter() - t0))
        print("torch tok_per_s=%.1f" % statistics.median(rates))
        if a.no_cache_runs > 0:
            rates = []
            for _ in range(a.no_cache_runs):
                t0 = time.perf_counter()
                ids2 = m.greedy(prompt, a.new, use_cache=False)
                rates.append(a.new / (time.perf_counter() - t0))
            print("torch nocache_tok_per_s=%.1f" % statistics.median(rates))
            if ids2 != ids:
                print("torch note: cached and uncached tokens differ")
    print("torch ids=%s" % " ".join(map(str, ids)))


if __name__ == "__main__":
    main()
