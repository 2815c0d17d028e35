#!/usr/bin/python3
"""PyTorch reference training for scripts/bench/seq2seq: the encoder-decoder
of the README's benchmark section ("Encoder-decoder, synthetic REVERSE and
SORT") on the same token ids as tfm-train.

  seq2seq_ref.py --train-src F --train-tgt F --test-src F --test-tgt F
        --vocab V [--pad 0 --bos 1 --eos 2] [--steps 3000] [--threads 2]
        [--seed 1] [--log ref.tsv] [--save ref.safetensors --like tfm.safetensors]

Files: one sentence a line, token ids separated by spaces (no BOS/EOS; as
tfm-tokenize encode prints them).  Training: --batch (64) pairs drawn
uniformly from the training pairs each step (as tfm-train with
train.max_tokens 0); the source is ids + EOS, the decoder input BOS + target,
the labels target + EOS, padded with --pad to the batch's longest.

The model (anchors.md): embedding·√C + sinusoidal positions (tfm's
interleaved sin/cos), dropout 0.1; 3 encoder and 3 decoder post-LN layers
(LayerNorm eps 1e-5, no final LN); 4 heads, separate Q/K/V/O with bias;
FFN C→4C→C ReLU; dropout 0.1 on the embeddings, the attention weights, the
FFN's hidden layer and every sublayer's output; one embedding shared by
source, target and output projection (no output bias).  Xavier-uniform
Linear weights, zero biases, embedding N(0, C^-0.5).  Loss: cross-entropy
with label smoothing 0.1 over all V classes (PyTorch's form), mean over
non-pad labels.  Adam (0.9, 0.98, 1e-9), no weight decay, no clipping; lr =
C^-0.5·min(s^-0.5, s·W^-1.5), s from 1, W = --warmup (400).

After training: greedy translation of the test sources (batches of 100,
maximum length = source length + 10, no cache) and exact match against the
test targets.  stdout ends with "torch ms_per_step=" (median), "torch
greedy_exact=" (fraction), "torch params=".  With --save, the final weights
are written under tfm's tensor names (fused c_attn and c_kv, matrices
[in, out]) with --like's config and tokenizer metadata (no checksum: read
by seq2seq_decode_ref.py, not by tfm).

Run it with BLIS_ARCH_TYPE from scripts/bench/blis_arch and
BLIS_NUM_THREADS = OMP_NUM_THREADS = --threads (scripts/bench/seq2seq does)."""
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


