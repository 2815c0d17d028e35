#!/usr/bin/python3
"""PyTorch reference for scripts/bench/t5: T5 span-corruption pre-training of
the model in a tfm model file, on the sequences tfm-train --dump-batches
printed, with tfm's optimizer and schedule.

  t5_ref.py --batches d.jsonl --init init.safetensors --steps N
            [--threads 2] [--log ref.tsv] [--start ID] [--pad ID]
  t5_ref.py --init init.safetensors --write-random OUT.safetensors [--seed 1]

--init: a tfm model file (tfm-train with train.max_steps 0 writes the
initial weights of a run with that seed); its metadata give the model
(model:), the optimizer (optim:), the schedule (schedule:) and the batch size
(train.batch_size); --steps stands for train.max_steps (the cosine decay
ends there).  --batches: JSON lines with input_ids and target_ids, taken in
order, batch_size of them a step (at least steps x batch_size lines).
The decoder's first input is model.decoder_start, else the tokenizer's
(in the file) beginning-of-text, else its end-of-text, as tfm picks it;
shorter rows are padded with its pad token, else end-of-text (span
corruption's rows all have the same lengths: no padding); --start and --pad
override them.

The model is T5's computation (HF modeling_t5.py, written out here; no
transformers library): token embedding unscaled, shared by encoder and
decoder; pre-norm blocks with T5LayerNorm (x / sqrt(mean(x^2) + eps) times
a weight, no mean, no bias); attention without biases and without the
1/sqrt(d) scale; one relative-position bias table per stack, used by all its
blocks, bidirectional buckets in the encoder and causal ones in the decoder,
none in cross-attention; ReLU feed-forward without biases; a final norm per
stack; the LM head tied to the embedding, reading the hidden states times
d_model^-0.5.  Loss: mean cross-entropy over the target tokens.  Training:
AdamW (decay on matrices only: the embedding and the Linear weights, not
norms or bias tables), the global gradient norm clipped to optim.grad_clip,
lr linear warmup from lr/warmup at step 0 then cosine to min_lr at --steps
(tfm's lib/train/schedule.c).

--write-random: OUT gets --init's names, shapes, configuration and
tokenizer with random weights larger than an initialisation's (see
write_random), for checking that tfm and this reference compute the same
function where the logits and the attention are far from uniform.

stdout: "torch loss_step1=" and "torch grad_norm_step1=" (the first batch's
loss on the initial weights and the norm of its gradient, before clipping),
"torch ms_per_step=" (median of forward + backward + clip + step),
"torch train_loss=" (mean of the last 10 steps), "torch params=".  --log:
step<TAB>loss<TAB>grad_norm per step (as tfm's log.tsv has them).

Run it with BLIS_ARCH_TYPE from scripts/bench/blis_arch and
BLIS_NUM_THREADS = OMP_NUM_THREADS = --threads (scripts/bench/t5 does)."""
import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml


def load(path):
    """tfm's tensors by name (float32) and its configuration."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {})
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    t = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            sys.exit("t5_ref.py: %s: %s is %s, not F32" % (path, name, e["dtype"]))
        b, end = e["data_offsets"]
        t[name] = torch.from_numpy(np.frombuffer(data[b:end], dtype=np.float32)
                                   .reshape(e["shape"]).copy())
    return t, meta


def write_random(path, t, meta, seed):
    """A tfm model file of t's names and shapes (and meta's config and
    tokenizer; no checksum, which tfm's loader does not require) holding
    random weights large enough that every part of the model shows in the
    loss and its gradient: embeddings N(0, 1), matrices N(0, 1/fan_in)
    (unscaled attention scores of standard deviation about sqrt(head
    size)), relative-bias tables N(0, 1), norm weights 1 + N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    header, blobs, off = {}, [], 0
    for name, w in t.items():
        if name == "wte.weight" or "rel_bias" in name:
            r = torch.randn(w.shape, generator=g)
        elif w.dim() == 2:
            r = torch.randn(w.shape, generator=g) / math.sqrt(w.shape[0])
        else:
            r = 1 + 0.1 * torch.randn(w.shape, generator=g)
        b = r.float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(w.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {k: v for k, v in meta.items() if k != "checksum"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def specials(cfg, tok):
    """The decoder's first input and the padding, as tfm picks them
    (lib/train/task_internal.h, lib/text/tokenizer.c's guess): decoder_start
    when set, else the tokenizer's beginning-of-text, else its end-of-text;
    padding: its pad token, else end-of-text."""
    ids = {a["content"]: a["id"] for a in tok.get("added_tokens", []) if a.get("special")}

    def first(names):
        return next((ids[n] for n in names if n in ids), None)
    eos = first(("<|endoftext|>", "</s>", "<|eos|>", "[SEP]"))
    bos = first(("<|endoftext|>", "<s>", "<|bos|>", "[CLS]"))
    pad = first(("[PAD]", "<pad>", "<|pad|>"))
    start = int(cfg["model"].get("decoder_start", -1))
    if start < 0:
        start = bos if bos is not None else eos
    return start, pad if pad is not None else eos


def bucket(rel, bidirectional, n_buckets, max_distance):
    """HF's T5Attention._relative_position_bucket (rel = key - query)."""
    ret = torch.zeros_like(rel)
    if bidirectional:
        n_buckets //= 2
        ret += (rel > 0).long() * n_buckets
        n = rel.abs()
    else:
        n = -torch.min(rel, torch.zeros_like(rel))
    exact = n_buckets // 2
    large = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact)
                     * (n_buckets - exact)).long()
    large = torch.min(large, torch.full_like(large, n_buckets - 1))
    return ret + torch.where(n < exact, n, large)


