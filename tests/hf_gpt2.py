#!/usr/bin/python3
"""HuggingFace GPT-2 folders as save_pretrained writes them, against PyTorch.

A GPT2LMHeadModel checkpoint (transformer.-prefixed names, Conv1D [in, out]
weights) is written here with config.json keys that change the model:
tie_word_embeddings false with its own lm_head.weight, scale_attn_weights
false (scores q·kᵀ without 1/√head_dim), n_inner (the feed-forward width)
other than 4·n_embd.  tests/io_probe model-logits (tfm_model_load) and
tfm-generate --greedy --json (tfm_lm_open and the cached decode step) must
give the float64 reference's logits and log-probabilities, to 1e-4.

The same tensors split into two shards with model.safetensors.index.json
(save_pretrained's max_shard_size layout) give the same logits; a folder
with only pytorch_model.bin says the pickle format is unsupported and how
to convert; encoder.json + vocab.bpe beside the model are its tokenizer; a
vocab.json larger than the model is blamed on vocab.json.

Bad config.json keys, each an error naming config.json, the line and the
key (exit 1): n_layer, n_embd, vocab_size or n_positions disagreeing with
the tensors, n_inner disagreeing with c_fc, an unknown key, one whose
value tfm cannot honour (scale_attn_by_inverse_layer_idx true,
add_cross_attention true), tie_word_embeddings false without
lm_head.weight.  A broken index (a tensor missing from its shard, a shard's
tensor not in the weight_map) is an error naming the file and tensor.
tfm-train --convert q8_0 of a folder whose matrix holds a NaN fails naming
the folder and tensor, and writes nothing."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_lib import GEN, PROBE, TOL, TRAIN, refusals, run, write_safetensors  # noqa: E402
from embed_torch import bytes_to_unicode  # noqa: E402  (GPT-2's byte stand-ins)

PRE = "transformer."


def random_checkpoint(s, rng):
    C, L, V, P, Fd = s["C"], s["L"], s["V"], s["P"], s["F"]
    n = lambda *shape, sd=1.0: (rng.standard_normal(shape) * sd).astype(np.float32)
    t = {PRE + "wte.weight": n(V, C, sd=0.5), PRE + "wpe.weight": n(P, C, sd=0.5)}
    for i in range(L):
        p = f"{PRE}h.{i}."
        for nm in ("ln_1", "ln_2"):
            t[p + nm + ".weight"] = 1 + n(C, sd=0.2)
            t[p + nm + ".bias"] = n(C, sd=0.2)
        for nm, i_, o_ in (("attn.c_attn", C, 3 * C), ("attn.c_proj", C, C),
                           ("mlp.c_fc", C, Fd), ("mlp.c_proj", Fd, C)):
            t[p + nm + ".weight"] = n(i_, o_, sd=1.5 / np.sqrt(i_))
            t[p + nm + ".bias"] = n(o_, sd=0.2)
    t[PRE + "ln_f.weight"] = 1 + n(C, sd=0.2)
    t[PRE + "ln_f.bias"] = n(C, sd=0.2)
    if not s["tied"]:
        t["lm_head.weight"] = n(V, C, sd=0.5)   # nn.Linear [out, in]
    return t


def hf_config(s):
    c = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
         "attn_pdrop": 0.1, "bos_token_id": 256, "embd_pdrop": 0.1, "eos_token_id": 256,
         "initializer_range": 0.02, "layer_norm_epsilon": 1e-5, "model_type": "gpt2",
         "n_ctx": s["P"], "n_embd": s["C"], "n_head": s["NH"], "n_inner": s["n_inner"],
         "n_layer": s["L"], "n_positions": s["P"], "reorder_and_upcast_attn": False,
         "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False,
         "scale_attn_weights": s["scaled"], "summary_activation": None,
         "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
         "summary_type": "cls_index", "summary_use_proj": True,
         "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
         "tie_word_embeddings": s["tied"], "torch_dtype": "float32",
         "transformers_version": "4.38.2", "use_cache": True, "vocab_size": s["V"]}
    return c


def write_byte_vocab(d, n=257, names=("vocab.json", "merges.txt")):
    """GPT-2's 256 byte symbols and <|endoftext|> (n > 257: padding pieces)."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab["<|endoftext|>"] = 256
    for k in range(257, n):
        vocab[f"<pad{k}>"] = k
    with open(os.path.join(d, names[0]), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, names[1]), "w") as f:
        f.write("#version: 0.2\n")


def write_folder(d, s, t, cfg):
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_byte_vocab(d)


