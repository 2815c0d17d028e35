#!/usr/bin/python3
"""Grouped-query and multi-query attention (model.n_kv_head 2 and 1 under 4
query heads, RoPE) through the programs, against PyTorch 2 in float64
(torch.nn.functional.scaled_dot_product_attention with enable_gqa=True; the
reference itself checked against key/value heads repeated with
repeat_interleave):

(a) tfm-train: attn.c_attn is [C, D + 2K] (K = n_kv_head·head_dim); a few
AdamW steps (warmup, cosine, clipping) on the batches of tfm's data stream
(tests/train_torch.py's re-implementation) give the same per-step losses
and gradient norms, and the same updated weights, to 1e-4.

(b) The trained file: tfm-generate's greedy ids equal PyTorch's and its
log-probabilities (the cached decode: a cache of n_kv_head heads) equal
PyTorch's log-softmax to 1e-4, --no-cache's (every step's sequence again)
the cached ones to 1e-5; tfm-eval perplexity --token-logprobs (the
whole sequence at once, no cache) too, and equals the cached decode's to
1e-5; a beam's score is PyTorch's log-probability of its tokens; tfm-eval
info reports n_kv_head.

The same (a) and (b) with a sliding window (model.attention_window 5 over
16 positions: Mistral's causal window, a boolean mask to SDPA) in
training, the cached decode, --no-cache and the whole-sequence forward.

(c) LoRA on q, k, v and o of the GQA model (k and v adapters K wide):
tfm-train's merged model is base + (alpha/r)·B·A in q's, k's and v's own
columns; tfm-generate --adapter on the base loads the adapter and generates
PyTorch's greedy tokens and log-probabilities of that merged model."""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_torch  # noqa: E402  (tfm's data stream, safetensors reading)

BUILD = os.environ.get("TFM_BUILDDIR", ".")
EXE = lambda name: os.path.join(BUILD, name)
L, NH, C, T, V = 2, 4, 32, 16, 23
HS = C // NH
ROPE_BASE = 10000.0
TOL = 1e-4
WINDOW = 0  # model.attention_window of the case being checked (main sets it)


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s: exit %d\n%s" % (" ".join(map(str, args)), r.returncode, r.stderr))
    return r.stdout