class RMSNorm(nn.Module):
    """T5LayerNorm."""
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.q, self.k, self.v, self.o = (nn.Linear(C, C, bias=False) for _ in range(4))

    def forward(self, x, mem, bias):
        """x [B, T, C], mem [B, S, C], bias broadcastable to [B, H, T, S]
        (the position bias and -inf where masked); no 1/sqrt(d)."""
        B, T, C = x.shape
        S = mem.shape[1]
        hs = C // self.H
        q = self.q(x).view(B, T, self.H, hs).transpose(1, 2)
        k = self.k(mem).view(B, S, self.H, hs).transpose(1, 2)
        v = self.v(mem).view(B, S, self.H, hs).transpose(1, 2)
        a = (q @ k.transpose(-1, -2) + bias).softmax(-1)
        return self.o((a @ v).transpose(1, 2).reshape(B, T, C))


class FFN(nn.Module):
    def __init__(self, C, Fd):
        super().__init__()
        self.wi = nn.Linear(C, Fd, bias=False)
        self.wo = nn.Linear(Fd, C, bias=False)

    def forward(self, x):
        return self.wo(F.relu(self.wi(x)))


class Block(nn.Module):
    def __init__(self, C, H, Fd, eps, cross):
        super().__init__()
        self.ln_1, self.attn = RMSNorm(C, eps), Attention(C, H)
        if cross:
            self.ln_x, self.xattn = RMSNorm(C, eps), Attention(C, H)
        self.ln_2, self.mlp = RMSNorm(C, eps), FFN(C, Fd)

    def forward(self, x, bias, mem=None, mem_bias=None):
        h = self.ln_1(x)
        x = x + self.attn(h, h, bias)
        if mem is not None:
            x = x + self.xattn(self.ln_x(x), mem, mem_bias)
        return x + self.mlp(self.ln_2(x))


