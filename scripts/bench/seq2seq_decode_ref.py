#!/usr/bin/python3
"""PyTorch reference decoding of a tfm encoder-decoder model file, for
scripts/bench/seq2seq: the same weights, the same searches as tfm-generate,
float32, with a key/value cache (self-attention keys and values appended per
step; the encoder's cross-attention keys and values computed once per
source).

  seq2seq_decode_ref.py MODEL.safetensors --mode beam|greedy < sources
        [--beam 4] [--lenpen 0.6] [--lenpen-style gnmt|plain]
        [--max-len-a 1] [--max-len-b 50] [--batch 100] [--threads 2]

Input: one source a line as token ids separated by spaces (as
tfm-generate --ids reads them; end-of-text is appended).  Output: one
hypothesis a line as ids (as tfm-generate --ids prints them), then on
stderr "torch MODE sentences_per_s=X sentences=N seconds=T".

beam: one source at a time, as the anchor of the README's benchmark section
(beam 4, GNMT's length penalty ((5 + L) / 6)^0.6 by default here; run
tfm-generate with --lenpen-style gnmt to compare); the rules of
lib/infer/beam.h (the 2·beam best extensions scanned in order, end-of-text
finishes, early stop when no live beam can beat the best finished one).
greedy: --batch sources at a time, padded (masked) sources, rows that
finished still step (as a plain PyTorch loop does).

The model: tfm's definition (lib/model/transformer.h): token embedding
(·√C with emb_scale) (+ learned or sinusoidal positions), optional embedding LayerNorm, pre- or
post-LN blocks, separate self- and cross-attention, tied or untied head and
source embedding; RoPE, ALiBi and T5 positions are not implemented here.

BLIS_ARCH_TYPE comes from scripts/bench/blis_arch and
BLIS_NUM_THREADS = OMP_NUM_THREADS = --threads, set before torch loads (an
importer that loaded torch already must set them itself).  Timings are
rough on a shared machine."""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _threads_from_argv(argv):
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "2"