def logits(P, s, ids):
    """GPT2LMHeadModel's logits of one sequence, float64."""
    C, NH, L = s["C"], s["NH"], s["L"]
    HS = C // NH
    T = len(ids)
    W = lambda n: P[PRE + n]
    ln = lambda x, n: F.layer_norm(x, (C,), W(n + ".weight"), W(n + ".bias"), 1e-5)
    conv = lambda x, n: x @ W(n + ".weight") + W(n + ".bias")
    x = W("wte.weight")[torch.tensor(ids)] + W("wpe.weight")[:T]
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(L):
        p = f"h.{i}."
        q, k, v = conv(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, -1)
        q, k, v = (z.view(T, NH, HS).permute(1, 0, 2) for z in (q, k, v))
        sc = q @ k.transpose(-1, -2)
        if s["scaled"]:
            sc = sc / np.sqrt(HS)
        y = (sc.masked_fill(causal, float("-inf")).softmax(-1) @ v).permute(1, 0, 2).reshape(T, C)
        x = x + conv(y, p + "attn.c_proj")
        h = F.gelu(conv(ln(x, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
        x = x + conv(h, p + "mlp.c_proj")
    x = ln(x, "ln_f")
    head = P["lm_head.weight"] if not s["tied"] else W("wte.weight")
    return x @ head.T


def probe(d, ids):
    """tests/io_probe model-logits on one sequence: (process, logits [T, V])."""
    top = os.path.dirname(d.rstrip("/"))
    bf, of = os.path.join(top, "batch.bin"), os.path.join(top, "logits.bin")
    a = np.array([ids], np.int32)
    with open(bf, "wb") as f:
        f.write(np.array([1, a.shape[1]], np.int32).tobytes() + a.tobytes()
                + np.zeros_like(a).tobytes() + np.array([a.shape[1]], np.int32).tobytes())
    r = run([PROBE, "model-logits", d, bf, of])
    got = np.fromfile(of, np.float32).reshape(len(ids), -1) if r.returncode == 0 else None
    return r, got


CASES = [
    # every key that changes the model at once, and the default layout
    dict(name="untied-unscaled-n_inner", C=64, NH=4, L=2, P=24, V=257, F=96, n_inner=96,
         tied=False, scaled=False),
    dict(name="tied-scaled", C=64, NH=2, L=2, P=24, V=257, F=256, n_inner=None, tied=True,
         scaled=True),
]


def check_case(s, top, rng):
    d = os.path.join(top, s["name"])
    t = random_checkpoint(s, rng)
    write_folder(d, s, t, hf_config(s))
    P = {k: torch.from_numpy(v).double() for k, v in t.items()}
    ids = [int(x) for x in rng.integers(0, 257, 11)]
    ref = logits(P, s, ids).numpy()
    bad = []
    r, got = probe(d, ids)
    if r.returncode != 0:
        return [f"io_probe: {r.stderr.strip()}"]
    desc = dict(zip(r.stdout.split()[0::2], r.stdout.split()[1::2]))
    want = {"d_ff": str(s["F"]), "tied": str(int(s["tied"])), "n_layer": str(s["L"])}
    if {k: desc.get(k) for k in want} != want:
        bad.append(f"io_probe description {r.stdout.splitlines()[0]}, want {want}")
    err = np.abs(got - ref).max()
    print(f"  {s['name']}: tfm_model_load logits max |tfm - torch| = {err:.2e} "
          f"(max |logit| {np.abs(ref).max():.1f})")
    if not err <= TOL * max(1.0, np.abs(ref).max()):
        bad.append(f"tfm_model_load logits differ by {err:.3g}")
    # tfm_lm_open and the decode step: greedy ids and log-probabilities
    r = run([GEN, "-m", d, "--ids", "--greedy", "--json", "-n", "6", "--ignore-eos", "-q"],
            input=" ".join(map(str, ids)) + "\n")
    if r.returncode != 0:
        return bad + [f"tfm-generate: {r.stderr.strip()}"]
    o = json.loads(r.stdout.splitlines()[0])
    seq, want_ids, want_lp = list(ids), [], []
    for _ in range(6):
        lp = logits(P, s, seq)[-1].log_softmax(-1)
        nxt = int(lp[:s["V"]].argmax())
        want_ids.append(nxt)
        want_lp.append(lp[nxt].item())
        seq.append(nxt)
    if o["ids"] != want_ids:
        bad.append(f"tfm-generate greedy ids {o['ids']}, torch {want_ids}")
    else:
        e = max(abs(a - b) for a, b in zip(o["logprobs"], want_lp))
        print(f"  {s['name']}: tfm-generate greedy ids equal, log-prob max diff {e:.2e}")
        if not e <= TOL:
            bad.append(f"tfm-generate log-probabilities differ by {e:.3g}")
    bad += check_shards(s, top, t, ids, got)
    return bad


def write_shards(d, t, cut, index=None):
    """save_pretrained(max_shard_size=...)'s layout: the tensors in two
    shards (the first cut of them in the first), the index naming each."""
    os.makedirs(d, exist_ok=True)
    names = list(t)
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    parts = [names[:cut], names[cut:]]
    wm = {}
    for f, part in zip(files, parts):
        write_safetensors(os.path.join(d, f), {k: t[k] for k in part}, {"format": "pt"})
        wm.update({k: f for k in part})
    if index:
        index(wm)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.nbytes for v in t.values())},
                   "weight_map": dict(sorted(wm.items()))}, f, indent=2)