class T5(nn.Module):
    def __init__(self, m, V):
        super().__init__()
        C, H = int(m["n_embd"]), int(m["n_head"])
        Fd = int(m["d_ff"]) if int(m.get("d_ff") or 0) else 4 * C
        eps = float(m["ln_eps"])
        Le = int(m.get("n_enc_layer") or 0) or int(m["n_layer"])
        self.C, self.H = C, H
        self.nb, self.maxd = int(m["t5_buckets"]), int(m["t5_max_distance"])
        self.wte = nn.Parameter(torch.zeros(V, C))
        self.enc_rel = nn.Parameter(torch.zeros(H, self.nb))
        self.dec_rel = nn.Parameter(torch.zeros(H, self.nb))
        self.enc = nn.ModuleList([Block(C, H, Fd, eps, False) for _ in range(Le)])
        self.dec = nn.ModuleList([Block(C, H, Fd, eps, True) for _ in range(int(m["n_layer"]))])
        self.enc_ln_f, self.ln_f = RMSNorm(C, eps), RMSNorm(C, eps)

    def position_bias(self, table, Tq, Tk, bidirectional):
        rel = torch.arange(Tk)[None, :] - torch.arange(Tq)[:, None]
        b = table[:, bucket(rel, bidirectional, self.nb, self.maxd)]  # [H, Tq, Tk]
        if not bidirectional:
            b = b.masked_fill(rel > 0, float("-inf"))
        return b[None]

    def forward(self, src, src_keep, dec_in):
        """src [B, S], src_keep [B, S] (False: padding), dec_in [B, T]:
        logits [B, T, V]."""
        S, T = src.shape[1], dec_in.shape[1]
        pad = torch.zeros(src_keep.shape).masked_fill(~src_keep, float("-inf"))[:, None, None, :]
        x = self.wte[src]
        bias = self.position_bias(self.enc_rel, S, S, True) + pad
        for blk in self.enc:
            x = blk(x, bias)
        mem = self.enc_ln_f(x)
        y = self.wte[dec_in]
        bias = self.position_bias(self.dec_rel, T, T, False)
        for blk in self.dec:
            y = blk(y, bias, mem, pad)
        return (self.ln_f(y) * self.C ** -0.5) @ self.wte.t()

    @torch.no_grad()
    def load_tfm(self, t):
        """tfm's names and layout (matrices [in, out]; c_attn = q | k | v,
        c_kv = k | v along the output)."""
        C = self.C
        used = set()

        def get(name):
            used.add(name)
            if name not in t:
                sys.exit("t5_ref.py: the model file has no %s" % name)
            return t[name]

        def lin(mod, w):
            mod.weight.copy_(w.t())

        self.wte.copy_(get("wte.weight"))
        self.enc_rel.copy_(get("enc.rel_bias.weight"))
        self.dec_rel.copy_(get("rel_bias.weight"))
        for pre, blocks in (("enc.h.", self.enc), ("h.", self.dec)):
            for i, blk in enumerate(blocks):
                p = "%s%d." % (pre, i)
                blk.ln_1.weight.copy_(get(p + "ln_1.weight"))
                qkv = get(p + "attn.c_attn.weight")
                for j, mod in enumerate((blk.attn.q, blk.attn.k, blk.attn.v)):
                    lin(mod, qkv[:, j * C:(j + 1) * C])
                lin(blk.attn.o, get(p + "attn.c_proj.weight"))
                if hasattr(blk, "xattn"):
                    blk.ln_x.weight.copy_(get(p + "ln_x.weight"))
                    lin(blk.xattn.q, get(p + "xattn.c_q.weight"))
                    kv = get(p + "xattn.c_kv.weight")
                    lin(blk.xattn.k, kv[:, :C])
                    lin(blk.xattn.v, kv[:, C:])
                    lin(blk.xattn.o, get(p + "xattn.c_proj.weight"))
                blk.ln_2.weight.copy_(get(p + "ln_2.weight"))
                lin(blk.mlp.wi, get(p + "mlp.c_fc.weight"))
                lin(blk.mlp.wo, get(p + "mlp.c_proj.weight"))
        self.enc_ln_f.weight.copy_(get("enc.ln_f.weight"))
        self.ln_f.weight.copy_(get("ln_f.weight"))
        extra = sorted(set(t) - used)
        if extra:
            sys.exit("t5_ref.py: tensors this reference does not model: %s" % ", ".join(extra))


def check_config(m):
    """The model keys this reference implements; anything else is refused."""
    want = {"kind": "encoder-decoder", "positions": "t5", "norm": "pre",
            "norm_type": "rmsnorm", "activation": "relu", "ffn": "plain", "bias": False,
            "attn_scale": False, "tie_embeddings": True, "tie_source": True,
            "head_scale": True, "head_bias": False, "emb_scale": False, "emb_norm": False}
    bad = ["model.%s %s (not %s)" % (k, m.get(k), v) for k, v in want.items() if m.get(k) != v]
    if float(m.get("dropout", 0)) != 0:
        bad.append("model.dropout %s (not 0)" % m.get("dropout"))
    if bad:
        sys.exit("t5_ref.py: not the T5 this reference computes: " + "; ".join(bad))


def lr_at(lr, s, step, steps):
    """tfm_schedule_lr: linear warmup then cosine (or linear, constant) to
    min_lr at steps."""
    warm, lo = int(s["warmup"]), float(s["min_lr"])
    if step < warm:
        return lr * (step + 1) / warm
    if s["decay"] == "constant":
        return lr
    span = steps - warm
    p = min(max((step - warm) / span, 0.0), 1.0) if span > 0 else 1.0
    if s["decay"] == "linear":
        return lo + (lr - lo) * (1 - p)
    if s["decay"] != "cosine":
        sys.exit("t5_ref.py: schedule.decay %s is not implemented" % s["decay"])
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * p))


