"""tfm-train's whole training step against PyTorch: the same initial weights
(read from a 0-step run), the same batches (tfm's xoshiro256** data stream
re-implemented here), gradient accumulation, clipping by global norm,
warmup + cosine schedule, AdamW with decay on matrices only.  The per-step
losses and the final weights must agree closely."""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1
DATA_SEED_SALT = 0xD1B54A32D192ED03


class Rng:
    """base/rng.c: xoshiro256** seeded through splitmix64."""

    def __init__(self, seed):
        self.s = []
        x = seed & M64
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    def u64(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        limit = M64 - (M64 % n)
        while True:
            x = self.u64()
            if x < limit:
                return x % n


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F32"
        a, b = t["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(blob[base + a:base + b], dtype="<f4").reshape(t["shape"]).copy())
    return out, meta


def forward(P, L, H, x, y, smoothing=0.0, blk=None):
    """GPT-2's pre-LN decoder; blk may change its block (model.norm_type
    rmsnorm, model.ffn geglu or swiglu, model.attn_scale false)."""
    blk = blk or {}
    B, T = x.shape
    C = P["wte.weight"].shape[1]
    h = P["wte.weight"][x] + P["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def norm(t, n):
        if blk.get("norm_type") == "rmsnorm":
            return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * P[n + ".weight"]
        return F.layer_norm(t, (C,), P[n + ".weight"], P[n + ".bias"], 1e-5)

    def lin(t, n):
        b = P.get(n + ".bias")
        return t @ P[n + ".weight"] + (b if b is not None else 0)

    for i in range(L):
        p = lambda n: "h.%d.%s" % (i, n)
        a = norm(h, p("ln_1"))
        qkv = lin(a, p("attn.c_attn"))
        q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2)]
        att = q @ k.transpose(-2, -1)
        if blk.get("attn_scale", True):
            att = att / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, C)
        h = h + lin(o, p("attn.c_proj"))
        a = norm(h, p("ln_2"))
        ffn = blk.get("ffn", "plain")
        if ffn == "plain":
            f = F.gelu(lin(a, p("mlp.c_fc")), approximate="tanh")
        else:
            gate = lin(a, p("mlp.wi_0"))
            gate = F.gelu(gate, approximate="tanh") if ffn == "geglu" else F.silu(gate)
            f = gate * lin(a, p("mlp.wi_1"))
        h = h + lin(f, p("mlp.c_proj"))
    h = norm(h, "ln_f")
    head = P["lm_head.weight"] if "lm_head.weight" in P else P["wte.weight"]
    logits = h @ head.t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                           label_smoothing=smoothing)


def main():
    builddir = os.environ.get("TFM_BUILDDIR", ".")
    exe = os.path.join(builddir, "tfm-train")
    work = tempfile.mkdtemp(prefix="tfm-train-torch.")
    try:
        # AdamW, warmup + cosine, clipping, tied head
        run(exe, work, "adamw", "cosine", 0.5, 0.0, True)
        # Adam with L2 decay, linear decay, no clipping, untied head, label smoothing
        run(exe, work, "adam", "linear", 0.0, 0.1, False)
        # the block's other kinds: RMSNorm, gated feed-forwards, unscaled
        # attention, with and without biases
        run(exe, work, "adamw", "cosine", 0.5, 0.0, True,
            dict(norm_type="rmsnorm", ffn="swiglu", attn_scale=False, bias=False))
        run(exe, work, "adamw", "linear", 1.0, 0.0, False, dict(ffn="geglu"))
    finally:
        shutil.rmtree(work)


