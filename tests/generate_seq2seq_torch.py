#!/usr/bin/python3
"""tfm-generate on encoder-decoders against PyTorch: random small
encoder-decoder models (pre/post-LN, three-way tied, untied head, untied
source with its own tokenizer, several position schemes) written as model
files; tfm-generate's greedy and beam-4 (n-best 4, both length penalties)
translations of random sources must equal the same searches run here over
the float64 PyTorch model of tests/model_torch.py on the same weights: ids
identical, scores and per-token log-probabilities within 1e-4, with one
source per batch and with all sources in one batch.

The searches are written here from the rules of lib/infer/beam.h and
infer/translate.h (source = ids + end-of-text; decoding starts from the
tokenizer's bos, else eos; the 2·beam best extensions scanned in order,
end-of-text finishes, early stop when no live hypothesis can beat the
n-th best; length limit a·S + b, within the position table for learned
positions).  The model is recomputed in full for every step (no cache), so
the C key/value caches are checked too.

Model files are written here without a checksum (tfm-generate warns and
loads them), with the metadata tfm-train writes (format, config,
tokenizer) and, for one case, source_tokenizer."""
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch

BUILD = os.environ.get("TFM_BUILDDIR", ".")
SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
import model_torch as mt  # noqa: E402

MK = os.path.join(BUILD, "tests", "mkmodel")
GEN = os.path.join(BUILD, "tfm-generate")
TOL = 1e-4


# ---- files ---------------------------------------------------------------------

def char_tokenizer(d, alphabet):
    """A character tokenizer (specials <unk>, <|endoftext|>) over alphabet,
    as tfm trains it (through mkmodel): its JSON text."""
    txt, st = os.path.join(d, "alpha.txt"), os.path.join(d, "tok.st")
    with open(txt, "w") as f:
        f.write(alphabet + "\n")
    subprocess.run([MK, st, "--text", txt], check=True)
    return read_meta(st)["tokenizer"]


def read_meta(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)).get("__metadata__", {})


