#!/usr/bin/python3
"""LoRA adapters against PyTorch.

(a) Adapters written here in PEFT's naming (base_model.model.<module>.lora_A
.weight [r, in], lora_B.weight [out, r]; random A, nonzero B, lora_alpha != r)
on a tfm model (tfm's module names: q and v inside the fused c_attn, c_proj,
c_fc) and on a GPT-2 checkpoint (Conv1D c_attn over q, k, v together,
mlp.c_proj; use_rslora: alpha/sqrt(r)), applied by tfm-eval --adapter
(every token's log-probability) against the merged reference computed
here in float64: W + (lora_alpha/r)·B·A, to 1e-4.  tfm-train
--merge-adapter's file gives the same logits as --adapter.  (Adapters
that PEFT itself writes on folders that transformers writes, GPT-2, BERT
and T5, are tests/peft_hf.py's, judged by PEFT.)

(b) A few LoRA training steps of tfm-train (r 4, alpha 8, on q, v, fc and
the attention's c_proj, AdamW with decay, warmup, clipping) against the same
steps in plain PyTorch: the base frozen as tfm-train's train.init gives it,
A as tfm's zero-step run wrote it, B zero, the same batches (tests/
train_torch.py's re-implementation of tfm's data stream): per-step losses
and the final adapter tensors to 1e-4."""
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
import eval_torch  # noqa: E402  (the GPT reference in float64)
import hf_bert  # noqa: E402  (HF BERT checkpoints and their reference)
import train_torch  # noqa: E402  (tfm's data stream, the training reference)

BUILD = os.environ.get("TFM_BUILDDIR", ".")
EXE = lambda name: os.path.join(BUILD, name)
TOL = 1e-4
PRE = "base_model.model."


def run(*args, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit("FAIL: %s: exit %d\n%s" % (" ".join(map(str, args)), r.returncode, r.stderr))
    return r


def write_adapter(d, mods, r, alpha, targets, fan_in_fan_out=False, rslora=False):
    """PEFT's save_pretrained layout; mods: module -> (A, B)."""
    os.makedirs(d, exist_ok=True)
    t = {}
    for m, (A, B) in mods.items():
        t[PRE + m + ".lora_A.weight"] = A
        t[PRE + m + ".lora_B.weight"] = B
    hf_bert.write_safetensors(os.path.join(d, "adapter_model.safetensors"), t, {"format": "pt"})
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None,
           "r": r, "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": targets,
           "bias": "none", "fan_in_fan_out": fan_in_fan_out, "inference_mode": True,
           "modules_to_save": None, "revision": None, "use_rslora": rslora,
           "rank_pattern": {}, "alpha_pattern": {}}
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def random_pair(rng, r, n_in, n_out):
    A = (rng.standard_normal((r, n_in)) / math.sqrt(n_in)).astype(np.float32)
    B = (rng.standard_normal((n_out, r)) * 0.3).astype(np.float32)
    return A, B


def merge_in_out(W, A, B, s, col=0):
    """W [in, out] (tfm's and Conv1D's layout): columns col.. += s·(B·A)ᵀ."""
    d = s * (torch.from_numpy(B).double() @ torch.from_numpy(A).double()).T
    W[:, col:col + d.shape[1]] += d


def compare(what, got, want, bad):
    err = np.abs(got - want).max()
    scale = max(1.0, np.abs(want).max())
    print("%s: max |tfm - torch| = %.3g (scale %.3g)" % (what, err, scale))
    if not err <= TOL * scale:
        bad.append("%s: max |tfm - torch| = %.3g > %g·%.3g" % (what, err, TOL, scale))


def token_logprobs(model, adapter, npy, n):
    args = [EXE("tfm-eval"), "perplexity", "-q", "--threads", "1", "-m", model, "--tokens", npy,
            "--context", n, "--token-logprobs", "-"]
    if adapter:
        args += ["--adapter", adapter]
    out = run(*args).stdout.splitlines()
    rows = [line.split("\t") for line in out if line and line[0].isdigit()]
    # the perplexity table's row has more columns: keep index, id, logprob
    return {int(r[0]): float(r[2]) for r in rows if len(r) == 3}