def check_shards(s, top, t, ids, unsharded):
    d = os.path.join(top, s["name"] + "-sharded")
    write_shards(d, t, len(t) // 2)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(s), f)
    write_byte_vocab(d)
    r, got = probe(d, ids)
    if r.returncode != 0:
        return [f"sharded folder: io_probe: {r.stderr.strip()}"]
    bad = []
    if not np.array_equal(got, unsharded):
        bad.append("the sharded folder's logits differ from the single file's")
    r = run([GEN, "-m", d, "--ids", "--greedy", "-n", "3", "-q"], input="5 6 7\n")
    if r.returncode != 0:
        bad.append(f"tfm-generate on the sharded folder: {r.stderr.strip()}")
    print(f"  {s['name']}: two shards + model.safetensors.index.json give the same logits")
    return bad


def expect(what, d, pieces, prog_args=None):
    """io_probe (tfm_model_load) and tfm-generate (tfm_lm_open) on folder d
    exit 1 with a message holding every piece."""
    r, _ = probe(d, [5, 6, 7])
    r2 = run([GEN, "-m", d, "--ids", "--greedy", "-n", "2"], input="5 6\n")
    return refusals(what, pieces, (("io_probe", r), ("tfm-generate", r2)))


def line_col(path, needle):
    with open(path) as f:
        text = f.read()
    i = text.index(needle)
    ln = text.count("\n", 0, i) + 1
    return ln, i - (text.rfind("\n", 0, i) + 1) + 1


def check_errors(top, rng):
    s = CASES[0]
    t = random_checkpoint(s, rng)
    bad = []
    d = os.path.join(top, "bad")
    cj = os.path.join(d, "config.json")

    def with_cfg(what, change, key, pieces, tensors=t):
        shutil.rmtree(d, ignore_errors=True)
        cfg = hf_config(s)
        change(cfg)
        write_folder(d, s, tensors, cfg)
        ln, col = line_col(cj, f'"{key}"')
        # the message points at the value of the key (or the key itself)
        return expect(what, d, [f"{cj}:{ln}:"] + pieces)

    bad += with_cfg("n_layer 3", lambda c: c.update(n_layer=3), "n_layer",
                    ["n_layer 3 but the checkpoint has 2"])
    bad += with_cfg("n_embd 32", lambda c: c.update(n_embd=32), "n_embd",
                    ["n_embd 32 but the checkpoint has 64"])
    bad += with_cfg("vocab_size", lambda c: c.update(vocab_size=300), "vocab_size",
                    ["vocab_size 300 but the checkpoint has 257"])
    bad += with_cfg("n_positions", lambda c: c.update(n_positions=1024), "n_positions",
                    ["n_positions 1024 but the checkpoint has 24"])
    bad += with_cfg("unknown key", lambda c: c.update(rotary_dim=16), "rotary_dim",
                    ["'rotary_dim' is not a GPT2Config key tfm reads"])
    bad += with_cfg("scale_attn_by_inverse_layer_idx",
                    lambda c: c.update(scale_attn_by_inverse_layer_idx=True),
                    "scale_attn_by_inverse_layer_idx",
                    ["scale_attn_by_inverse_layer_idx true is not supported"])
    bad += with_cfg("add_cross_attention", lambda c: c.update(add_cross_attention=True),
                    "add_cross_attention", ["add_cross_attention true is not supported"])
    tied_less = {k: v for k, v in t.items() if k != "lm_head.weight"}
    bad += with_cfg("untied without lm_head", lambda c: None, "tie_word_embeddings",
                    ["tie_word_embeddings false but", "has no lm_head.weight"], tied_less)
    # n_inner null is 4 x n_embd: the file's c_fc [64, 96] is not that
    shutil.rmtree(d, ignore_errors=True)
    cfg = hf_config(s)
    cfg["n_inner"] = None
    write_folder(d, s, t, cfg)
    bad += expect("n_inner null over c_fc [64, 96]", d,
                  [f"{cj}: n_inner null means 4 x n_embd = 256, but the checkpoint's "
                   "h.0.mlp.c_fc.weight is [64, 96]"])
    bad += with_cfg("n_inner 128 over c_fc [64, 96]", lambda c: c.update(n_inner=128),
                    "n_inner", ["n_inner 128 but the checkpoint's h.0.mlp.c_fc.weight is "
                                "[64, 96]"])

    # sharded: a listed tensor missing from its shard; a shard's tensor unlisted
    shard_dir = os.path.join(top, "bad-shards")
    idx = os.path.join(shard_dir, "model.safetensors.index.json")
    for what, change, pieces in (
            ("a tensor not in its shard",
             lambda wm: wm.update({PRE + "h.7.ln_1.weight": "model-00001-of-00002.safetensors"}),
             [idx, f"tensor '{PRE}h.7.ln_1.weight' is not in its shard"]),
            ("a shard's tensor not listed", lambda wm: wm.pop(PRE + "wte.weight"),
             [f"tensor '{PRE}wte.weight' is not listed in {idx}"])):
        shutil.rmtree(shard_dir, ignore_errors=True)
        write_shards(shard_dir, t, len(t) // 2, change)
        with open(os.path.join(shard_dir, "config.json"), "w") as f:
            json.dump(hf_config(s), f)
        bad += expect(what, shard_dir, pieces)

    # pytorch_model.bin alone: the pickle format, named, with the way out
    pt = os.path.join(top, "pickle")
    os.makedirs(pt)
    torch.save({k: torch.from_numpy(v) for k, v in t.items()},
               os.path.join(pt, "pytorch_model.bin"))
    with open(os.path.join(pt, "config.json"), "w") as f:
        json.dump(hf_config(s), f)
    bad += expect("pytorch_model.bin only", pt,
                  [os.path.join(pt, "pytorch_model.bin"), "pickle format is not supported",
                   "save_pretrained"])

    # a vocab.json larger than the model: blamed on vocab.json
    big = os.path.join(top, "bigvocab")
    write_folder(big, s, t, hf_config(s))
    write_byte_vocab(big, 300)
    r, _ = probe(big, [5, 6])
    want = f"{os.path.join(big, 'vocab.json')}: the tokenizer has 300 tokens but the model only 257"
    if r.returncode != 1 or want not in r.stderr:
        bad.append(f"vocab.json too large: exit {r.returncode}: {r.stderr.strip()!r}, want {want!r}")

    # encoder.json + vocab.bpe (OpenAI's names for the same pair) are read
    ob = os.path.join(top, "openai-names")
    write_folder(ob, s, t, hf_config(s))
    os.remove(os.path.join(ob, "vocab.json"))
    os.remove(os.path.join(ob, "merges.txt"))
    write_byte_vocab(ob, 257, ("encoder.json", "vocab.bpe"))
    r, _ = probe(ob, [5, 6])
    if r.returncode != 0 or "tokenizer other 257" not in r.stdout:
        bad.append(f"encoder.json + vocab.bpe: exit {r.returncode}: {r.stdout.strip()!r} "
                   f"{r.stderr.strip()!r}")
    r = run([GEN, "-m", ob, "--greedy", "-n", "3", "-q"], input="Hello\n", errors="replace")
    if r.returncode != 0:
        bad.append(f"tfm-generate with encoder.json + vocab.bpe: {r.stderr.strip()}")
    print("  errors: config.json keys, broken shards, pytorch_model.bin, vocab.json; "
          "encoder.json + vocab.bpe read")

    # --convert q8_0 of a NaN matrix: an error naming the tensor, no file
    nan = os.path.join(top, "nan")
    t2 = dict(t)
    w = t2[PRE + "h.1.mlp.c_fc.weight"].copy()
    w[3, 5] = np.nan
    t2[PRE + "h.1.mlp.c_fc.weight"] = w
    write_folder(nan, s, t2, hf_config(s))
    out = os.path.join(top, "nan-q8.safetensors")
    r = run([TRAIN, "--convert", "q8_0", nan, "-o", out])
    want = "tensor 'h.1.mlp.c_fc.weight' holds nan at [3, 5]: q8_0 cannot store it"
    if r.returncode != 1 or want not in r.stderr or nan not in r.stderr:
        bad.append(f"--convert q8_0 of a NaN matrix: exit {r.returncode}: "
                   f"{r.stderr.strip()!r}, want {want!r}")
    if os.path.exists(out):
        bad.append(f"--convert q8_0 of a NaN matrix wrote {out}")
    return bad


def main():
    for p in (PROBE, GEN, TRAIN):
        if not os.path.exists(p):
            print(f"missing {p}")
            return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(31)
    top = tempfile.mkdtemp(prefix="hf_gpt2.")
    bad = []
    try:
        for s in CASES:
            bad += [f"{s['name']}: {b}" for b in check_case(s, top, rng)]
        bad += check_errors(top, rng)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