def sinusoid(T, C):
    """tfm's table (lib/nn/position.c): pe[p, 2i] = sin(p / 10000^(2i/C)),
    pe[p, 2i+1] = cos(same)."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    ang = pos / 10000.0 ** (torch.arange(0, C, 2, dtype=torch.float64) / C)
    pe = torch.zeros(T, C, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(ang)
    pe[:, 1::2] = torch.cos(ang)
    return pe.float()


class Attention(nn.Module):
    def __init__(self, C, H, p):
        super().__init__()
        self.H, self.p = H, p
        self.q, self.k, self.v, self.o = (nn.Linear(C, C) for _ in range(4))

    def forward(self, x, mem, mask):
        """x [B, T, C], mem [B, S, C], mask broadcastable to [B, H, T, S]
        (True: may attend)."""
        B, T, C = x.shape
        S = mem.shape[1]
        hs = C // self.H
        q = self.q(x).view(B, T, self.H, hs).transpose(1, 2)
        k = self.k(mem).view(B, S, self.H, hs).transpose(1, 2)
        v = self.v(mem).view(B, S, self.H, hs).transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hs))
        s = s.masked_fill(~mask, float("-inf"))
        a = F.dropout(s.softmax(-1), self.p, self.training)
        return self.o((a @ v).transpose(1, 2).reshape(B, T, C))


class FFN(nn.Module):
    def __init__(self, C, Fd, p):
        super().__init__()
        self.p = p
        self.fc = nn.Linear(C, Fd)
        self.proj = nn.Linear(Fd, C)

    def forward(self, x):
        return self.proj(F.dropout(F.relu(self.fc(x)), self.p, self.training))


class EncoderLayer(nn.Module):
    def __init__(self, C, H, Fd, p):
        super().__init__()
        self.p = p
        self.attn = Attention(C, H, p)
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = FFN(C, Fd, p)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)

    def forward(self, x, mask):
        x = self.ln_1(x + F.dropout(self.attn(x, x, mask), self.p, self.training))
        return self.ln_2(x + F.dropout(self.mlp(x), self.p, self.training))


class DecoderLayer(nn.Module):
    def __init__(self, C, H, Fd, p):
        super().__init__()
        self.p = p
        self.attn = Attention(C, H, p)
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.xattn = Attention(C, H, p)
        self.ln_x = nn.LayerNorm(C, eps=1e-5)
        self.mlp = FFN(C, Fd, p)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)

    def forward(self, x, mem, self_mask, src_mask):
        d = lambda y: F.dropout(y, self.p, self.training)  # noqa: E731
        x = self.ln_1(x + d(self.attn(x, x, self_mask)))
        x = self.ln_x(x + d(self.xattn(x, mem, src_mask)))
        return self.ln_2(x + d(self.mlp(x)))


class Seq2Seq(nn.Module):
    def __init__(self, V, C=128, H=4, Fd=512, L=3, p=0.1, pad=0, maxlen=256):
        super().__init__()
        self.C, self.p, self.pad = C, p, pad
        self.wte = nn.Embedding(V, C)
        self.enc = nn.ModuleList([EncoderLayer(C, H, Fd, p) for _ in range(L)])
        self.dec = nn.ModuleList([DecoderLayer(C, H, Fd, p) for _ in range(L)])
        self.register_buffer("pe", sinusoid(maxlen, C))
        for name, w in self.named_parameters():
            if name == "wte.weight":
                nn.init.normal_(w, 0.0, C ** -0.5)
            elif w.dim() == 2:
                nn.init.xavier_uniform_(w)
            elif ".ln_" in name and name.endswith("weight"):
                nn.init.ones_(w)
            else:
                nn.init.zeros_(w)

    def embed(self, tok):
        x = self.wte(tok) * math.sqrt(self.C) + self.pe[:tok.shape[1]]
        return F.dropout(x, self.p, self.training)

    def encode(self, src):
        mask = (src != self.pad)[:, None, None, :]
        x = self.embed(src)
        for layer in self.enc:
            x = layer(x, mask)
        return x, mask

    def decode(self, tgt_in, mem, src_mask):
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        x = self.embed(tgt_in)
        for layer in self.dec:
            x = layer(x, mem, causal, src_mask)
        return x @ self.wte.weight.t()

    def forward(self, src, tgt_in):
        mem, mask = self.encode(src)
        return self.decode(tgt_in, mem, mask)


def read_ids(path):
    with open(path) as f:
        return [[int(t) for t in line.split()] for line in f]


def pad_rows(rows, pad):
    T = max(len(r) for r in rows)
    out = torch.full((len(rows), T), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    return out


@torch.no_grad()
def greedy(model, srcs, a, batch=100):
    """Greedy translations (ids without EOS), batches of sources, the whole
    decoder prefix recomputed at each step."""
    model.eval()
    hyps = []
    for b0 in range(0, len(srcs), batch):
        chunk = srcs[b0:b0 + batch]
        src = pad_rows([s + [a.eos] for s in chunk], a.pad)
        mem, mask = model.encode(src)
        lims = [len(s) + a.max_len_b for s in chunk]
        out = [[] for _ in chunk]
        done = [False] * len(chunk)
        tgt = torch.full((len(chunk), 1), a.bos, dtype=torch.long)
        for _ in range(max(lims)):
            nxt = model.decode(tgt, mem, mask)[:, -1].argmax(-1)
            for i, v in enumerate(nxt.tolist()):
                if done[i]:
                    continue
                if v == a.eos:
                    done[i] = True
                else:
                    out[i].append(v)
                    done[i] = len(out[i]) >= lims[i]
            if all(done):
                break
            tgt = torch.cat([tgt, nxt[:, None]], 1)
        hyps += out
    return hyps


def save_tfm(model, path, like):
    """The weights under tfm's names and layout, with like's metadata."""
    with open(like, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    meta = {k: v for k, v in header.pop("__metadata__", {}).items() if k != "checksum"}
    T = lambda lin: lin.weight.detach().t()  # noqa: E731
    b = lambda lin: lin.bias.detach()  # noqa: E731
    t = {"wte.weight": model.wte.weight.detach()}

    def ln(name, m):
        t[name + ".weight"], t[name + ".bias"] = m.weight.detach(), m.bias.detach()

    def mlp(pre, m):
        t[pre + "mlp.c_fc.weight"], t[pre + "mlp.c_fc.bias"] = T(m.fc), b(m.fc)
        t[pre + "mlp.c_proj.weight"], t[pre + "mlp.c_proj.bias"] = T(m.proj), b(m.proj)

    for i, e in enumerate(model.enc):
        p = "enc.h.%d." % i
        t[p + "attn.c_attn.weight"] = torch.cat([T(e.attn.q), T(e.attn.k), T(e.attn.v)], 1)
        t[p + "attn.c_attn.bias"] = torch.cat([b(e.attn.q), b(e.attn.k), b(e.attn.v)])
        t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = T(e.attn.o), b(e.attn.o)
        ln(p + "ln_1", e.ln_1)
        ln(p + "ln_2", e.ln_2)
        mlp(p, e.mlp)
    for i, d in enumerate(model.dec):
        p = "h.%d." % i
        t[p + "attn.c_attn.weight"] = torch.cat([T(d.attn.q), T(d.attn.k), T(d.attn.v)], 1)
        t[p + "attn.c_attn.bias"] = torch.cat([b(d.attn.q), b(d.attn.k), b(d.attn.v)])
        t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = T(d.attn.o), b(d.attn.o)
        t[p + "xattn.c_q.weight"], t[p + "xattn.c_q.bias"] = T(d.xattn.q), b(d.xattn.q)
        t[p + "xattn.c_kv.weight"] = torch.cat([T(d.xattn.k), T(d.xattn.v)], 1)
        t[p + "xattn.c_kv.bias"] = torch.cat([b(d.xattn.k), b(d.xattn.v)])
        t[p + "xattn.c_proj.weight"], t[p + "xattn.c_proj.bias"] = T(d.xattn.o), b(d.xattn.o)
        ln(p + "ln_1", d.ln_1)
        ln(p + "ln_x", d.ln_x)
        ln(p + "ln_2", d.ln_2)
        mlp(p, d.mlp)
    want = {k: v["shape"] for k, v in header.items()}
    have = {k: list(v.shape) for k, v in t.items()}
    if want != have:
        diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        sys.exit("seq2seq_ref: %s's tensors differ from the reference's: %s" % (like, diff[:8]))
    hdr, blobs, off = {"__metadata__": meta}, [], 0
    for k in sorted(t):
        a = t[k].contiguous().numpy().astype("<f4").tobytes()
        hdr[k] = {"dtype": "F32", "shape": have[k], "data_offsets": [off, off + len(a)]}
        blobs.append(a)
        off += len(a)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for a in blobs:
            f.write(a)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for k in ("--train-src", "--train-tgt", "--test-src", "--test-tgt"):
        ap.add_argument(k, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--pad", type=int, default=0)
    ap.add_argument("--bos", type=int, default=1)
    ap.add_argument("--eos", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--lr", type=float, default=1.0, help="multiplier of the schedule")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-len-b", type=int, default=10)
    ap.add_argument("--log")
    ap.add_argument("--save")
    ap.add_argument("--like")
    a = ap.parse_args()
    if a.save and not a.like:
        ap.error("--save needs --like (a tfm model file of the same configuration)")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    src, tgt = read_ids(a.train_src), read_ids(a.train_tgt)
    assert len(src) == len(tgt) and src, "training sources and targets differ in number"
    test_src, test_tgt = read_ids(a.test_src), read_ids(a.test_tgt)
    model = Seq2Seq(a.vocab, pad=a.pad)
    C = model.C
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    gen = torch.Generator().manual_seed(a.seed)
    log = open(a.log, "w") if a.log else None
    if log:
        log.write("step\ttrain_loss\n")
    times, since = [], []
    model.train()
    for step in range(a.steps):
        t0 = time.perf_counter()
        idx = torch.randint(len(src), (a.batch,), generator=gen).tolist()
        s_in = pad_rows([src[i] + [a.eos] for i in idx], a.pad)
        t_in = pad_rows([[a.bos] + tgt[i] for i in idx], a.pad)
        t_out = pad_rows([tgt[i] + [a.eos] for i in idx], a.pad)
        s = step + 1
        lr = a.lr * C ** -0.5 * min(s ** -0.5, s * a.warmup ** -1.5)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(s_in, t_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t_out.reshape(-1),
                               ignore_index=a.pad, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        since.append(loss.item())
        if log and (s % 10 == 0 or s == a.steps):
            log.write("%d\t%.6f\n" % (s, sum(since) / len(since)))
            log.flush()
            since = []
    t0 = time.perf_counter()
    hyps = greedy(model, test_src, a)
    dt = time.perf_counter() - t0
    exact = sum(h == t for h, t in zip(hyps, test_tgt)) / max(1, len(test_tgt))
    if a.save:
        save_tfm(model, a.save, a.like)
    print("torch greedy_seconds=%.2f (no cache, batches of 100)" % dt)
    print("torch ms_per_step=%.2f" % (1000 * statistics.median(times)))
    print("torch greedy_exact=%.4f" % exact)
    print("torch params=%d" % sum(p.numel() for p in model.parameters()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