def ref_logprobs(P, cfg, ids):
    lp = eval_torch.logits_of(P, cfg, torch.tensor([ids]))[0].log_softmax(-1)
    return {t: lp[t - 1, ids[t]].item() for t in range(1, len(ids))}


def check_decoder(work, rng, hf, bad):
    """A tfm decoder (tfm's names) or a GPT-2 folder (HF's) with an adapter."""
    L, H, C, T, V = 2, 2, 32, 16, 40
    d = os.path.join(work, "gpt2" if hf else "tfm")
    os.makedirs(d)
    path = os.path.join(d, "model.safetensors")
    run(EXE("tests/mkmodel"), path, "--layers", L, "--heads", H, "--embd", C, "--context", T,
        "--vocab", V, "--seed", 5, "--scale", 3, *(["--hf"] if hf else []))
    if hf:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2", "n_head": H, "n_layer": L, "n_embd": C,
                       "n_positions": T, "vocab_size": V, "layer_norm_epsilon": 1e-5,
                       "activation_function": "gelu_new"}, f)
        P, _ = train_torch.read_safetensors(path)
        P = {k[len("transformer."):] if k.startswith("transformer.") else k: v.double()
             for k, v in P.items()}
        cfg = {"n_layer": L, "n_head": H, "norm": "pre", "ln_eps": 1e-5, "block_size": T}
    else:
        P, cfg, _ = eval_torch.read_model(path)
    r, alpha = 4, 12.0
    s = alpha / math.sqrt(r) if hf else alpha / r  # the GPT-2 adapter is rank-stabilised
    mods, targets = {}, []
    for i in range(L):
        if hf:  # Conv1D: one adapter over the fused q, k, v; mlp.c_proj [4C -> C]
            A, B = random_pair(rng, r, C, 3 * C)
            mods["transformer.h.%d.attn.c_attn" % i] = (A, B)
            merge_in_out(P["h.%d.attn.c_attn.weight" % i], A, B, s)
            A, B = random_pair(rng, r, 4 * C, C)
            mods["transformer.h.%d.mlp.c_proj" % i] = (A, B)
            merge_in_out(P["h.%d.mlp.c_proj.weight" % i], A, B, s)
            targets = ["c_attn", "c_proj"]
        else:   # q and v are column blocks of c_attn
            for part, name in ((0, "attn.q"), (2, "attn.v")):
                A, B = random_pair(rng, r, C, C)
                mods["h.%d.%s" % (i, name)] = (A, B)
                merge_in_out(P["h.%d.attn.c_attn.weight" % i], A, B, s, part * C)
            A, B = random_pair(rng, r, C, 4 * C)
            mods["h.%d.mlp.c_fc" % i] = (A, B)
            merge_in_out(P["h.%d.mlp.c_fc.weight" % i], A, B, s)
            A, B = random_pair(rng, r, C, C)
            mods["h.%d.attn.c_proj" % i] = (A, B)
            merge_in_out(P["h.%d.attn.c_proj.weight" % i], A, B, s)
            targets = ["attn.q", "attn.v", "c_fc", "attn.c_proj"]
    ad = os.path.join(work, "adapter-" + os.path.basename(d))
    write_adapter(ad, mods, r, alpha, targets, fan_in_fan_out=hf, rslora=hf)
    ids = [int(x) for x in rng.integers(0, V, T)]
    npy = os.path.join(work, "ids.npy")
    np.save(npy, np.array(ids, np.uint16))
    base = d if hf else path
    got = token_logprobs(base, ad, npy, T)
    want = ref_logprobs(P, cfg, ids)
    if sorted(got) != sorted(want):
        bad.append("%s: tfm-eval scored positions %s, expected %s" % (d, sorted(got),
                                                                       sorted(want)))
        return
    what = "GPT-2 folder" if hf else "tfm model"
    compare("%s + adapter, tfm-eval --adapter log-probs" % what,
            np.array([got[k] for k in sorted(got)]), np.array([want[k] for k in sorted(want)]),
            bad)
    # the adapter changes the scores (so the comparison above means something)
    plain = token_logprobs(base, None, npy, T)
    moved = max(abs(plain[k] - got[k]) for k in got)
    if not moved > 1e-2:
        bad.append("%s: the adapter moved the log-probs by only %.3g" % (what, moved))
    # one merged file: the same scores without --adapter
    merged = os.path.join(work, "merged-%s.safetensors" % os.path.basename(d))
    run(EXE("tfm-train"), "--merge-adapter", ad, base, "-o", merged)
    m = token_logprobs(merged, None, npy, T)
    compare("%s, tfm-train --merge-adapter file log-probs" % what,
            np.array([m[k] for k in sorted(m)]), np.array([want[k] for k in sorted(want)]), bad)


