#!/usr/bin/python3
"""Cross-check of the GPT model against PyTorch: the same weights and batch
through lib/model/transformer.c (via the tests/model_dump helper) and through a PyTorch
model written here from the definitions (float64), comparing the loss, the
logits and EVERY parameter gradient.

Tolerance: for each tensor, max |c - torch| <= 1e-4 * max |torch| (relative
to the tensor's scale: element-wise ratios are meaningless for entries that
are ~0); the loss within 1e-5 relative."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

BUILD = os.environ.get("TFM_BUILDDIR", ".")
DUMP = os.path.join(BUILD, "tests", "model_dump")


def torch_gpt(cfg, P, x, y):
    """Loss and logits of the documented model (lib/model/transformer.h), float64."""
    L, NH, C, V = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"]
    B, T = x.shape
    eps = cfg["ln_eps"]
    act = {0: lambda t: F.gelu(t, approximate="tanh"), 1: F.gelu, 2: F.relu}[cfg["act"]]
    ln = lambda t, n: F.layer_norm(t, (C,), P[n + ".weight"], P[n + ".bias"], eps)
    lin = lambda t, n: t @ P[n + ".weight"] + (P[n + ".bias"] if cfg["bias"] else 0)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def attn(t, i):
        qkv = lin(t, f"h.{i}.attn.c_attn")
        q, k, v = qkv.split(C, dim=2)
        heads = lambda z: z.view(B, T, NH, C // NH).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        s = (q @ k.transpose(-2, -1)) / (C // NH) ** 0.5
        s = s.masked_fill(~mask, float("-inf"))
        o = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        return lin(o, f"h.{i}.attn.c_proj")

    mlp = lambda t, i: lin(act(lin(t, f"h.{i}.mlp.c_fc")), f"h.{i}.mlp.c_proj")
    h = P["wte.weight"][x] + P["wpe.weight"][:T]
    for i in range(L):
        if cfg["ln"] == 0:
            h = h + attn(ln(h, f"h.{i}.ln_1"), i)
            h = h + mlp(ln(h, f"h.{i}.ln_2"), i)
        else:
            h = ln(h + attn(h, i), f"h.{i}.ln_1")
            h = ln(h + mlp(h, i), f"h.{i}.ln_2")
    if cfg["ln"] == 0:
        h = ln(h, "ln_f")
    head = P["wte.weight"] if cfg["tie"] else P["lm_head.weight"]
    logits = h @ head.T
    loss = F.cross_entropy(logits.view(-1, V), y.view(-1), ignore_index=-1,
                           label_smoothing=cfg["label_smoothing"])
    return loss, logits


def run_case(name, cfg, B, T, seed, threads, attn):
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as d:
        keys = ["n_layer", "n_head", "n_embd", "block_size", "vocab_size", "ln", "act",
                "tie", "bias", "label_smoothing", "ln_eps"]
        with open(os.path.join(d, "config.txt"), "w") as f:
            f.write(" ".join(str(cfg[k]) for k in keys) + f" {B} {T} {threads}\n")
        subprocess.run([DUMP, "table", d], check=True)
        table = []
        with open(os.path.join(d, "table.txt")) as f:
            for line in f:
                n, a, b = line.split()
                table.append((n, (int(a),) if int(b) == 0 else (int(a), int(b))))
        P = {}
        for n, shape in table:
            if ".ln_" in n or n.startswith("ln_"):
                base = 1.0 if n.endswith(".weight") else 0.0
                w = base + 0.1 * rng.standard_normal(shape)
            elif n.endswith(".bias"):
                w = 0.05 * rng.standard_normal(shape)
            else:
                w = 0.08 * rng.standard_normal(shape)
            P[n] = w.astype(np.float32)
        with open(os.path.join(d, "params.bin"), "wb") as f:
            for n, _ in table:
                f.write(P[n].astype("<f4").tobytes())
        V = cfg["vocab_size"]
        x = rng.integers(0, V, size=(B, T)).astype(np.int32)
        y = rng.integers(0, V, size=(B, T)).astype(np.int32)
        if cfg.get("ignore"):
            y[0, 1] = -1
            y[B - 1, T - 1] = -1
        with open(os.path.join(d, "batch.bin"), "wb") as f:
            f.write(x.astype("<i4").tobytes() + y.astype("<i4").tobytes())
        # fused loops or per-head BLIS attention; with BLIS, also the path
        # that recomputes the MLP activation in backward (big models)
        env = dict(os.environ, TFM_ATTN=attn)
        if attn == "blas":
            env["TFM_GPT_RECOMPUTE"] = "1"
        subprocess.run([DUMP, "run", d], check=True, env=env)
        out = np.fromfile(os.path.join(d, "out.bin"), dtype="<f4")

    Pt = {n: torch.tensor(w, dtype=torch.float64, requires_grad=True) for n, w in P.items()}
    loss, logits = torch_gpt(cfg, Pt, torch.tensor(x, dtype=torch.long),
                             torch.tensor(y, dtype=torch.long))
    loss.backward()
    ok = True
    c_loss = float(out[0])
    rel = abs(c_loss - loss.item()) / abs(loss.item())
    print(f"{name}: loss tfm {c_loss:.7f} torch {loss.item():.7f} rel {rel:.2e}")
    if rel > 1e-5:
        ok = False
        print(f"FAIL {name}: loss differs")
    pos = 1
    n_logits = B * T * V
    c_logits = out[pos:pos + n_logits].reshape(B, T, V)
    pos += n_logits
    err = np.abs(c_logits - logits.detach().numpy()).max() / np.abs(logits.detach().numpy()).max()
    if err > 1e-5:
        ok = False
        print(f"FAIL {name}: logits rel err {err:.2e}")
    worst = (0.0, "")
    for n, shape in table:
        k = int(np.prod(shape))
        g = out[pos:pos + k].reshape(shape)
        pos += k
        ref = Pt[n].grad.numpy()
        scale = np.abs(ref).max()
        e = np.abs(g - ref).max() / scale if scale > 0 else np.abs(g).max()
        if e > worst[0]:
            worst = (e, n)
        if not e <= 1e-4:
            ok = False
            print(f"FAIL {name}: {n} gradient max err {e:.2e} (scale {scale:.2e})")
    assert pos == len(out), "out.bin has the wrong size"
    print(f"{name}: {len(table)} gradients, worst {worst[0]:.2e} ({worst[1]})")
    return ok


def main():
    if not os.path.exists(DUMP):
        print(f"SKIP: {DUMP} not built")
        return 77
    torch.manual_seed(0)
    base = dict(n_layer=2, n_head=4, n_embd=64, block_size=40, vocab_size=67, ln=0, act=0,
                tie=1, bias=1, label_smoothing=0.0, ln_eps=1e-5)
    cases = [
        ("pre-LN GPT-2", dict(base), 4, 32),
        ("post-LN GPT-1, exact GELU, untied, smoothing 0.1, ignored targets",
         dict(base, ln=1, act=1, tie=0, label_smoothing=0.1, ignore=True), 3, 40),
        ("pre-LN ReLU, no bias, eps 1e-12", dict(base, act=2, bias=0, ln_eps=1e-12), 2, 17),
    ]
    ok = True
    for i, (name, cfg, B, T) in enumerate(cases):
        for threads, attn in ((1, "fused"), (2, "fused"), (2, "blas")):
            ok &= run_case(f"{name} [{threads} thread(s), {attn} attention]", cfg, B, T,
                           100 + i, threads, attn)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