def run(exe, work, OPT, DECAY, CLIP, SMOOTH, TIE, blk=None):
    print("== %s, %s, clip %g, label smoothing %g, %s head%s" %
          (OPT, DECAY, CLIP, SMOOTH, "tied" if TIE else "untied",
           "".join(", %s %s" % kv for kv in (blk or {}).items())))
    for d in ("r0", "r"):
        shutil.rmtree(os.path.join(work, d), ignore_errors=True)
    L, H, C, T, B, ACC, STEPS = 2, 2, 16, 8, 3, 2, 8
    LR, MIN_LR, WARMUP, WD, B1, B2, EPS, SEED = 1e-2, 1e-3, 3, 0.1, 0.9, 0.95, 1e-6, 11
    rs = np.random.RandomState(0)
    data = (np.arange(3000) * 7 + rs.randint(0, 3, 3000)) % 23
    np.save(os.path.join(work, "train.npy"), data.astype(np.uint16))
    cfg = os.path.join(work, "run.yaml")
    with open(cfg, "w") as f:
        extra = "".join(", %s: %s" % (k, "true" if v is True else "false" if v is False else v)
                        for k, v in (blk or {}).items())
        f.write("model: {n_layer: %d, n_head: %d, n_embd: %d, block_size: %d, "
                "tie_embeddings: %s%s}\n" % (L, H, C, T, "true" if TIE else "false", extra))
        f.write("data: {train: %s}\n" % os.path.join(work, "train.npy"))
        f.write("optim: {type: %s, lr: %g, beta1: %g, beta2: %g, eps: %g, "
                "weight_decay: %g, grad_clip: %g}\n" % (OPT, LR, B1, B2, EPS, WD, CLIP))
        f.write("schedule: {warmup: %d, decay: %s, min_lr: %g}\n" % (WARMUP, DECAY, MIN_LR))
        f.write("train: {batch_size: %d, grad_accum: %d, max_steps: %d, log_interval: 1, "
                "seed: %d, label_smoothing: %g}\n" % (B, ACC, STEPS, SEED, SMOOTH))
    common = [exe, "-q", "-c", cfg, "--threads", "1"]
    subprocess.run(common + ["--set", "train.max_steps=0", "-o", os.path.join(work, "r0")],
                   check=True)
    subprocess.run(common + ["-o", os.path.join(work, "r")], check=True)
    P0, _ = read_safetensors(os.path.join(work, "r0", "model.safetensors"))
    P1, meta = read_safetensors(os.path.join(work, "r", "model.safetensors"))
    assert "config" in meta and meta["format"] == "tfm-gpt"
    with open(os.path.join(work, "r", "log.tsv")) as f:
        rows = [l.rstrip("\n").split("\t") for l in f][1:]
    tfm_losses = [float(r[1]) for r in rows]
    tfm_norms = [float(r[4]) for r in rows]

    params = {k: v.clone().requires_grad_(True) for k, v in P0.items()}
    decay = [v for v in params.values() if v.dim() == 2]
    no_decay = [v for v in params.values() if v.dim() < 2]
    Opt = torch.optim.AdamW if OPT == "adamw" else torch.optim.Adam
    opt = Opt([{"params": decay, "weight_decay": WD},
               {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(B1, B2), eps=EPS)
    rng = Rng(SEED ^ DATA_SEED_SALT)
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for _ in range(ACC):
            xs, ys = [], []
            for _ in range(B):
                s = rng.below(len(data) - T)
                xs.append(data[s:s + T])
                ys.append(data[s + 1:s + T + 1])
            x = torch.tensor(np.array(xs), dtype=torch.long)
            y = torch.tensor(np.array(ys), dtype=torch.long)
            loss = forward(params, L, H, x, y, SMOOTH, blk)
            (loss / ACC).backward()
            total += loss.item() / ACC
        if CLIP > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), CLIP)))
        else:
            norms.append(math.sqrt(sum(float((v.grad.double() ** 2).sum())
                                       for v in params.values())))
        if step < WARMUP:
            lr = LR * (step + 1) / WARMUP
        else:
            p = (step - WARMUP) / (STEPS - WARMUP)
            if DECAY == "cosine":
                lr = MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * p))
            else:
                lr = MIN_LR + (LR - MIN_LR) * (1 - p)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(total)

    bad = 0
    for i, (a, b) in enumerate(zip(tfm_losses, losses)):
        if abs(a - b) > 1e-4 * max(1.0, abs(b)):
            print("step %d: loss tfm %.6f torch %.6f" % (i + 1, a, b))
            bad += 1
    for i, (a, b) in enumerate(zip(tfm_norms, norms)):
        if abs(a - b) > 1e-3 * max(1.0, abs(b)):
            print("step %d: grad norm tfm %.6g torch %.6g" % (i + 1, a, b))
            bad += 1
    assert len(tfm_losses) == STEPS, tfm_losses
    worst = 0.0
    for k, v in params.items():
        d = (P1[k] - v.detach()).abs().max().item()
        worst = max(worst, d)
        if d > 1e-4:
            print("%s: max |tfm - torch| = %.3g" % (k, d))
            bad += 1
    moved = max((P1[k] - P0[k]).abs().max().item() for k in P0)
    print("losses tfm %s" % " ".join("%.5f" % l for l in tfm_losses))
    print("losses torch %s" % " ".join("%.5f" % l for l in losses))
    print("largest weight difference %.3g (weights moved by up to %.3g)" % (worst, moved))
    assert moved > 10 * LR * 0.1, "training did not move the weights"
    assert TIE == ("lm_head.weight" not in P1)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