def run_rc(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def check_values(work, rng, bad):
    """An adapter's values and its base: F16 tensors are read (as F16
    models are), a NaN is refused at load naming the file and tensor (by
    --adapter and --merge-adapter, which writes nothing), and a
    base_model_name_or_path naming another model is warned about."""
    L, H, C, T, V = 1, 2, 32, 16, 40
    d = os.path.join(work, "gpt2-values")
    os.makedirs(d)
    run(EXE("tests/mkmodel"), os.path.join(d, "model.safetensors"), "--layers", L, "--heads",
        H, "--embd", C, "--context", T, "--vocab", V, "--seed", 9, "--scale", 3, "--hf")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_head": H, "n_layer": L, "n_embd": C,
                   "n_positions": T, "vocab_size": V}, f)
    P, _ = train_torch.read_safetensors(os.path.join(d, "model.safetensors"))
    P = {k[len("transformer."):] if k.startswith("transformer.") else k: v.double()
         for k, v in P.items()}
    cfg = {"n_layer": L, "n_head": H, "norm": "pre", "ln_eps": 1e-5, "block_size": T}
    r, alpha = 4, 8.0
    A, B = random_pair(rng, r, C, 3 * C)
    A16, B16 = A.astype(np.float16), B.astype(np.float16)
    merge_in_out(P["h.0.attn.c_attn.weight"], A16.astype(np.float32), B16.astype(np.float32),
                 alpha / r)
    ad = os.path.join(work, "adapter-f16")
    write_adapter(ad, {"transformer.h.0.attn.c_attn": (A16, B16)}, r, alpha, ["c_attn"], True)
    ids = [int(x) for x in rng.integers(0, V, T)]
    npy = os.path.join(work, "ids-values.npy")
    np.save(npy, np.array(ids, np.uint16))
    r0 = run_rc(EXE("tfm-eval"), "perplexity", "-q", "--threads", "1", "-m", d, "--tokens",
                npy, "--context", T, "--token-logprobs", "-", "--adapter", ad)
    if r0.returncode != 0:
        bad.append("an F16 adapter: exit %d: %s" % (r0.returncode, r0.stderr.strip()))
    else:
        got = token_logprobs(d, ad, npy, T)
        want = ref_logprobs(P, cfg, ids)
        compare("GPT-2 folder + F16 adapter, tfm-eval --adapter log-probs",
                np.array([got[k] for k in sorted(got)]),
                np.array([want[k] for k in sorted(want)]), bad)
    # a NaN in lora_B: refused at load, naming the adapter file and the tensor
    Bn = B.copy()
    Bn[3, 1] = np.nan
    adn = os.path.join(work, "adapter-nan")
    write_adapter(adn, {"transformer.h.0.attn.c_attn": (A, Bn)}, r, alpha, ["c_attn"], True)
    want = ("%s/adapter_model.safetensors: tensor '%stransformer.h.0.attn.c_attn.lora_B.weight' "
            "holds nan" % (adn, PRE))
    merged = os.path.join(work, "merged-nan.safetensors")
    for what, args in (("--adapter", [EXE("tfm-eval"), "perplexity", "-q", "-m", d, "--tokens",
                                      npy, "--context", T, "--adapter", adn]),
                       ("--merge-adapter", [EXE("tfm-train"), "--merge-adapter", adn, d, "-o",
                                            merged])):
        rr = run_rc(*args)
        if rr.returncode != 1 or want not in rr.stderr:
            bad.append("a NaN adapter, %s: exit %d: %r, want %r" % (what, rr.returncode,
                                                                    rr.stderr.strip(), want))
    if os.path.exists(merged):
        bad.append("--merge-adapter of a NaN adapter wrote %s" % merged)
    print("adapters: F16 read, NaN refused at load")
    # base_model_name_or_path: the same folder (by path or by its name, as
    # a hub id ends) is quiet, another model is a warning on stderr
    for base, warned in ((d, False), ("someone/" + os.path.basename(d), False),
                         ("openai-community/gpt2-large", True)):
        with open(os.path.join(ad, "adapter_config.json")) as f:
            c = json.load(f)
        c["base_model_name_or_path"] = base
        with open(os.path.join(ad, "adapter_config.json"), "w") as f:
            json.dump(c, f)
        rr = run_rc(EXE("tfm-eval"), "perplexity", "-q", "-m", d, "--tokens", npy, "--context",
                    T, "--adapter", ad)
        said = "warning:" in rr.stderr and "trained on 'openai-community/gpt2-large'" in rr.stderr
        if rr.returncode != 0 or said != warned or (not warned and rr.stderr.strip()):
            bad.append("base_model_name_or_path %r: exit %d, stderr %r (want %s)" % (
                base, rr.returncode, rr.stderr.strip(), "a warning" if warned else "nothing"))
    print("adapters: base_model_name_or_path of another model warned about")


