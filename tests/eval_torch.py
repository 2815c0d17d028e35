#!/usr/bin/env python3
# tfm-eval against PyTorch: the same model file (weights read with numpy,
# the GPT written out in torch) and the same windows give the same
# cross-entropy to 1e-4, for several contexts and strides, pre-LN and
# post-LN; choice and lastword give the same accuracies as a torch scorer.
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

BUILD = os.environ.get("TFM_BUILDDIR", os.getcwd())
SANITIZED = os.environ.get("TFM_SANITIZED") == "1"


def read_model(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    P = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        P[name] = torch.from_numpy(np.frombuffer(blob[8 + n + a:8 + n + b], dtype="<f4")
                                   .reshape(t["shape"]).copy()).double()
    cfg = {}
    section = None
    for line in meta["config"].splitlines():
        if not line.startswith(" "):
            section = line.rstrip(":")
        elif section == "model":
            k, v = line.strip().split(": ")
            cfg[k] = v
    tok = json.loads(meta["tokenizer"]) if "tokenizer" in meta else None
    return P, cfg, tok


def logits_of(P, cfg, x):
    """x: [B, T] long -> logits [B, T, V], in float64 (the reference)."""
    L, H = int(cfg["n_layer"]), int(cfg["n_head"])
    post = cfg["norm"] == "post"
    eps = float(cfg["ln_eps"])
    B, T = x.shape
    C = P["wte.weight"].shape[1]
    h = P["wte.weight"][x] + P["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    ln = lambda v, i, k: F.layer_norm(v, (C,), P["h.%d.%s.weight" % (i, k)],
                                      P["h.%d.%s.bias" % (i, k)], eps)
    for i in range(L):
        p = lambda n: P["h.%d.%s" % (i, n)]

        def attn(a):
            qkv = a @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
            q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2)]
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            o = (att @ v).transpose(1, 2).reshape(B, T, C)
            return o @ p("attn.c_proj.weight") + p("attn.c_proj.bias")

        def mlp(a):
            f = F.gelu(a @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
            return f @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")

        if post:
            h = ln(h + attn(h), i, "ln_1")
            h = ln(h + mlp(h), i, "ln_2")
        else:
            h = h + attn(ln(h, i, "ln_1"))
            h = h + mlp(ln(h, i, "ln_2"))
    if not post:
        h = F.layer_norm(h, (C,), P["ln_f.weight"], P["ln_f.bias"], eps)
    return h @ P["wte.weight"].t()


def score(P, cfg, ids, n_target):
    """Sum of log p of the last n_target ids and whether each is the argmax."""
    block = int(cfg["block_size"])
    ids = ids[-block:]
    x = torch.tensor([ids], dtype=torch.long)
    lp = logits_of(P, cfg, x)[0].log_softmax(-1)
    total, greedy = 0.0, True
    for t in range(len(ids) - n_target, len(ids)):
        total += lp[t - 1, ids[t]].item()
        greedy = greedy and int(lp[t - 1].argmax()) == ids[t]
    return total, greedy


def ref_perplexity(P, cfg, ids, context, stride):
    """The windows as the man page states them, written independently."""
    step = min(stride, context - 1)
    nll, scored, windows = 0.0, 0, 0
    end = min(context, len(ids))
    spans = [(0, end, 1)]
    while end < len(ids):
        prev, end = end, min(end + step, len(ids))
        spans.append((end - context, end, prev))
    for b, e, s in spans:
        lp, _ = score(P, cfg, ids[b:e], e - s)
        nll -= lp
        scored += e - s
        windows += 1
    return nll / scored, scored, windows


def run(args, stdin=None):
    r = subprocess.run([os.path.join(BUILD, "tfm-eval")] + args + ["--json", "-q"],
                       input=stdin, capture_output=True)
    if r.returncode != 0:
        sys.exit("tfm-eval %s failed: %s" % (" ".join(args), r.stderr.decode()))
    return json.loads(r.stdout)


def check_ppl(model, npy, ids, P, cfg, context, stride, batch):
    ce, scored, windows = ref_perplexity(P, cfg, ids, context, stride)
    got = run(["perplexity", "-m", model, "--tokens", npy, "--no-bos", "--context", str(context),
               "--stride", str(stride), "--batch", str(batch)])
    print("context %d stride %d batch %d: tfm %.7f torch %.7f (%d tokens, %d windows)" %
          (context, stride, batch, got["cross_entropy"], ce, scored, windows))
    assert got["tokens"] == scored == len(ids) - 1, got
    assert got["windows"] == windows, got
    assert abs(got["cross_entropy"] - ce) < 1e-4, (got, ce)
    assert abs(got["perplexity"] - math.exp(ce)) < 1e-4 * math.exp(ce), got


def main():
    mk = os.path.join(BUILD, "tests", "mkmodel")
    text = ("In the beginning God created the heaven and the earth. And the earth was "
            "without form, and void; and darkness was upon the face of the deep. And the "
            "Spirit of God moved upon the face of the waters.\n")
    with tempfile.TemporaryDirectory() as work:
        tpath = os.path.join(work, "text.txt")
        with open(tpath, "w") as f:
            f.write(text)
        n_tok = 150 if SANITIZED else 400
        for post in (False, True):
            model = os.path.join(work, "m%d.st" % post)
            subprocess.run([mk, model, "--text", tpath, "--layers", "2", "--heads", "2",
                            "--embd", "32", "--context", "32", "--scale", "3", "--seed", "7"]
                           + (["--post-ln"] if post else []), check=True)
            P, cfg, tok = read_model(model)
            V = P["wte.weight"].shape[0]
            rng = np.random.default_rng(3)
            ids = rng.integers(0, V, n_tok).astype("<u2")
            npy = os.path.join(work, "ids.npy")
            np.save(npy, ids)
            ids = [int(i) for i in ids]
            for context, stride, batch in ((32, 32, 4), (32, 8, 3), (16, 1, 16), (7, 3, 1),
                                           (32, 31, 2)):
                check_ppl(model, npy, ids, P, cfg, context, stride, batch)

        # text mode: the character tokenizer, end-of-text first
        vocab = tok["model"]["vocab"]
        enc = lambda s: [vocab[ch] for ch in s]
        eos = vocab["<|endoftext|>"]
        ids = [eos] + enc(text)
        ce, scored, _ = ref_perplexity(P, cfg, ids, 32, 16)
        got = run(["perplexity", "-m", model, "--stride", "16", tpath])
        assert got["tokens"] == scored == len(text) and got["bytes"] == len(text), got
        assert abs(got["cross_entropy"] - ce) < 1e-4, (got, ce)
        bpb = ce * scored / math.log(2) / len(text)
        assert abs(got["bits_per_byte"] - bpb) < 1e-4, (got, bpb)
        print("text: tfm %.7f torch %.7f, %.4f bits/byte" % (got["cross_entropy"], ce, bpb))

        # choice: the same accuracies under the three scorings
        words = text.replace(".", "").replace(",", "").replace(";", "").split()
        rng = np.random.default_rng(5)
        items, right = [], [0, 0, 0]
        for k in range(12 if SANITIZED else 40):
            i = int(rng.integers(0, len(words) - 8))
            ctx = " ".join(words[i:i + 5])
            endings = [" " + " ".join(words[j:j + int(rng.integers(1, 3))])
                       for j in rng.integers(0, len(words) - 3, 3)]
            label = int(rng.integers(0, 3))
            items.append({"context": ctx, "endings": endings, "label": label})
            sc = []
            for e in endings:
                lp, _ = score(P, cfg, [eos] + enc(ctx) + enc(e), len(e))
                sc.append((lp, lp / len(e), lp / len(e.encode())))
            for m in range(3):
                best = max(range(3), key=lambda j: (sc[j][m], -j))
                right[m] += best == label
        jl = "".join(json.dumps(it) + "\n" for it in items).encode()
        got = run(["choice", "-m", model], jl)
        n = len(items)
        print("choice: tfm %s torch %s" % ([got["acc"], got["acc_per_token"],
                                             got["acc_per_byte"]], [r / n for r in right]))
        assert got["items"] == n
        assert got["correct"] == right[0], (got, right)
        assert abs(got["acc"] - right[0] / n) < 1e-6
        assert abs(got["acc_per_token"] - right[1] / n) < 1e-6
        assert abs(got["acc_per_byte"] - right[2] / n) < 1e-6

        # lastword: greedy over the final word's tokens
        passages, correct, lps = [], 0, 0.0
        for k in range(12 if SANITIZED else 40):
            i = int(rng.integers(0, len(words) - 8))
            p = " ".join(words[i:i + int(rng.integers(2, 8))])
            passages.append(p)
            c, w = p.rsplit(" ", 1)
            lp, g = score(P, cfg, [eos] + enc(c) + enc(" " + w), len(w) + 1)
            correct += g
            lps += lp
        # passages whose final word is the model's own greedy continuation
        # (right by construction), and the same with its last letter changed
        # (wrong): a random model seldom gets a word right by chance
        # (a character model trained for a second on one repeated sentence,
        # so that some final words are right and some wrong)
        sent = "the cat sat on the mat and the dog ate the bone\n"
        cpath = os.path.join(work, "c.txt")
        with open(cpath, "w") as f:
            f.write(sent * 60)
        tokp = os.path.join(work, "tok.json")
        subprocess.run([os.path.join(BUILD, "tfm-tokenize"), "train", "-q", "--model", "char",
                        "-o", tokp, cpath], check=True)
        yaml = os.path.join(work, "r.yaml")
        with open(yaml, "w") as f:
            f.write("model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}\n"
                    "data: {text: %s, tokenizer: %s}\noptim: {lr: 1e-2}\n"
                    "train: {batch_size: 8, max_steps: 300, eval_interval: 300, seed: 1}\n"
                    % (cpath, tokp))
        rundir = os.path.join(work, "run")
        subprocess.run([os.path.join(BUILD, "tfm-train"), "-q", "--threads", "1", "-c", yaml,
                        "-o", rundir], check=True)
        tmodel = os.path.join(rundir, "model.safetensors")
        P2, cfg2, tok2 = read_model(tmodel)
        v2 = tok2["model"]["vocab"]
        eos2 = tok2_eos = next((t["id"] for t in tok2["added_tokens"]
                               if t["content"] == "<|endoftext|>"), None)
        enc2 = lambda s: [v2[ch] for ch in s]
        sw = sent.split()
        passages2 = []
        for k in range(6 if SANITIZED else 20):
            i = int(rng.integers(0, len(sw) - 2))
            j = int(rng.integers(i + 2, len(sw) + 1))
            p = " ".join(sw[i:j])
            if k % 3 == 2:  # a wrong final word
                p = p.rsplit(" ", 1)[0] + " " + sw[int(rng.integers(0, len(sw)))]
            passages2.append(p)
        correct2, lps2 = 0, 0.0
        for p in passages2:
            cc, ww = p.rsplit(" ", 1)
            pre = [eos2] if eos2 is not None else []
            lp, g = score(P2, cfg2, pre + enc2(cc) + enc2(" " + ww), len(ww) + 1)
            correct2 += g
            lps2 += lp
        assert 0 < correct2 < len(passages2), (correct2, len(passages2))
        got = run(["lastword", "-m", tmodel], ("\n".join(passages2) + "\n").encode())
        print("lastword, trained model: tfm %d/%d torch %d/%d" %
              (got["correct"], got["passages"], correct2, len(passages2)))
        assert got["correct"] == correct2 and got["passages"] == len(passages2)
        wp = math.exp(-lps2 / len(passages2))
        assert abs(got["word_perplexity"] - wp) < 1e-4 * wp, (got, wp)

        got = run(["lastword", "-m", model], ("\n".join(passages) + "\n").encode())
        print("lastword: tfm %d/%d torch %d/%d" % (got["correct"], got["passages"], correct,
                                                   len(passages)))
        assert got["correct"] == correct and got["passages"] == len(passages)
        wp = math.exp(-lps / len(passages))
        assert abs(got["word_perplexity"] - wp) < 1e-4 * wp, (got, wp)
    print("ok")


if __name__ == "__main__":
    main()