if "torch" not in sys.modules:
    _t = _threads_from_argv(sys.argv)
    if "BLIS_ARCH_TYPE" not in os.environ:
        os.environ["BLIS_ARCH_TYPE"] = subprocess.run(
            [os.path.join(HERE, "blis_arch")], capture_output=True, text=True).stdout.strip() or "3"
    os.environ.setdefault("BLIS_NUM_THREADS", _t)
    os.environ.setdefault("OMP_NUM_THREADS", _t)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def load(path):
    """Tensors (float32), the model section of the config, start and eos ids."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {})
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    t = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", name
        b, end = e["data_offsets"]
        t[name] = torch.from_numpy(np.frombuffer(data[b:end], dtype=np.float32)
                                   .reshape(e["shape"]).copy())
    text = meta.get("config", "")
    sect = re.search(r"^model:\n((?:[ \t]+.*\n?)*)", text, re.M)
    cfg = dict(re.findall(r"^\s+(\w+):\s*(.*?)\s*$", sect.group(1), re.M)) if sect else {}
    start = eos = None
    if "tokenizer" in meta:
        tok = json.loads(meta["tokenizer"])
        ids = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
        ids.update(tok.get("model", {}).get("vocab", {}) or {})
        for p in ("<|endoftext|>", "</s>", "[EOS]", "[SEP]"):
            if p in ids:
                eos = ids[p]
                break
        for p in ("<|endoftext|>", "<s>", "<|bos|>", "[BOS]", "[CLS]"):
            if p in ids:
                start = ids[p]
                break
    return t, cfg, start, eos


class Seq2Seq:
    def __init__(self, t, cfg):
        self.t = t
        self.kind = cfg.get("kind", "decoder")
        assert self.kind == "encoder-decoder", "not an encoder-decoder model"
        self.pos = cfg.get("positions", "learned")
        assert self.pos in ("learned", "sinusoidal"), "positions %s: not implemented" % self.pos
        self.C = t["wte.weight"].shape[1]
        self.nh = int(cfg.get("n_head", 1))
        self.L = int(cfg.get("n_layer", 1))
        ne = int(cfg.get("n_enc_layer", 0) or 0)
        self.Le = ne if ne > 0 else self.L
        self.eps = float(cfg.get("ln_eps", 1e-5))
        self.pre = cfg.get("norm", "pre") == "pre"
        self.act = {"gelu": lambda x: F.gelu(x, approximate="tanh"), "gelu_exact": F.gelu,
                    "relu": F.relu}[cfg.get("activation", "gelu")]
        self.emb_norm = cfg.get("emb_norm", "false") == "true"
        self.emb_scale = math.sqrt(self.C) if cfg.get("emb_scale", "false") == "true" else 1.0
        self.head = t.get("lm_head.weight", t["wte.weight"])
        self.src_wte = t.get("enc.wte.weight", t["wte.weight"])

    def lin(self, x, name):
        w = self.t[name + ".weight"]
        b = self.t.get(name + ".bias")
        return x @ w if b is None else torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(
            *x.shape[:-1], w.shape[1])

    def ln(self, x, name):
        return F.layer_norm(x, (self.C,), self.t[name + ".weight"], self.t[name + ".bias"],
                            self.eps)

    def sinus(self, pos):
        C = self.C
        i2 = torch.arange(0, C, 2, dtype=torch.float64)
        ang = pos.to(torch.float64)[..., None] / 10000.0 ** (i2 / C)
        pe = torch.zeros(*pos.shape, C, dtype=torch.float64)
        pe[..., 0::2] = torch.sin(ang)
        pe[..., 1::2] = torch.cos(ang[..., :C // 2])
        return pe.float()

    def embed(self, pre, wte, tok, pos):
        h = wte[tok] * self.emb_scale
        if self.pos == "learned":
            h = h + self.t[pre + "wpe.weight"][pos]
        else:
            h = h + self.sinus(pos)
        return self.ln(h, pre + "ln_e") if self.emb_norm else h

    def heads(self, x):  # [B, T, C] -> [B, nh, T, hs]
        B, T, _ = x.shape
        return x.view(B, T, self.nh, self.C // self.nh).transpose(1, 2)

    def attend(self, q, k, v, mask):
        """q [B, nh, Tq, hs]; k, v [B, nh, Tk, hs]; mask [B, 1, 1|Tq, Tk] bool
        (True: may see) or None."""
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        o = s.softmax(-1) @ v
        B, _, T, _ = o.shape
        return o.transpose(1, 2).reshape(B, T, self.C)

    def sub(self, h, norm, f):
        return h + f(self.ln(h, norm)) if self.pre else self.ln(h + f(h), norm)

    def encode(self, src, lengths):
        """src [B, S] (padded), lengths [B]: the cross-attention keys and
        values of every decoder layer and the source mask."""
        B, S = src.shape
        pos = torch.arange(S).expand(B, S)
        keep = (torch.arange(S)[None] < lengths[:, None])[:, None, None, :]
        h = self.embed("enc.", self.src_wte, src, pos)
        for i in range(self.Le):
            p = "enc.h.%d." % i

            def sa(x):
                q, k, v = self.lin(x, p + "attn.c_attn").split(self.C, dim=2)
                return self.lin(self.attend(self.heads(q), self.heads(k), self.heads(v), keep),
                                p + "attn.c_proj")
            h = self.sub(h, p + "ln_1", sa)
            h = self.sub(h, p + "ln_2", lambda x: self.lin(self.act(self.lin(x, p + "mlp.c_fc")),
                                                           p + "mlp.c_proj"))
        if self.pre:
            h = self.ln(h, "enc.ln_f")
        xkv = []
        for i in range(self.L):
            k, v = self.lin(h, "h.%d.xattn.c_kv" % i).split(self.C, dim=2)
            xkv.append((self.heads(k), self.heads(v)))
        return xkv, keep

    def step(self, tok, pos, cache, xkv, keep):
        """One token per row: tok [B], at position pos; cache: per layer
        (K, V) [B, nh, pos, hs] or None, replaced.  Logits [B, V]."""
        B = tok.shape[0]
        h = self.embed("", self.t["wte.weight"], tok[:, None], torch.full((B, 1), pos))
        for i in range(self.L):
            p = "h.%d." % i

            def sa(x):
                q, k, v = self.lin(x, p + "attn.c_attn").split(self.C, dim=2)
                k, v = self.heads(k), self.heads(v)
                if cache[i] is not None:
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                cache[i] = (k, v)
                return self.lin(self.attend(self.heads(q), k, v, None), p + "attn.c_proj")

            def xa(x):
                q = self.heads(self.lin(x, p + "xattn.c_q"))
                return self.lin(self.attend(q, xkv[i][0], xkv[i][1], keep), p + "xattn.c_proj")
            h = self.sub(h, p + "ln_1", sa)
            h = self.sub(h, p + "ln_x", xa)
            h = self.sub(h, p + "ln_2", lambda x: self.lin(self.act(self.lin(x, p + "mlp.c_fc")),
                                                           p + "mlp.c_proj"))
        if self.pre:
            h = self.ln(h, "ln_f")
        return h[:, 0] @ self.head.T


def max_new(S, a, b, block, learned):
    m = 1024
    ab = a * S + b
    if ab < m:
        m = 1 if ab < 1 else int(ab)
    return min(m, block) if learned else m


def penalty(L, alpha, style):
    if style == "gnmt":
        return ((5.0 + L) / 6.0) ** alpha
    return L ** alpha if L else 1.0


def beam_search(m, src, start, eos, L, B=4, alpha=0.6, style="gnmt"):
    """lib/infer/beam.h's search of one source, beams as a batch with a
    cache reordered by parent; the best hypothesis's ids (eos excluded)."""
    xkv, keep = m.encode(torch.tensor([src]), torch.tensor([len(src)]))
    cache = [None] * m.L
    lp = torch.log_softmax(m.step(torch.tensor([start]), 0, cache, xkv, keep), -1)
    live = [([], 0.0)]
    best = None  # (score, ids)
    t = 0
    while True:
        n = len(live)
        sums = torch.tensor([s for _, s in live], dtype=torch.float64)[:, None] + lp.double()
        flat = sums.view(-1)
        k = min(2 * B, flat.numel())
        # the 2B best; ties: lower parent, then lower token (= lower flat index)
        vals, idx = torch.topk(flat, k)
        order = sorted(range(k), key=lambda j: (-float(vals[j]), int(idx[j])))
        nxt, parents = [], []
        V = lp.shape[1]
        for j in order:
            if len(nxt) >= B:
                break
            par, v, s = int(idx[j]) // V, int(idx[j]) % V, float(vals[j])
            if v == eos:
                sc = s / penalty(len(live[par][0]) + 1, alpha, style)
                if best is None or sc > best[0]:
                    best = (sc, live[par][0])
                continue
            nxt.append((live[par][0] + [v], s))
            parents.append(par)
        live = nxt
        if not live:
            break
        if t + 1 >= L:
            for ids, s in live:
                sc = s / penalty(len(ids), alpha, style)
                if best is None or sc > best[0]:
                    best = (sc, ids)
            break
        if best is not None:
            bound = max(max(s / penalty(len(ids) + 1, alpha, style), s / penalty(L, alpha, style))
                        for ids, s in live)
            if bound <= best[0]:
                break
        sel = torch.tensor(parents)
        cache = [(kk.index_select(0, sel), vv.index_select(0, sel)) for kk, vv in cache]
        bx = [(kk.expand(len(live), -1, -1, -1), vv.expand(len(live), -1, -1, -1))
              for kk, vv in xkv]
        lp = torch.log_softmax(m.step(torch.tensor([ids[-1] for ids, _ in live]), t + 1, cache,
                                      bx, keep), -1)
        t += 1
    return best[1]