def peft_targets(targets, module):
    """PEFT's rule: a list entry is the module's name or its dotted suffix,
    a string a regular expression over the whole name."""
    import re
    if isinstance(targets, str):
        return re.fullmatch(targets, module) is not None
    return any(module == t or module.endswith("." + t) for t in targets)


def read_f32(path):
    """A safetensors file's F32 tensors (HF files also hold I64 buffers)."""
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    return {k: torch.from_numpy(np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]],
                                              np.float32).reshape(v["shape"]).copy())
            for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F32"}


def gpt2_site(m, C):
    """A GPT-2 module's tfm weight (Conv1D's layout: the same)."""
    return (m[len("transformer."):] if m.startswith("transformer.") else m), 0


def bert_site(m, C):
    """A BERT module's tfm weight and first column (q, k, v side by side)."""
    import re
    i, rest = re.match(r"(?:bert\.)?encoder\.layer\.(\d+)\.(.*)", m).groups()
    table = {"attention.self.query": ("attn.c_attn", 0), "attention.self.key": ("attn.c_attn", C),
             "attention.self.value": ("attn.c_attn", 2 * C),
             "attention.output.dense": ("attn.c_proj", 0), "intermediate.dense": ("mlp.c_fc", 0),
             "output.dense": ("mlp.c_proj", 0)}
    name, col = table[rest]
    return "h.%s.%s" % (i, name), col