def write_model(path, P, meta):
    """safetensors: F32 tensors, metadata strings (no checksum)."""
    header, off, blobs = {}, 0, []
    for name in sorted(P):
        b = np.ascontiguousarray(P[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(P[name].shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


class Tok:
    """What the searches need of a tokenizer.json: char -> id, id -> char,
    bos and eos by tfm's rule (text/tokenizer.c: <|endoftext|> is both)."""

    def __init__(self, text):
        j = json.loads(text)
        self.vocab = dict(j["model"]["vocab"])
        for t in j["added_tokens"]:
            self.vocab[t["content"]] = t["id"]
        self.piece = {i: p for p, i in self.vocab.items()}
        self.specials = {t["id"] for t in j["added_tokens"]}
        self.eos = self.vocab["<|endoftext|>"]
        bos = [self.vocab[p] for p in ("<|endoftext|>", "<s>", "<|bos|>", "[CLS]")
               if p in self.vocab]
        self.bos = bos[0] if bos else self.eos
        self.size = max(self.vocab.values()) + 1

    def encode(self, s):
        return [self.vocab[c] for c in s]

    def decode(self, ids):
        return "".join(self.piece[i] for i in ids if i not in self.specials)


# ---- the searches ------------------------------------------------------------------

class Model:
    def __init__(self, cfg, P):
        self.cfg = cfg
        self.P = {k: torch.from_numpy(v.astype(np.float64)) for k, v in P.items()}

    def logprobs(self, src, prefixes):
        """Next-token log-probs after each of prefixes (equal lengths) over
        the source src: [len(prefixes), V], float64, the full forward."""
        n, T = len(prefixes), len(prefixes[0])
        x = torch.tensor(prefixes, dtype=torch.long)
        bt = dict(inputs=x, targets=torch.zeros_like(x), segments=None, lengths=None,
                  prefix_len=None, doc_start=None,
                  src=torch.tensor([src] * n, dtype=torch.long), src_lengths=None)
        with torch.no_grad():
            _, logits = mt.torch_model(self.cfg, self.P, bt)
        return torch.log_softmax(logits[:, T - 1], dim=-1).numpy()


def max_new(cfg, S, a, b, n_max=1024):
    m = n_max
    ab = a * S + b
    if ab < m:
        m = 1 if ab < 1 else int(ab)
    if cfg["positions"] == "learned":  # the position table ends there
        m = min(m, cfg["block_size"])
    return m


def greedy(model, src, start, eos, L):
    ids, lps = [], []
    while True:
        lp = model.logprobs(src, [[start] + ids])[0]
        v = int(np.argmax(lp))
        if v == eos:  # in ids and lps, as tfm's --json gives them
            return ids + [v], lps + [float(lp[v])], "eos"
        ids.append(v)
        lps.append(float(lp[v]))
        if len(ids) >= L:
            return ids, lps, "length"


def penalty(length, alpha, style):
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    return length ** alpha if length else 1.0


def beam(model, src, start, eos, L, B, nbest, alpha, style):
    """beam.h's search; finished hypotheses as (score, tokens, lps, finish)."""
    live = [([], [], 0.0)]
    fin = []

    def fin_add(toks, lps, s, why):
        score = s / penalty(len(toks), alpha, style)
        pos = len(fin)
        while pos > 0 and fin[pos - 1][0] < score:
            pos -= 1
        if pos >= nbest:
            return
        if len(fin) == nbest:
            fin.pop()
        fin.insert(pos, (score, toks, lps, why))

    rows = model.logprobs(src, [[start]])
    t = 0
    while True:
        cands = []
        for i, (toks, lps, s) in enumerate(live):
            for v in range(rows.shape[1]):
                if np.isfinite(rows[i, v]):
                    cands.append((s + rows[i, v], i, v, float(rows[i, v])))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        nxt = []
        for s, i, v, lp in cands[:2 * B]:
            if len(nxt) >= B:
                break
            toks, lps, _ = live[i]
            if v == eos:
                fin_add(toks + [v], lps + [lp], s, "eos")
                continue
            nxt.append((toks + [v], lps + [lp], s))
        live = nxt
        if not live:
            break
        if t + 1 >= L:
            for toks, lps, s in live:
                fin_add(toks, lps, s, "length")
            break
        if len(fin) == nbest:
            worst = fin[-1][0]
            bound = max(max(s / penalty(len(toks) + 1, alpha, style),
                            s / penalty(L, alpha, style)) for toks, _, s in live)
            if bound <= worst:
                break
        rows = model.logprobs(src, [[start] + toks for toks, _, _ in live])
        t += 1
    return fin


# ---- comparing ---------------------------------------------------------------------

def tfm(model_path, lines, *args):
    r = subprocess.run([GEN, "-q", "--threads", "2", "-m", model_path, "--json", *args],
                       input="".join(l + "\n" for l in lines), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("tfm-generate %s: %s" % (" ".join(args), r.stderr.strip()))
    return [json.loads(l) for l in r.stdout.splitlines()]


def compare(what, got, want, tok):
    """got: tfm's hypothesis (JSON), want: (ids, lps, score, finish); a list
    of problems."""
    ids, lps, score, finish = want
    if got["ids"] != ids:
        return ["%s: ids differ\n  tfm   %s\n  torch %s" % (what, got["ids"], ids)]
    errs = []
    d = max([abs(a - b) for a, b in zip(got["logprobs"], lps)] + [0])
    if d > TOL:
        errs.append("%s: log-probabilities differ by %.2e" % (what, d))
    if abs(got["score"] - score) > TOL:
        errs.append("%s: score %.6f, torch %.6f" % (what, got["score"], score))
    if got["finish_reason"] != finish:
        errs.append("%s: finish %s, torch %s" % (what, got["finish_reason"], finish))
    if got["text"] != tok.decode(ids):
        errs.append("%s: text %r, torch %r" % (what, got["text"], tok.decode(ids)))
    return errs


def run_case(d, name, cfg, tgt, src_tok, seed, eos_boost):
    rng = np.random.default_rng(seed)
    P = mt.init_params(mt.param_table(cfg), rng)
    for k in P:                      # peaky distributions: few near-ties
        if P[k].ndim == 2 and "rel_bias" not in k:
            P[k] = (P[k] * 2.5).astype(np.float32)
    head = "wte.weight" if cfg["tie"] else "lm_head.weight"
    P[head][tgt.eos] *= eos_boost    # so that translations end at end-of-text too
    meta = {"format": "tfm-gpt", "config": mt.yaml_text(cfg), "tokenizer": tgt.text}
    if src_tok is not tgt:
        meta["source_tokenizer"] = src_tok.text
    path = os.path.join(d, "m.st")
    write_model(path, P, meta)
    model = Model(cfg, P)

    r = random.Random(seed)
    alpha = "".join(c for c in src_tok.vocab if len(c) == 1 and c.isalpha())
    lines = [""] + ["".join(r.choice(alpha) for _ in range(r.randint(1, 9))) for _ in range(7)]
    # a source ends with its own tokenizer's end-of-text, as in training
    srcs = [src_tok.encode(l) + [src_tok.eos] for l in lines]
    # longer than the encoder's context: its head and end-of-text (--truncate head)
    T = cfg["block_size"]
    srcs = [s if len(s) <= T else s[:T - 1] + [src_tok.eos] for s in srcs]
    start, eos = tgt.bos, tgt.eos
    errs, stats = [], {"eos": 0, "length": 0}
    a, b = 1.0, 4
    lims = [max_new(cfg, len(s), a, b) for s in srcs]
    g_want = [greedy(model, s, start, eos, L) for s, L in zip(srcs, lims)]
    for batch in ("1", "16"):
        got = tfm(path, lines, "--greedy", "--batch", batch, "--max-len-b", str(b))
        for i, (g, w) in enumerate(zip(got, g_want)):
            errs += compare("%s greedy batch %s line %d" % (name, batch, i + 1), g,
                            (w[0], w[1], sum(w[1]), w[2]), tgt)
    for style, alpha_ in (("plain", 0.6), ("gnmt", 0.6), ("plain", 1.0)):
        want = [beam(model, s, start, eos, L, 4, 4, alpha_, style) for s, L in zip(srcs, lims)]
        for batch in ("1", "16"):
            got = tfm(path, lines, "--beam", "4", "--nbest", "4", "--lenpen", str(alpha_),
                      "--lenpen-style", style, "--batch", batch, "--max-len-b", str(b))
            for i, (g, w) in enumerate(zip(got, want)):
                hyps = g.get("nbest", [g])
                if len(hyps) != len(w):
                    errs.append("%s beam %s: line %d has %d hypotheses, torch %d"
                                % (name, style, i + 1, len(hyps), len(w)))
                    continue
                for k, (h, (score, toks, lps, fin)) in enumerate(zip(hyps, w)):
                    stats[fin] += batch == "1"
                    errs += compare("%s beam-4 %s alpha %g batch %s line %d rank %d"
                                    % (name, style, alpha_, batch, i + 1, k + 1), h,
                                    (toks, lps, score, fin), tgt)
    print("%s: %d sources, greedy and beam-4 n-best (finished: %d at end-of-text, %d at the "
          "length limit): %s" % (name, len(lines), stats["eos"], stats["length"],
                                 "ok" if not errs else "%d problems" % len(errs)))
    return errs


def main():
    torch.set_num_threads(2)
    errs = []
    with tempfile.TemporaryDirectory() as d:
        tj = char_tokenizer(d, "abcdefgh")
        tgt = Tok(tj)
        tgt.text = tj
        sj = char_tokenizer(d, "pqrstuvwxyz")
        src2 = Tok(sj)
        src2.text = sj
        V = tgt.size
        ed = dict(mt.BASE, kind="encoder-decoder", vocab_size=V, n_embd=16, n_head=2,
                  block_size=24)
        cases = [
            ("original: sinusoidal post-LN three-way tie relu",
             dict(ed, positions="sinusoidal", norm="post", activation="relu"), tgt, 1),
            ("learned pre-LN untied head, block_size 6", dict(ed, tie=False, block_size=6),
             tgt, 2),
            ("rope pre-LN n_enc_layer 3", dict(ed, positions="rope", n_enc_layer=3), tgt, 3),
            ("t5 post-LN untied source with its own tokenizer",
             dict(ed, positions="t5", norm="post", tie_source=False, src_vocab_size=src2.size),
             src2, 4),
            ("alibi pre-LN untied head and source", dict(ed, positions="alibi", tie=False,
                                                         tie_source=False), tgt, 5),
        ]
        for name, cfg, stok, seed in cases:
            errs += run_case(d, name, cfg, tgt, stok, seed, 3.0)
    for e in errs[:30]:
        print("FAIL", e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