def batches(path, B, steps, start, pad):
    """Per step: src, src_keep, decoder input, labels (-100 ignored)."""
    rows = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            rows.append((r["input_ids"], r["target_ids"]))
            if len(rows) == B * steps:
                break
    if len(rows) < B * steps:
        sys.exit("t5_ref.py: %s: %d sequences, %d steps of %d need %d"
                 % (path, len(rows), steps, B, B * steps))
    out = []
    for i in range(steps):
        rs = rows[i * B:(i + 1) * B]
        S, T = max(len(s) for s, _ in rs), max(len(y) for _, y in rs)
        src = torch.full((B, S), pad, dtype=torch.long)
        keep = torch.zeros(B, S, dtype=torch.bool)
        dec = torch.full((B, T), pad, dtype=torch.long)
        lab = torch.full((B, T), -100, dtype=torch.long)
        for b, (s, y) in enumerate(rs):
            src[b, :len(s)] = torch.tensor(s)
            keep[b, :len(s)] = True
            lab[b, :len(y)] = torch.tensor(y)
            dec[b, 0] = start
            dec[b, 1:len(y)] = torch.tensor(y[:-1])
        out.append((src, keep, dec, lab))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches")
    ap.add_argument("--init", required=True)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--start", type=int)
    ap.add_argument("--pad", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log")
    ap.add_argument("--write-random", metavar="OUT")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t, meta = load(a.init)
    if a.write_random:
        write_random(a.write_random, t, meta, a.seed)
        return
    if not a.batches or not a.steps or a.steps < 1:
        ap.error("--batches and --steps N (N >= 1) are needed to train")
    cfg = yaml.safe_load(meta.get("config", "{}"))
    tok = json.loads(meta.get("tokenizer", "{}"))
    start, pad = specials(cfg, tok)
    start = start if a.start is None else a.start
    pad = pad if a.pad is None else a.pad
    if start is None:
        sys.exit("t5_ref.py: %s: no decoder start (model.decoder_start, <s>, </s>): give --start"
                 % a.init)
    m, o, s = cfg["model"], cfg["optim"], cfg["schedule"]
    check_config(m)
    B = int(cfg["train"]["batch_size"])
    V = t["wte.weight"].shape[0]
    model = T5(m, V)
    model.load_tfm(t)
    data = batches(a.batches, B, a.steps, start, pad)

    decay = [p for n, p in model.named_parameters() if n == "wte" or
             (p.dim() == 2 and not n.endswith("_rel"))]
    rest = [p for n, p in model.named_parameters() if not any(p is q for q in decay)]
    if o["type"] != "adamw":
        sys.exit("t5_ref.py: optim.type %s is not implemented" % o["type"])
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(o["weight_decay"])},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=float(o["lr"]), betas=(float(o["beta1"]), float(o["beta2"])),
                            eps=float(o["eps"]))
    clip = float(o["grad_clip"])
    params = list(model.parameters())
    log = open(a.log, "w") if a.log else None
    if log:
        log.write("step\tloss\tgrad_norm\n")
    times, losses, norms = [], [], []
    for step, (src, keep, dec, lab) in enumerate(data):
        lr = lr_at(float(o["lr"]), s, step, a.steps)
        for g in opt.param_groups:
            g["lr"] = lr
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(src, keep, dec)
        loss = F.cross_entropy(logits.view(-1, V), lab.view(-1), ignore_index=-100)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf).item()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        norms.append(norm)
        if log:
            log.write("%d\t%.6f\t%.6g\n" % (step + 1, losses[-1], norm))
        if step == 0 or (step + 1) % max(1, a.steps // 10) == 0:
            print("torch step %d/%d loss %.4f %.1f ms" % (step + 1, a.steps, losses[-1],
                                                         1000 * times[-1]), file=sys.stderr)
    if log:
        log.close()
    print("torch loss_step1=%.6f" % losses[0])
    print("torch grad_norm_step1=%.6g" % norms[0])
    print("torch ms_per_step=%.2f" % (1000 * statistics.median(times)))
    print("torch train_loss=%.4f" % statistics.mean(losses[-10:]))
    print("torch params=%d" % sum(p.numel() for p in params))


if __name__ == "__main__":
    main()