def check_peft_layout(what, run_dir, base_st, merged, fan_in_fan_out, bad, site=gpt2_site, C=0):
    """The adapter tfm-train wrote on a HuggingFace base, as
    PeftModel.from_pretrained reads it: every tensor base_model.model.<a
    module of the base>.lora_A/B.weight, target_modules matching exactly
    the adapted modules among the base's, and W + (lora_alpha/r)·B·A (in
    the base's own layout) the merged model's weight."""
    A, _ = train_torch.read_safetensors(os.path.join(run_dir, "adapter_model.safetensors"))
    with open(os.path.join(run_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    W = read_f32(base_st)
    M, _ = train_torch.read_safetensors(merged)
    base_mods = {k[:-len(".weight")] for k in W if k.endswith(".weight")}
    mods = sorted({k[len(PRE):-len(".lora_A.weight")] for k in A if k.endswith(".lora_A.weight")})
    missing = [m for m in mods if m not in base_mods]
    if not mods or missing:
        bad.append("%s: adapter modules %s are not the base's (%s)" % (what, missing or mods,
                                                                      sorted(base_mods)[:4]))
        return
    matched = sorted(m for m in base_mods if peft_targets(cfg["target_modules"], m))
    if matched != mods:
        bad.append("%s: target_modules %r match %s, the adapter has %s" % (
            what, cfg["target_modules"], matched, mods))
    if cfg["fan_in_fan_out"] != fan_in_fan_out:
        bad.append("%s: fan_in_fan_out %s" % (what, cfg["fan_in_fan_out"]))
    s = cfg["lora_alpha"] / cfg["r"]
    worst = 0.0
    for m in mods:
        a, b = A[PRE + m + ".lora_A.weight"].double(), A[PRE + m + ".lora_B.weight"].double()
        if a.shape[0] != cfg["r"] or b.shape[1] != cfg["r"]:
            bad.append("%s: %s: lora_A %s, lora_B %s for r %d" % (what, m, list(a.shape),
                                                                list(b.shape), cfg["r"]))
            return
        d = s * (b @ a)
        w = W[m + ".weight"].double()
        want = w + (d.T if fan_in_fan_out else d)
        # the merged model is tfm's: [in, out] (Conv1D's, nn.Linear's transposed)
        tfm_name, col = site(m, C)
        got = M[tfm_name + ".weight"].double()
        if not fan_in_fan_out:
            want = want.T
        got = got[:, col:col + want.shape[1]]
        worst = max(worst, (got - want).abs().max().item())
    print("%s: adapter in PEFT's names (%s), merged W + s·B·A max |diff| = %.3g" % (
        what, cfg["target_modules"], worst))
    if not worst <= 1e-5:
        bad.append("%s: the HF-named adapter's merge differs from tfm's by %.3g" % (what, worst))


def check_hf_training(work, bad):
    """LoRA training from a HuggingFace GPT-2 folder writes the adapter in
    HF's module names (q and v fused into c_attn's adapter of rank 2r, the
    others padded to it), which PEFT would load on that folder and which
    tfm applies to it as the run's merged model computes."""
    L, H, C, T, V = 2, 2, 16, 8, 23
    d = os.path.join(work, "gpt2-train")
    os.makedirs(d)
    st = os.path.join(d, "model.safetensors")
    run(EXE("tests/mkmodel"), st, "--layers", L, "--heads", H, "--embd", C, "--context", T,
        "--vocab", V, "--seed", 4, "--hf")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_head": H, "n_layer": L, "n_embd": C,
                   "n_positions": T, "vocab_size": V}, f)
    rs = np.random.RandomState(1)
    npy = os.path.join(work, "train-hf.npy")
    np.save(npy, ((np.arange(2000) * 5 + rs.randint(0, 3, 2000)) % V).astype(np.uint16))
    out = os.path.join(work, "hf-lora")
    run(EXE("tfm-train"), "-q", "--threads", "1", "--set", "train.init=" + d, "--set",
        "data.train=" + npy, "--set", "train.lora.r=4", "--set", "train.lora.alpha=8",
        "--set", "train.lora.targets=q, v, fc, o", "--set", "optim.lr=1e-2", "--set",
        "train.batch_size=4", "--set", "train.max_steps=4", "--set", "train.eval_interval=0",
        "-o", out)
    check_peft_layout("GPT-2 folder LoRA", out, st, os.path.join(out, "model.safetensors"),
                      True, bad)
    # tfm reads its own HF-named adapter back: --adapter on the folder is the merged model
    ids = npy
    a = token_logprobs(d, out, ids, T)
    b = token_logprobs(os.path.join(out, "model.safetensors"), None, ids, T)
    diff = max(abs(a[k] - b[k]) for k in a) if a and sorted(a) == sorted(b) else float("inf")
    print("GPT-2 folder LoRA: --adapter vs the merged model, max |diff| = %.3g" % diff)
    if not diff <= 1e-4:
        bad.append("GPT-2 folder LoRA: --adapter on the folder differs from the merged model "
                   "by %.3g" % diff)