def rope(z, pos):
    """tfm's rotation in halves (model/transformer.h) of z [B, heads, T, HS]."""
    d = torch.arange(HS // 2, dtype=torch.float64)
    theta = pos.to(torch.float64)[:, None] * ROPE_BASE ** (-2.0 * d / HS)
    cos, sin = torch.cos(theta), torch.sin(theta)
    a, b = z[..., :HS // 2], z[..., HS // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def attend(q, k, v, repeat):
    """Causal attention of q [B, NH, T, HS] over k, v [B, NKV, T, HS], within
    the last WINDOW keys when WINDOW is set."""
    n = q.shape[-2]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    mask = (j <= i) & ((i - j < WINDOW) if WINDOW else True)
    if not repeat:
        if not WINDOW:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ k.transpose(-2, -1) / math.sqrt(HS)
    s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


def logits_of(P, nkv, x, repeat=False):
    """The pre-LN RoPE decoder with nkv key/value heads: x [B, T] -> [B, T, V]."""
    B, n = x.shape
    D, K = NH * HS, nkv * HS
    pos = torch.arange(n)
    ln = lambda t, k: F.layer_norm(t, (C,), P[k + ".weight"], P[k + ".bias"], 1e-5)
    lin = lambda t, k: t @ P[k + ".weight"] + P[k + ".bias"]
    h = P["wte.weight"][x]
    for i in range(L):
        p = "h.%d." % i
        q, k, v = lin(ln(h, p + "ln_1"), p + "attn.c_attn").split([D, K, K], dim=-1)
        q = rope(q.reshape(B, n, NH, HS).transpose(1, 2), pos)
        k = rope(k.reshape(B, n, nkv, HS).transpose(1, 2), pos)
        v = v.reshape(B, n, nkv, HS).transpose(1, 2)
        o = attend(q, k, v, repeat).transpose(1, 2).reshape(B, n, D)
        h = h + lin(o, p + "attn.c_proj")
        f = F.gelu(lin(ln(h, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
        h = h + lin(f, p + "mlp.c_proj")
    return ln(h, "ln_f") @ P["wte.weight"].T


def compare(what, got, want, bad, tol=TOL):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    err = np.abs(got - want).max() if got.shape == want.shape else float("inf")
    scale = max(1.0, np.abs(want).max())
    print("%s: max |tfm - torch| = %.3g (scale %.3g)" % (what, err, scale))
    if not err <= tol * scale:
        bad.append("%s: %.3g > %g x %.3g" % (what, err, tol, scale))


def as64(P):
    return {k: v.double() for k, v in P.items()}


# ---- (a) training ------------------------------------------------------------

def check_training(work, nkv, bad):
    B, STEPS = 3, 4
    LR, MIN_LR, WARMUP, WD, B1, B2, EPS, SEED, CLIP = 1e-2, 1e-3, 2, 0.1, 0.9, 0.95, 1e-6, 11, 1.0
    rs = np.random.RandomState(0)
    data = (np.arange(3000) * 7 + rs.randint(0, 3, 3000)) % V
    npy = os.path.join(work, "train.npy")
    np.save(npy, data.astype(np.uint16))
    cfg = os.path.join(work, "gqa%d-%d.yaml" % (nkv, WINDOW))
    with open(cfg, "w") as f:
        f.write("model: {n_layer: %d, n_head: %d, n_kv_head: %d, n_embd: %d, block_size: %d, "
                "positions: rope, attention_window: %d}\n" % (L, NH, nkv, C, T, WINDOW))
        f.write("data: {train: %s}\n" % npy)
        f.write("optim: {type: adamw, lr: %g, beta1: %g, beta2: %g, eps: %g, "
                "weight_decay: %g, grad_clip: %g}\n" % (LR, B1, B2, EPS, WD, CLIP))
        f.write("schedule: {warmup: %d, decay: cosine, min_lr: %g}\n" % (WARMUP, MIN_LR))
        f.write("train: {batch_size: %d, grad_accum: 1, max_steps: %d, log_interval: 1, "
                "seed: %d, eval_interval: 0}\n" % (B, STEPS, SEED))
    r0, r1 = (os.path.join(work, "r0-%d-%d" % (nkv, WINDOW)),
              os.path.join(work, "r-%d-%d" % (nkv, WINDOW)))
    common = [EXE("tfm-train"), "-q", "-c", cfg, "--threads", "1"]
    run(*common, "--set", "train.max_steps=0", "-o", r0)
    run(*common, "-o", r1)
    P0, _ = train_torch.read_safetensors(os.path.join(r0, "model.safetensors"))
    P1, _ = train_torch.read_safetensors(os.path.join(r1, "model.safetensors"))
    want = [C, (NH + 2 * nkv) * HS]
    if list(P0["h.0.attn.c_attn.weight"].shape) != want:
        bad.append("n_kv_head %d: attn.c_attn is %s, not %s" % (
            nkv, list(P0["h.0.attn.c_attn.weight"].shape), want))
        return None
    with open(os.path.join(r1, "log.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    tfm_losses, tfm_norms = [float(r[1]) for r in rows], [float(r[4]) for r in rows]

    params = {k: v.double().requires_grad_(True) for k, v in P0.items()}
    # the reference's attention: SDPA's grouped heads = repeated heads
    x = torch.tensor(data[None, :T], dtype=torch.long)
    with torch.no_grad():
        a, b = logits_of(params, nkv, x), logits_of(params, nkv, x, repeat=True)
    assert (a - b).abs().max().item() < 1e-10, "SDPA enable_gqa disagrees with repeat_interleave"
    decay = [v for v in params.values() if v.dim() == 2]
    rest = [v for v in params.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": rest, "weight_decay": 0.0}], lr=LR, betas=(B1, B2),
                            eps=EPS)
    rng = train_torch.Rng(SEED ^ train_torch.DATA_SEED_SALT)
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad()
        xs, ys = [], []
        for _ in range(B):
            s = rng.below(len(data) - T)
            xs.append(data[s:s + T])
            ys.append(data[s + 1:s + T + 1])
        x = torch.tensor(np.array(xs), dtype=torch.long)
        y = torch.tensor(np.array(ys), dtype=torch.long)
        loss = F.cross_entropy(logits_of(params, nkv, x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), CLIP)))
        if step < WARMUP:
            lr = LR * (step + 1) / WARMUP
        else:
            p = (step - WARMUP) / (STEPS - WARMUP)
            lr = MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * p))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(loss.item())
    what = "n_kv_head %d%s training" % (nkv, " window %d" % WINDOW if WINDOW else "")
    if len(tfm_losses) != STEPS:
        bad.append("%s: %d logged steps" % (what, len(tfm_losses)))
        return None
    compare(what + ": per-step losses", tfm_losses, losses, bad)
    compare(what + ": per-step gradient norms", tfm_norms, norms, bad, 1e-3)
    worst, name = 0.0, ""
    for k, v in params.items():
        d = (P1[k].double() - v.detach()).abs().max().item()
        if d > worst:
            worst, name = d, k
    moved = max((P1[k] - P0[k]).abs().max().item() for k in P0)
    print("%s: updated weights max |tfm - torch| = %.3g (%s; the steps moved them by %.3g)" % (
        what, worst, name, moved))
    if not worst <= TOL or not moved > 1e-3:
        bad.append("%s: updated weights differ by %.3g (%s), moved %.3g" % (what, worst, name,
                                                                          moved))
    return r1


# ---- (b) inference -----------------------------------------------------------

def generate(model, prompt, n, *extra):
    out = run(EXE("tfm-generate"), "-q", "--threads", "2", "-m", model, "--ids", "--ignore-eos",
              "-n", n, "--json", *extra, " ".join(map(str, prompt)))
    return json.loads(out.splitlines()[0])


def token_logprobs(model, ids, work, *extra):
    npy = os.path.join(work, "seq.npy")
    np.save(npy, np.array(ids, np.uint16))
    out = run(EXE("tfm-eval"), "perplexity", "-q", "--threads", "2", "-m", model, "--tokens",
              npy, "--context", len(ids), "--token-logprobs", "-", *extra).splitlines()
    rows = [line.split("\t") for line in out if line and line[0].isdigit()]
    return {int(r[0]): float(r[2]) for r in rows if len(r) == 3}


def torch_greedy(P, nkv, prompt, n):
    seq, lps = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            lp = logits_of(P, nkv, torch.tensor([seq]))[0, -1].log_softmax(-1)
            t = int(lp.argmax())
            seq.append(t)
            lps.append(lp[t].item())
    return seq[len(prompt):], lps


def torch_logprobs(P, nkv, ids):
    with torch.no_grad():
        lp = logits_of(P, nkv, torch.tensor([ids]))[0].log_softmax(-1)
    return [lp[t - 1, ids[t]].item() for t in range(1, len(ids))]


def check_inference(work, model, P, nkv, bad, what, *extra):
    prompt, N = [5, 17, 3, 9, 14, 2], 10
    want_ids, want_lp = torch_greedy(P, nkv, prompt, N)
    g = generate(model, prompt, N, "--greedy", *extra)
    if g["ids"] != want_ids:
        bad.append("%s: greedy ids tfm %s, torch %s" % (what, g["ids"], want_ids))
        return
    compare(what + ": tfm-generate (cached) log-probs", g["logprobs"], want_lp, bad)
    nc = generate(model, prompt, N, "--greedy", "--no-cache", *extra)
    if nc["ids"] != g["ids"]:
        bad.append("%s: --no-cache ids %s, cached %s" % (what, nc["ids"], g["ids"]))
    compare(what + ": tfm-generate --no-cache vs cached", nc["logprobs"], g["logprobs"], bad,
            1e-5)
    seq = prompt + want_ids
    got = token_logprobs(model, seq, work, *extra)
    want = torch_logprobs(P, nkv, seq)
    if sorted(got) != list(range(1, len(seq))):
        bad.append("%s: tfm-eval scored positions %s" % (what, sorted(got)))
        return
    compare(what + ": tfm-eval (whole sequence) log-probs", [got[k] for k in sorted(got)],
            want, bad)
    compare(what + ": cached decode vs whole sequence", g["logprobs"],
            [got[k] for k in range(len(prompt), len(seq))], bad, 1e-5)
    b = generate(model, prompt, 6, "--beam", "3", "--lenpen", "0", *extra)
    s = sum(torch_logprobs(P, nkv, prompt + b["ids"])[len(prompt) - 1:])
    print("%s: beam score %.5f, torch %.5f, greedy %.5f" % (what, b["score"], s,
                                                            sum(want_lp[:6])))
    # (a beam of 3 may prune the greedy path: its score need not be above greedy's)
    if abs(b["score"] - s) > 1e-4 * 6:
        bad.append("%s: beam score %.6f, torch %.6f" % (what, b["score"], s))


def check_info(model, nkv, bad):
    info = dict(line.split("\t", 1) for line in
                run(EXE("tfm-eval"), "info", "-m", model).splitlines() if "\t" in line)
    if info.get("n_kv_head") != str(nkv) or info.get("n_head") != str(NH):
        bad.append("tfm-eval info: n_head %s, n_kv_head %s" % (info.get("n_head"),
                                                              info.get("n_kv_head")))


# ---- (c) LoRA ----------------------------------------------------------------

def check_lora(work, base, nkv, bad):
    out = os.path.join(work, "lora-%d" % nkv)
    run(EXE("tfm-train"), "-q", "--threads", "1", "--set", "train.init=" + base, "--set",
        "data.train=" + os.path.join(work, "train.npy"), "--set", "train.lora.r=2", "--set",
        "train.lora.alpha=6", "--set", "train.lora.targets=q, k, v, o", "--set",
        "optim.lr=3e-2", "--set", "train.batch_size=3", "--set", "train.max_steps=3", "--set",
        "train.eval_interval=0", "-o", out)
    Pb, _ = train_torch.read_safetensors(base)
    A, _ = train_torch.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    M, _ = train_torch.read_safetensors(os.path.join(out, "model.safetensors"))
    with open(os.path.join(out, "adapter_config.json")) as f:
        ac = json.load(f)
    s = ac["lora_alpha"] / ac["r"]
    D, K = NH * HS, nkv * HS
    P = as64(Pb)
    what = "n_kv_head %d LoRA" % nkv
    for i in range(L):
        for mod, col, width in (("attn.q", 0, D), ("attn.k", D, K), ("attn.v", D + K, K)):
            pre = "base_model.model.h.%d.%s." % (i, mod)
            a, b = A[pre + "lora_A.weight"].double(), A[pre + "lora_B.weight"].double()
            if list(b.shape) != [width, 2]:
                bad.append("%s: %s lora_B is %s, not [%d, 2]" % (what, mod, list(b.shape), width))
                return
            P["h.%d.attn.c_attn.weight" % i][:, col:col + width] += s * (b @ a).T
        pre = "base_model.model.h.%d.attn.c_proj." % i
        P["h.%d.attn.c_proj.weight" % i] += s * (A[pre + "lora_B.weight"].double() @
                                                 A[pre + "lora_A.weight"].double()).T
    moved = max((P[k] - Pb[k].double()).abs().max().item() for k in P)
    worst = max((M[k].double() - P[k]).abs().max().item() for k in P)
    print("%s: merged model vs base + s·B·A in q, k, v's columns: max |diff| %.3g (moved %.3g)"
          % (what, worst, moved))
    if not worst <= 1e-5 or not moved > 1e-4:
        bad.append("%s: merged model differs by %.3g (adapters moved %.3g)" % (what, worst, moved))
    check_inference(work, base, P, nkv, bad, what + " (--adapter)", "--adapter", out)


def main():
    global WINDOW
    torch.set_num_threads(2)
    work = tempfile.mkdtemp(prefix="tfm-gqa-torch.")
    bad = []
    try:
        for nkv, window in ((2, 0), (1, 0), (2, 5)):
            WINDOW = window
            r = check_training(work, nkv, bad)
            if not r:
                continue
            model = os.path.join(r, "model.safetensors")
            P = as64(train_torch.read_safetensors(model)[0])
            what = "n_kv_head %d" % nkv + (" window %d" % window if window else "")
            check_inference(work, model, P, nkv, bad, what)
            check_info(model, nkv, bad)
            if window:
                info = json.loads(run(EXE("tfm-eval"), "info", "--json", "-m", model))
                if info.get("attention_window") != window:
                    bad.append("tfm-eval info: attention_window %s" % info.get("attention_window"))
                continue
            check_lora(work, model, nkv, bad)
    finally:
        shutil.rmtree(work)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