def greedy_batch(m, srcs, start, eos, lims):
    """Greedy translations of srcs together (padded and masked)."""
    n, S = len(srcs), max(len(s) for s in srcs)
    src = torch.zeros(n, S, dtype=torch.long)
    for i, s in enumerate(srcs):
        src[i, :len(s)] = torch.tensor(s)
    xkv, keep = m.encode(src, torch.tensor([len(s) for s in srcs]))
    cache = [None] * m.L
    tok = torch.full((n,), start, dtype=torch.long)
    out = [[] for _ in srcs]
    done = [False] * n
    for t in range(max(lims)):
        tok = m.step(tok, t, cache, xkv, keep).argmax(-1)
        for i in range(n):
            if done[i]:
                continue
            v = int(tok[i])
            if v == eos:
                done[i] = True
            else:
                out[i].append(v)
                done[i] = len(out[i]) >= lims[i]
        if all(done):
            break
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--mode", choices=("beam", "greedy"), default="beam")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--lenpen", type=float, default=0.6)
    ap.add_argument("--lenpen-style", choices=("gnmt", "plain"), default="gnmt")
    ap.add_argument("--max-len-a", type=float, default=1.0)
    ap.add_argument("--max-len-b", type=int, default=50)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--start", type=int)
    ap.add_argument("--eos", type=int)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t, cfg, start, eos = load(args.model)
    start = args.start if args.start is not None else (start if start is not None else eos)
    eos = args.eos if args.eos is not None else eos
    assert eos is not None and start is not None, "no end-of-text token: give --eos"
    m = Seq2Seq(t, cfg)
    srcs = [[int(x) for x in line.split()] + [eos] for line in sys.stdin]
    block = int(cfg.get("block_size", 1 << 20))
    lims = [max_new(len(s), args.max_len_a, args.max_len_b, block, m.pos == "learned")
            for s in srcs]
    hyps = []
    t0 = time.perf_counter()
    with torch.no_grad():
        if args.mode == "beam":
            for s, L in zip(srcs, lims):
                hyps.append(beam_search(m, s, start, eos, L, args.beam, args.lenpen,
                                        args.lenpen_style))
        else:
            for b0 in range(0, len(srcs), args.batch):
                hyps += greedy_batch(m, srcs[b0:b0 + args.batch], start, eos,
                                     lims[b0:b0 + args.batch])
    dt = time.perf_counter() - t0
    for h in hyps:
        print(" ".join(map(str, h)))
    print("torch %s sentences_per_s=%.1f sentences=%d seconds=%.3f threads=%d BLIS_ARCH_TYPE=%s"
          % (args.mode, len(srcs) / dt if dt > 0 else 0, len(srcs), dt, args.threads,
             os.environ.get("BLIS_ARCH_TYPE", "")), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