def check_bert_training(work, rng, bad):
    """LoRA classification from a HuggingFace BERT folder: the adapter in
    BertForSequenceClassification's module names (bert.encoder.layer.N.
    attention.self.query, ...; target_modules a regular expression that
    tells the FFN's output.dense from attention.output.dense)."""
    s = dict(name="lora-train", prefix="bert.", gamma=False, C=32, NH=4, L=2, F=48, P=16, S=2,
             V=50, eps=1e-12, act="gelu", heads=False, folder=True, vocab=True, B=3, T=12)
    d = os.path.join(work, "bert-train")
    hf_bert.write_case(d, s, rng)
    data = os.path.join(work, "cls.tsv")
    with open(data, "w") as f:
        for i in range(200):
            a = rng.integers(0, 20, 5)
            f.write("%d\t%s\n" % (int(a[0] < 10), " ".join("w%d" % x for x in a)))
    out = os.path.join(work, "bert-lora")
    run(EXE("tfm-train"), "-q", "--threads", "1", "--set", "train.init=" + d, "--set",
        "data.text=" + data, "--set", "train.task=classify", "--set", "model.pooler=true",
        "--set", "train.lora.r=2", "--set", "train.lora.targets=q, v, o, fc, proj", "--set",
        "optim.lr=1e-2", "--set", "train.max_steps=4", "--set", "train.batch_size=4", "--set",
        "train.eval_interval=0", "-o", out)
    check_peft_layout("BERT folder LoRA", out, os.path.join(d, "model.safetensors"),
                      os.path.join(out, "model.safetensors"), False, bad, bert_site, s["C"])


