#!/usr/bin/python3
"""tfm-embed's hidden states and pooled vectors against PyTorch.

Checkpoints are written here: HuggingFace BERT (tests/hf_bert.py's writer:
HF's names and [out, in] Linear layout, "bert." prefix or none,
LayerNorm.gamma/beta or weight/bias) and HuggingFace GPT-2 (transformer.
prefix or none, Conv1D [in, out] weights, the attn.bias buffers, config.json,
vocab.json + merges.txt), in several shapes; and tfm model files of each kind
(decoder, encoder, encoder-decoder, from tests/mkmodel).  PyTorch (float64)
computes every layer's hidden states as HuggingFace's output_hidden_states
does (GPT-2's last one after ln_f); tfm-embed --pool none --layers l must
equal layer l for every l, over several inputs of different lengths packed
into one batch, to 1e-4 of the largest |value|.  Pooled vectors (cls, mean,
max, last; sum-last-4, concat-last-4, sum-all, second-last, ELMo weights,
--normalize) are checked against the same hidden states, with tiny batches
and chunks (--max-tokens 7 --chunk 2) so that order restoration is
exercised.  The GPT-2 checkpoints also load through tfm_model_load
(tests/io_probe model-logits): logits equal ln_f(h)·wteᵀ."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_bert  # noqa: E402  (the BERT checkpoint writer and reference)

BUILD = os.environ.get("TFM_BUILDDIR", ".")
EMBED = os.path.join(BUILD, "tfm-embed")
MKMODEL = os.path.join(BUILD, "tests", "mkmodel")
TOKENIZE = os.path.join(BUILD, "tfm-tokenize")
PROBE = os.path.join(BUILD, "tests", "io_probe")
TOL = 1e-4

ACTS = {"gelu": F.gelu, "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_exact": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "relu": F.relu}


def read_npy(path):
    return np.load(path).astype(np.float64)


def run_embed(model, text, args, out):
    r = subprocess.run([EMBED, "-m", model, "-q", "-o", out] + args, input=text.encode(),
                       capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"tfm-embed {' '.join(args)}: {r.stderr.decode().strip()}")
    return read_npy(out)


# ---- references ----------------------------------------------------------

def bert_hidden_all(s, t, ids, seg):
    """HF BertModel's hidden states (embeddings, then every layer) of one
    unpadded sequence, float64."""
    P = {k: torch.from_numpy(v).double() for k, v in t.items() if v.dtype == np.float32}
    pre = s["prefix"]
    g, bb = ("gamma", "beta") if s["gamma"] else ("weight", "bias")
    C, NH = s["C"], s["NH"]
    HS = C // NH
    ids, seg = torch.tensor(ids).long(), torch.tensor(seg).long()
    T = len(ids)
    ln = lambda x, n: F.layer_norm(x, (C,), P[f"{n}.{g}"], P[f"{n}.{bb}"], s["eps"])
    lin = lambda x, n: F.linear(x, P[n + ".weight"], P[n + ".bias"])
    e = pre + "embeddings."
    x = (P[e + "word_embeddings.weight"][ids] + P[e + "position_embeddings.weight"][:T]
         + P[e + "token_type_embeddings.weight"][seg])
    x = ln(x, e + "LayerNorm")
    hs = [x]
    heads = lambda z: z.view(T, NH, HS).permute(1, 0, 2)
    for i in range(s["L"]):
        p = f"{pre}encoder.layer.{i}."
        q, k, v = (heads(lin(x, p + "attention.self." + n)) for n in ("query", "key", "value"))
        att = (q @ k.transpose(-1, -2) / np.sqrt(HS)).softmax(-1)
        ctx = (att @ v).permute(1, 0, 2).reshape(T, C)
        x = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = hf_bert.ACTS[s["act"]](lin(x, p + "intermediate.dense"))
        x = ln(lin(h, p + "output.dense") + x, p + "output.LayerNorm")
        hs.append(x)
    return [h.numpy() for h in hs]


def gpt_hidden_all(P, cfg, ids, pre="", seg=None):
    """Hidden states of one sequence through a stack in GPT-2's names and
    layout (HF GPT-2, and tfm model files): kind decoder (causal) or
    encoder; norm pre or post; emb_norm; learned positions."""
    C, NH, L = cfg["C"], cfg["NH"], cfg["L"]
    HS, eps, act = C // NH, cfg["eps"], ACTS[cfg["act"]]
    ids = torch.tensor(ids).long()
    T = len(ids)
    W = lambda n: P[pre + n]
    ln = lambda x, n: F.layer_norm(x, (C,), W(n + ".weight"), W(n + ".bias"), eps)
    conv = lambda x, n: x @ W(n + ".weight") + W(n + ".bias")   # [in, out]
    x = P[cfg.get("wte", pre + "wte.weight")][ids] + W("wpe.weight")[:T]
    if seg is not None:
        x = x + P["wse.weight"][torch.tensor(seg).long()]
    if cfg.get("emb_norm"):
        x = ln(x, "ln_e")
    hs = [x]
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(L):
        p = f"h.{i}."
        a_in = ln(x, p + "ln_1") if cfg["norm"] == "pre" else x
        q, k, v = conv(a_in, p + "attn.c_attn").split(C, -1)
        q, k, v = (z.view(T, NH, HS).permute(1, 0, 2) for z in (q, k, v))
        sc = q @ k.transpose(-1, -2) / np.sqrt(HS)
        if cfg["kind"] == "decoder":
            sc = sc.masked_fill(causal, float("-inf"))
        y = (sc.softmax(-1) @ v).permute(1, 0, 2).reshape(T, C)
        x = x + conv(y, p + "attn.c_proj")
        if cfg["norm"] == "post":
            x = ln(x, p + "ln_1")
        m_in = ln(x, p + "ln_2") if cfg["norm"] == "pre" else x
        x = x + conv(act(conv(m_in, p + "mlp.c_fc")), p + "mlp.c_proj")
        if cfg["norm"] == "post":
            x = ln(x, p + "ln_2")
        hs.append(x)
    if cfg["norm"] == "pre":
        hs[-1] = ln(x, "ln_f")
    return [h.numpy() for h in hs]


# ---- checks --------------------------------------------------------------

def compare(what, got, want, bad):
    if got.shape != want.shape:
        bad.append(f"{what}: shape {got.shape}, want {want.shape}")
        return 0.0
    scale = max(np.abs(want).max(), 1e-30)
    err = np.abs(got - want).max()
    if not err <= TOL * scale:
        bad.append(f"{what}: max |tfm - torch| = {err:.3g}, {err / scale:.3g} of max |torch| "
                   f"{scale:.3g}")
    return err / scale


def pooled_ref(hs, layers, pool, normalize, L):
    """Expected vectors per input from per-input hidden-state lists."""
    out = []
    for h in hs:
        if layers == "sum-last-4":
            x = sum(h[l] for l in range(L - 3, L + 1))
        elif layers == "concat-last-4":
            x = np.concatenate([h[l] for l in range(L - 3, L + 1)], -1)
        elif layers == "sum-all":
            x = sum(h[l] for l in range(1, L + 1))
        elif layers == "second-last":
            x = h[L - 1]
        elif isinstance(layers, tuple):            # ELMo: (scalars, gamma)
            s, g = layers
            w = np.exp(np.array(s) - max(s))
            w /= w.sum()
            x = g * sum(w[l] * h[l] for l in range(L + 1))
        else:
            x = h[int(layers) if int(layers) >= 0 else L + 1 + int(layers)]
        v = {"cls": x[0], "last": x[-1], "mean": x.mean(0), "max": x.max(0)}[pool]
        if normalize:
            v = v / np.linalg.norm(v)
        out.append(v)
    return np.stack(out)


def check_model(name, model, text, hs, L, d, pools=True):
    """hs: per input line, the list of L + 1 reference hidden states."""
    bad, worst = [], 0.0
    out = os.path.join(d, "out.npy")
    for l in range(L + 1):
        got = run_embed(model, text, ["--layers", str(l), "--pool", "none"], out)
        want = np.concatenate([h[l] for h in hs])
        worst = max(worst, compare(f"layer {l}", got, want, bad))
        offs = np.load(os.path.join(d, "out.offsets.npy"))
        lens = np.cumsum([0] + [len(h[0]) for h in hs])
        if not np.array_equal(offs, lens):
            bad.append(f"offsets {offs.tolist()}, want {lens.tolist()}")
    if not pools:
        return bad, worst
    sels = ["-1", "0", "second-last", "sum-all", ((0.5,) * (L + 1), 1.0)]
    if L >= 4:
        sels += ["sum-last-4", "concat-last-4"]
    rng = np.random.default_rng(3)
    for k, sel in enumerate(sels):
        pool = ["cls", "mean", "max", "last"][k % 4]
        norm = k % 2 == 1
        args = ["--pool", pool, "--max-tokens", "7", "--chunk", "2"]
        if isinstance(sel, tuple):
            s = tuple(float(x) for x in rng.standard_normal(L + 1))
            sel = (s, 0.7)
            args += ["--layer-weights", ",".join(f"{x:.9g}" for x in s), "--gamma", "0.7"]
        else:
            args += ["--layers", sel]
        if norm:
            args.append("--normalize")
        got = run_embed(model, text, args, out)
        want = pooled_ref(hs, sel, pool, norm, L)
        worst = max(worst, compare(f"{sel if isinstance(sel, str) else 'ELMo'} {pool}"
                                   f"{' normalized' if norm else ''}", got, want, bad))
    return bad, worst


LINES = ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9 w10 w11", "w2\tw3 w4 w5", "", "w12 w13"]


def bert_ids(line):
    """[CLS] A [SEP] (B [SEP]) in the test vocabulary (w{i} has id 5 + i)."""
    parts = line.split("\t")
    ids, seg = [2], [0]
    for k, p in enumerate(parts):
        for w in p.split():
            ids.append(5 + int(w[1:]))
            seg.append(k)
        ids.append(3)
        seg.append(k)
    return ids, seg


BERT_CASES = [
    dict(name="BERT: bert. prefix, folder, gelu", prefix="bert.", gamma=False, C=32, NH=4,
         L=4, F=48, P=24, S=2, V=40, eps=1e-12, act="gelu", heads=True, folder=True,
         vocab=True),
    dict(name="BERT: gamma/beta, gelu_new, no prefix", prefix="", gamma=True, C=24, NH=3,
         L=2, F=96, P=20, S=2, V=30, eps=1e-5, act="gelu_new", heads=False, folder=True,
         vocab=True),
]


def check_bert(s, d, rng):
    path, t = hf_bert.write_case(d, s, rng)
    text = "".join(l + "\n" for l in LINES)
    hs = [bert_hidden_all(s, t, *bert_ids(l)) for l in LINES]
    return check_model(s["name"], path, text, hs, s["L"], d)


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


GPT2_CASES = [
    dict(name="GPT-2: transformer. prefix, gelu_new", prefix="transformer.", C=32, NH=4, L=4,
         P=40, V=260, eps=1e-5, act="gelu_new"),
    dict(name="GPT-2: no prefix, 2 layers, eps 1e-3", prefix="", C=24, NH=2, L=2, P=32,
         V=258, eps=1e-3, act="gelu_new"),
]


def check_gpt2(s, d, rng):
    os.makedirs(d, exist_ok=True)
    C, L, V, P_ = s["C"], s["L"], s["V"], s["P"]
    n = lambda *shape, sd=1.0: (rng.standard_normal(shape) * sd).astype(np.float32)
    t, pre = {}, s["prefix"]
    t[pre + "wte.weight"] = n(V, C, sd=0.5)
    t[pre + "wpe.weight"] = n(P_, C, sd=0.5)
    for i in range(L):
        p = f"{pre}h.{i}."
        for nm, shape in (("ln_1", None), ("ln_2", None)):
            t[p + nm + ".weight"] = 1 + n(C, sd=0.2)
            t[p + nm + ".bias"] = n(C, sd=0.2)
        for nm, i_, o_ in (("attn.c_attn", C, 3 * C), ("attn.c_proj", C, C),
                           ("mlp.c_fc", C, 4 * C), ("mlp.c_proj", 4 * C, C)):
            t[p + nm + ".weight"] = n(i_, o_, sd=1.5 / np.sqrt(i_))   # Conv1D: [in, out]
            t[p + nm + ".bias"] = n(o_, sd=0.2)
        # the causal-mask buffers old checkpoints carry
        t[p + "attn.bias"] = np.tril(np.ones((P_, P_), np.float32))[None, None]
    t[pre + "ln_f.weight"] = 1 + n(C, sd=0.2)
    t[pre + "ln_f.bias"] = n(C, sd=0.2)
    hf_bert.write_safetensors(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"activation_function": s["act"], "architectures": ["GPT2LMHeadModel"],
                   "layer_norm_epsilon": s["eps"], "model_type": "gpt2", "n_ctx": P_,
                   "n_embd": C, "n_head": s["NH"], "n_layer": L, "n_positions": P_,
                   "vocab_size": V}, f, indent=2)
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab["<|endoftext|>"] = 256
    with open(os.path.join(d, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    lines = ["Hello, world!", "a", "The quick brown fox jumps", "tab\tinside", "é ü"]
    text = "".join(l + "\n" for l in lines)
    P = {k[len(pre):]: torch.from_numpy(v).double() for k, v in t.items()}
    cfg = dict(C=C, NH=s["NH"], L=L, eps=s["eps"], act=s["act"], kind="decoder", norm="pre")
    hs = [gpt_hidden_all(P, cfg, list(l.encode())) for l in lines]
    bad, worst = check_model(s["name"], d, text, hs, L, d)
    # tfm_model_load (tfm-eval, tfm-train) reads the same checkpoint
    ids = np.array([list(b"Hello, world")], np.int32)
    B, T = ids.shape
    bf, of = os.path.join(d, "batch.bin"), os.path.join(d, "logits.bin")
    with open(bf, "wb") as f:
        f.write(np.array([B, T], np.int32).tobytes() + ids.tobytes()
                + np.zeros_like(ids).tobytes() + np.array([T], np.int32).tobytes())
    r = subprocess.run([PROBE, "model-logits", d, bf, of], capture_output=True, text=True)
    if r.returncode != 0:
        bad.append(f"io_probe model-logits: {r.stderr.strip()}")
    else:
        desc = r.stdout.split()
        want = dict(kind="decoder", norm="pre", n_layer=str(L), n_head=str(s["NH"]),
                    n_embd=str(C), block_size=str(P_), vocab_size=str(V), act="gelu_tanh")
        d_ = dict(zip(desc[0::2], desc[1::2]))
        diff = {k: (d_.get(k), v) for k, v in want.items() if d_.get(k) != v}
        if diff or desc[-2:] != ["other", "257"]:
            bad.append(f"tfm_model_load description (got, want): {diff} {desc[-3:]}")
        got = np.fromfile(of, np.float32).reshape(T, V).astype(np.float64)
        h = gpt_hidden_all(P, cfg, ids[0].tolist())[-1]
        worst = max(worst, compare("tfm_model_load logits", got,
                                   h @ P["wte.weight"].numpy().T, bad))
    return bad, worst


def read_tfm(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    t = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        t[k] = torch.from_numpy(np.frombuffer(data[a:b], np.float32).reshape(v["shape"])
                                .astype(np.float64))
    return t, header.get("__metadata__", {})


TFM_CASES = [
    dict(name="tfm decoder, pre-LN", kind="decoder", norm="pre", L=4, sets=[]),
    dict(name="tfm encoder, post-LN, emb_norm, exact GELU", kind="encoder", norm="post", L=3,
         sets=["model.kind=encoder", "model.norm=post", "model.emb_norm=true",
               "model.activation=gelu_exact"]),
    dict(name="tfm encoder-decoder's encoder, 2 of 3 layers", kind="encoder", norm="pre", L=2,
         sets=["model.kind=encoder-decoder", "model.n_enc_layer=2"], enc=True),
]


def check_tfm(s, d, rng):
    os.makedirs(d, exist_ok=True)
    corpus = os.path.join(d, "corpus.txt")
    lines = ["hello world", "a", "the cat sat on the mat", "abc\tdef"]
    with open(corpus, "w") as f:
        f.write("".join(l + "\n" for l in lines))
    model = os.path.join(d, "m.safetensors")
    args = [MKMODEL, model, "--text", corpus, "--layers", "3" if s.get("enc") else str(s["L"]),
            "--heads", "2", "--embd", "16", "--context", "32", "--scale", "2"]
    for kv in s["sets"]:
        args += ["--set", kv]
    subprocess.run(args, check=True, capture_output=True)
    t, meta = read_tfm(model)
    text = "".join(l + "\n" for l in lines)
    r = subprocess.run([TOKENIZE, "encode", "-t", model], input=text.encode(),
                       capture_output=True, check=True)
    ids = [[int(x) for x in l.split()] for l in r.stdout.decode().splitlines()]
    act = "gelu_exact" if "model.activation=gelu_exact" in s["sets"] else "gelu_tanh"
    cfg = dict(C=16, NH=2, L=s["L"], eps=1e-5, act=act, kind=s["kind"], norm=s["norm"],
               emb_norm="model.emb_norm=true" in s["sets"])
    pre = ""
    if s.get("enc"):
        pre, cfg["wte"] = "enc.", "wte.weight"       # the source embedding is tied
        P = dict(t)
        P["enc.ln_f.weight"], P["enc.ln_f.bias"] = t["enc.ln_f.weight"], t["enc.ln_f.bias"]
        # gpt_hidden_all reads ln_f from pre + "ln_f"
        hs = [gpt_hidden_all(P, cfg, x, pre) for x in ids]
    else:
        hs = [gpt_hidden_all(t, cfg, x) for x in ids]
    return check_model(s["name"], model, text, hs, s["L"], d)


def main():
    for p in (EMBED, MKMODEL, TOKENIZE, PROBE):
        if not os.path.exists(p):
            print(f"SKIP: {p} not built")
            return 77
    rng = np.random.default_rng(11)
    top = tempfile.mkdtemp(prefix="embed_torch.")
    failed = 0
    checks = []
    for i, s in enumerate(BERT_CASES):
        checks.append((s["name"], lambda s=s, i=i: check_bert(s, os.path.join(top, f"b{i}"), rng)))
    for i, s in enumerate(GPT2_CASES):
        checks.append((s["name"], lambda s=s, i=i: check_gpt2(s, os.path.join(top, f"g{i}"), rng)))
    for i, s in enumerate(TFM_CASES):
        checks.append((s["name"], lambda s=s, i=i: check_tfm(s, os.path.join(top, f"t{i}"), rng)))
    try:
        for name, fn in checks:
            try:
                bad, worst = fn()
            except (RuntimeError, subprocess.CalledProcessError) as e:
                bad, worst = [str(e)], 0.0
            print(f"{'FAIL' if bad else 'ok'} {name}: max |tfm - torch| / max |torch| = "
                  f"{worst:.2g}")
            for b in bad:
                print(f"  {b}")
            failed += bool(bad)
    finally:
        shutil.rmtree(top)
    print(f"embed_torch: {len(checks) - failed}/{len(checks)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