def check_training(work, bad):
    """tfm-train's LoRA steps against the same steps in PyTorch."""
    L, H, C, T, B, ACC, STEPS = 2, 2, 16, 8, 3, 2, 6
    LR, MIN_LR, WARMUP, WD, B1, B2, EPS, SEED, CLIP = 1e-2, 1e-3, 2, 0.1, 0.9, 0.95, 1e-6, 11, 0.5
    R, ALPHA = 4, 8.0
    rs = np.random.RandomState(0)
    data = (np.arange(3000) * 7 + rs.randint(0, 3, 3000)) % 23
    np.save(os.path.join(work, "train.npy"), data.astype(np.uint16))
    cfg = os.path.join(work, "lora.yaml")
    with open(cfg, "w") as f:
        f.write("model: {n_layer: %d, n_head: %d, n_embd: %d, block_size: %d}\n" % (L, H, C, T))
        f.write("data: {train: %s}\n" % os.path.join(work, "train.npy"))
        f.write("optim: {type: adamw, lr: %g, beta1: %g, beta2: %g, eps: %g, "
                "weight_decay: %g, grad_clip: %g}\n" % (LR, B1, B2, EPS, WD, CLIP))
        f.write("schedule: {warmup: %d, decay: cosine, min_lr: %g}\n" % (WARMUP, MIN_LR))
        f.write("train: {batch_size: %d, grad_accum: %d, max_steps: %d, log_interval: 1, "
                "seed: %d}\n" % (B, ACC, STEPS, SEED))
    common = [EXE("tfm-train"), "-q", "-c", cfg, "--threads", "1"]
    base = os.path.join(work, "base")
    run(*common, "--set", "train.max_steps=30", "--set", "train.seed=3", "-o", base)
    lora = ["--set", "train.init=%s/model.safetensors" % base, "--set", "train.lora.r=%d" % R,
            "--set", "train.lora.alpha=%g" % ALPHA, "--set", "train.lora.targets=q, v, fc, o"]
    run(*common, *lora, "--set", "train.max_steps=0", "-o", os.path.join(work, "l0"))
    run(*common, *lora, "-o", os.path.join(work, "l"))
    P0, _ = train_torch.read_safetensors(os.path.join(base, "model.safetensors"))
    A0, _ = train_torch.read_safetensors(os.path.join(work, "l0", "adapter_model.safetensors"))
    A1, _ = train_torch.read_safetensors(os.path.join(work, "l", "adapter_model.safetensors"))
    with open(os.path.join(work, "l", "log.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    tfm_losses = [float(r[1]) for r in rows]
    # module -> (weight, first column, width): tfm's names as tfm-train writes them
    sites = {}
    for i in range(L):
        sites["h.%d.attn.q" % i] = ("h.%d.attn.c_attn.weight" % i, 0, C)
        sites["h.%d.attn.v" % i] = ("h.%d.attn.c_attn.weight" % i, 2 * C, C)
        sites["h.%d.attn.c_proj" % i] = ("h.%d.attn.c_proj.weight" % i, 0, C)
        sites["h.%d.mlp.c_fc" % i] = ("h.%d.mlp.c_fc.weight" % i, 0, 4 * C)
    got_mods = sorted(k[len(PRE):-len(".lora_A.weight")] for k in A0 if k.endswith("lora_A.weight"))
    if got_mods != sorted(sites):
        bad.append("tfm-train's adapter modules %s, expected %s" % (got_mods, sorted(sites)))
        return
    ad = {}
    for m in sites:
        ad[m + ".A"] = A0[PRE + m + ".lora_A.weight"].double().clone().requires_grad_(True)
        B0 = A0[PRE + m + ".lora_B.weight"]
        if B0.abs().max() != 0:
            bad.append("%s: lora_B starts at %g, not 0" % (m, B0.abs().max()))
        ad[m + ".B"] = B0.double().clone().requires_grad_(True)
    frozen = {k: v.double() for k, v in P0.items()}
    opt = torch.optim.AdamW(list(ad.values()), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)
    rng = train_torch.Rng(SEED ^ train_torch.DATA_SEED_SALT)
    sc = ALPHA / R
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        P = dict(frozen)
        for m, (w, col, width) in sites.items():
            d = sc * (ad[m + ".B"] @ ad[m + ".A"]).T        # [in, width]
            W = P[w]
            P[w] = torch.cat([W[:, :col], W[:, col:col + width] + d, W[:, col + width:]], 1)
        total = 0.0
        for _ in range(ACC):
            xs, ys = [], []
            for _ in range(B):
                s = rng.below(len(data) - T)
                xs.append(data[s:s + T])
                ys.append(data[s + 1:s + T + 1])
            x = torch.tensor(np.array(xs), dtype=torch.long)
            y = torch.tensor(np.array(ys), dtype=torch.long)
            loss = train_torch.forward(P, L, H, x, y)
            (loss / ACC).backward(retain_graph=True)
            total += loss.item() / ACC
        torch.nn.utils.clip_grad_norm_(list(ad.values()), CLIP)
        if step < WARMUP:
            lr = LR * (step + 1) / WARMUP
        else:
            p = (step - WARMUP) / (STEPS - WARMUP)
            lr = MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * p))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(total)
    print("LoRA losses tfm   %s" % " ".join("%.6f" % v for v in tfm_losses))
    print("LoRA losses torch %s" % " ".join("%.6f" % v for v in losses))
    if len(tfm_losses) != STEPS:
        bad.append("tfm-train logged %d steps, not %d" % (len(tfm_losses), STEPS))
    for i, (a, b) in enumerate(zip(tfm_losses, losses)):
        if abs(a - b) > TOL * max(1.0, abs(b)):
            bad.append("LoRA step %d: loss tfm %.6f torch %.6f" % (i + 1, a, b))
    worst, moved = 0.0, 0.0
    for m in sites:
        for k, key in (("A", "lora_A"), ("B", "lora_B")):
            got = A1[PRE + "%s.%s.weight" % (m, key)].double()
            want = ad["%s.%s" % (m, k)].detach()
            worst = max(worst, (got - want).abs().max().item())
            moved = max(moved, (got - A0[PRE + "%s.%s.weight" % (m, key)].double())
                        .abs().max().item())
    print("LoRA adapters: max |tfm - torch| = %.3g (moved by up to %.3g)" % (worst, moved))
    if not worst <= TOL:
        bad.append("LoRA adapters after %d steps: max |tfm - torch| = %.3g" % (STEPS, worst))
    if not moved > 1e-3:
        bad.append("LoRA training did not move the adapters (%.3g)" % moved)
    # the base stayed frozen: the merged model is the base plus the adapters' product
    M, _ = train_torch.read_safetensors(os.path.join(work, "l", "model.safetensors"))
    same = all(torch.equal(M[k], P0[k]) for k in P0 if k not in {w for w, _, _ in
                                                                 sites.values()})
    if not same:
        bad.append("a tensor LoRA does not adapt changed in the merged model")


def main():
    work = tempfile.mkdtemp(prefix="tfm-lora-torch.")
    rng = np.random.default_rng(7)
    bad = []
    try:
        check_decoder(work, rng, False, bad)
        check_decoder(work, rng, True, bad)
        check_values(work, rng, bad)
        check_hf_training(work, bad)
        check_bert_training(work, rng, bad)
        check_training(work, bad)
    finally:
        shutil.rmtree(work)
    for b in bad:
        print("FAIL: " + b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
