#!/usr/bin/python3
"""HuggingFace T5 checkpoints load as tfm encoder-decoders (lib/model/file.c).

Random T5ForConditionalGeneration checkpoints are written here in HF's
layout (safetensors with "format": "pt", HF's tensor names, Linears
[out, in], relative_attention_bias [buckets, heads] in block 0 only, no
biases, config.json as T5Config.to_json writes it) in two shapes:
  t5-small's: tied embeddings (no lm_head.weight), relu, num_layers for
    both stacks, config.json without relative_attention_max_distance (HF's
    default 128 applies), the unused decoder block-0
    EncDecAttention.relative_attention_bias present;
  v1.1 / flan-t5's: gated-gelu, an untied lm_head.weight,
    num_decoder_layers != num_layers, 8 buckets with max distance 16 (so
    the logarithmic and the clamped buckets are reached), embeddings under
    encoder.embed_tokens / decoder.embed_tokens only (no shared.weight);
  flan-t5-small's: as v1.1's with num_heads x d_kv != d_model (3 heads of
    16 over 32, as its 6 of 64 over 512): q, k, v [inner, C], o [C, inner].
The reference below is HF's T5 computation written out in float64 torch
(modeling_t5.py: T5LayerNorm without mean or bias, unscaled attention with
the bucketed bias of block 0 shared by a stack's blocks, bidirectional in
the encoder, causal in the decoder, none in cross-attention, DenseReluDense
or the gated DenseGatedActDense with gelu_new, the tied head reading the
hidden states times d_model^-0.5).  Checked:
  - teacher-forced logits of a padded batch (tests/io_probe model-logits,
    tfm_model_load: the training forward) within 1e-4 of the reference;
  - tfm-generate --greedy --ids --json (tfm_lm_open: the cached decode
    step) emits the reference's greedy tokens, starting from
    decoder_start_token_id 0 and stopping at eos 1, with per-token
    log-probabilities within 1e-4;
  - tfm-eval info reads the folder;
  - with spm_train: spiece.model beside the file is the tokenizer;
    tfm-embed's mean of the encoder's output (the packed forward,
    model/forward.c) is the reference's within 1e-4; tfm-train fine-tunes
    from the folder (train.init) for two steps;
  - bad input (missing config.json field, absurd value, unknown
    feed_forward_proj, num_heads·d_kv absurdly wide, a missing tensor, a tensor
    of the wrong shape): exit 1 and a message naming the file; F16 weights
    read as float32."""
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
from hf_lib import (EMBED, EVAL, GEN, PROBE, TOL, TRAIN, check_lora, check_train_init,  # noqa: E402
                    compare_greedy, probe_encdec, run, write_safetensors)

CASES = [
    dict(name="t5-small-like", C=32, NH=4, KV=8, F=48, L=2, DL=2, V=60, NB=32, MD=None,
         proj="relu", tied=True, shared=True, stale_xbias=True),
    dict(name="v1.1-like", C=32, NH=4, KV=8, F=40, L=2, DL=3, V=64, NB=8, MD=16,
         proj="gated-gelu", tied=False, shared=False, stale_xbias=False),
    dict(name="flan-t5-small-like", C=32, NH=3, KV=16, F=40, L=3, DL=2, V=64, NB=8, MD=16,
         proj="gated-gelu", tied=False, shared=True, stale_xbias=False),
]


# ---- the checkpoint in HF's layout -------------------------------------------

# config.json's dropout_rate, not HF's default (0.1): tfm reads it as the
# rate of every dropout site (tfm-eval info shows them)
RATE = 0.15
RATES = dict(dropout=RATE, attn_dropout=RATE, emb_dropout=RATE, ffn_dropout=RATE,
             final_dropout=RATE)


def hf_config(s):
    c = {"architectures": ["T5ForConditionalGeneration"], "d_ff": s["F"], "d_kv": s["KV"],
         "d_model": s["C"], "decoder_start_token_id": 0, "dropout_rate": RATE,
         "eos_token_id": 1, "feed_forward_proj": s["proj"], "initializer_factor": 1.0,
         "is_encoder_decoder": True, "layer_norm_epsilon": 1e-06, "model_type": "t5",
         "n_positions": 512, "num_heads": s["NH"], "num_layers": s["L"],
         "num_decoder_layers": s["DL"], "pad_token_id": 0,
         "relative_attention_num_buckets": s["NB"], "tie_word_embeddings": s["tied"],
         "torch_dtype": "float32", "transformers_version": "4.30.2", "use_cache": True,
         "vocab_size": s["V"]}
    if s["MD"] is not None:
        c["relative_attention_max_distance"] = s["MD"]
    return c


def random_checkpoint(s, rng):
    """name -> float32 array, in the order save_pretrained writes them."""
    C, F, V, NH, NB = s["C"], s["F"], s["V"], s["NH"], s["NB"]
    inner = NH * s["KV"]
    n = lambda *shape, sd=1.0: (rng.standard_normal(shape) * sd).astype(np.float32)
    t = {}
    emb = n(V, C)
    if s["shared"]:
        t["shared.weight"] = emb
    else:
        t["encoder.embed_tokens.weight"] = emb
        t["decoder.embed_tokens.weight"] = emb.copy()
    for stack, L in (("encoder", s["L"]), ("decoder", s["DL"])):
        for i in range(L):
            p = f"{stack}.block.{i}.layer."
            for k in "qkvo":
                shape = (C, inner) if k == "o" else (inner, C)
                t[p + f"0.SelfAttention.{k}.weight"] = n(*shape, sd=C ** -0.5)
            if i == 0:
                t[p + "0.SelfAttention.relative_attention_bias.weight"] = n(NB, NH)
            t[p + "0.layer_norm.weight"] = 1 + n(C, sd=0.2)
            ff = 1
            if stack == "decoder":
                ff = 2
                for k in "qkvo":
                    shape = (C, inner) if k == "o" else (inner, C)
                    t[p + f"1.EncDecAttention.{k}.weight"] = n(*shape, sd=C ** -0.5)
                if i == 0 and s["stale_xbias"]:
                    t[p + "1.EncDecAttention.relative_attention_bias.weight"] = n(NB, NH)
                t[p + "1.layer_norm.weight"] = 1 + n(C, sd=0.2)
            d = p + f"{ff}.DenseReluDense."
            if s["proj"].startswith("gated"):
                t[d + "wi_0.weight"] = n(F, C, sd=C ** -0.5)
                t[d + "wi_1.weight"] = n(F, C, sd=C ** -0.5)
            else:
                t[d + "wi.weight"] = n(F, C, sd=C ** -0.5)
            t[d + "wo.weight"] = n(C, F, sd=F ** -0.5)
            t[p + f"{ff}.layer_norm.weight"] = 1 + n(C, sd=0.2)
        t[f"{stack}.final_layer_norm.weight"] = 1 + n(C, sd=0.2)
    if not s["tied"]:
        t["lm_head.weight"] = n(V, C, sd=C ** -0.5)
    # end-of-text (1) likelier, so that greedy searches stop at it
    (t["lm_head.weight"] if not s["tied"] else emb)[1] *= 2.5
    return t


def write_folder(d, s, t, cfg=None):
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(s) if cfg is None else cfg, f, indent=2)


# ---- HF's T5 in float64 torch ------------------------------------------------

def rms_norm(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def bucket(rel, bidirectional, nb, md):
    """T5Attention._relative_position_bucket; rel = key - query."""
    ret = torch.zeros_like(rel)
    if bidirectional:
        nb //= 2
        ret += (rel > 0).long() * nb
        n = rel.abs()
    else:
        n = -torch.clamp(rel, max=0)
    exact = nb // 2
    large = exact + (torch.log(n.float() / exact) / math.log(md / exact)
                     * (nb - exact)).to(torch.long)
    large = torch.clamp(large, max=nb - 1)
    return ret + torch.where(n < exact, n, large)


def position_bias(table, q_len, k_len, bidirectional, nb, md):
    rel = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]
    return table[bucket(rel, bidirectional, nb, md)].permute(2, 0, 1)[None]  # [1, NH, q, k]


def attention(P, pre, x, mem, bias, NH):
    B, T, _ = x.shape
    sp = lambda y: y.view(B, -1, NH, y.shape[-1] // NH).transpose(1, 2)
    q = sp(x @ P[pre + "q.weight"].T)
    k, v = sp(mem @ P[pre + "k.weight"].T), sp(mem @ P[pre + "v.weight"].T)
    w = torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1)  # no 1/sqrt(d)
    return (w @ v).transpose(1, 2).reshape(B, T, -1) @ P[pre + "o.weight"].T


def ffn(P, pre, x, proj):
    if proj.startswith("gated"):
        g = x @ P[pre + "wi_0.weight"].T
        g = 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
        h = g * (x @ P[pre + "wi_1.weight"].T)
    else:
        h = torch.relu(x @ P[pre + "wi.weight"].T)
    return h @ P[pre + "wo.weight"].T


def t5_encode(P, s, src, src_len):
    """src [B, S] with src_len -> the encoder's output [B, S, C] and the
    padding mask [B, 1, 1, S]."""
    NH, NB = s["NH"], s["NB"]
    MD = s["MD"] or 128
    emb = P["shared.weight"] if s["shared"] else P["encoder.embed_tokens.weight"]
    B, S = src.shape
    neg = torch.finfo(torch.float64).min
    pad = torch.zeros(B, 1, 1, S, dtype=torch.float64)
    for b in range(B):
        pad[b, :, :, src_len[b]:] = neg
    h = emb[src]
    eb = position_bias(P["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                       S, S, True, NB, MD) + pad
    for i in range(s["L"]):
        p = f"encoder.block.{i}.layer."
        n0 = rms_norm(h, P[p + "0.layer_norm.weight"])
        h = h + attention(P, p + "0.SelfAttention.", n0, n0, eb, NH)
        h = h + ffn(P, p + "1.DenseReluDense.", rms_norm(h, P[p + "1.layer_norm.weight"]),
                    s["proj"])
    return rms_norm(h, P["encoder.final_layer_norm.weight"]), pad


def t5_logits(P, s, src, src_len, tgt):
    """src [B, S] with src_len; tgt [B, T] decoder inputs -> logits [B, T, V]."""
    NH, NB = s["NH"], s["NB"]
    MD = s["MD"] or 128
    emb = P["shared.weight"] if s["shared"] else P["encoder.embed_tokens.weight"]
    T = tgt.shape[1]
    neg = torch.finfo(torch.float64).min
    mem, pad = t5_encode(P, s, src, src_len)
    causal = torch.triu(torch.full((T, T), neg, dtype=torch.float64), 1)
    db = position_bias(P["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                       T, T, False, NB, MD) + causal
    y = (P["shared.weight"] if s["shared"] else P["decoder.embed_tokens.weight"])[tgt]
    for i in range(s["DL"]):
        p = f"decoder.block.{i}.layer."
        n0 = rms_norm(y, P[p + "0.layer_norm.weight"])
        y = y + attention(P, p + "0.SelfAttention.", n0, n0, db, NH)
        y = y + attention(P, p + "1.EncDecAttention.", rms_norm(y, P[p + "1.layer_norm.weight"]),
                          mem, pad, NH)
        y = y + ffn(P, p + "2.DenseReluDense.", rms_norm(y, P[p + "2.layer_norm.weight"]),
                    s["proj"])
    y = rms_norm(y, P["decoder.final_layer_norm.weight"])
    if s["tied"]:
        return (y * s["C"] ** -0.5) @ emb.T
    return y @ P["lm_head.weight"].T


def greedy(P, s, src, n_max):
    """HF's greedy search: decoder_start 0, stop at eos 1 (not emitted)."""
    out, lps = [0], []
    for _ in range(n_max):
        lg = t5_logits(P, s, src[None], [len(src)], torch.tensor([out]))[0, -1]
        lp = torch.log_softmax(lg, -1)
        nxt = int(torch.argmax(lp))
        lps.append(float(lp[nxt]))
        if nxt == 1:
            break
        out.append(nxt)
    return out[1:], lps


# ---- checks -------------------------------------------------------------------

def check_case(s, d, rng):
    bad = []
    t = random_checkpoint(s, rng)
    write_folder(d, s, t)
    P = {k: torch.from_numpy(v).double() for k, v in t.items()}
    B, S, T, V = 3, 22, 20, s["V"]
    src = rng.integers(2, V, (B, S))
    src_len = [S, 13, 4]
    tgt = np.concatenate([np.zeros((B, 1), np.int64), rng.integers(2, V, (B, T - 1))], 1)
    r, of = probe_encdec(d, src, src_len, tgt)
    if r.returncode != 0:
        return [f"io_probe: {r.stderr.strip()}"]
    desc = r.stdout.split("\n")
    want0 = (f"kind encoder-decoder positions t5 norm pre "
             f"act {'relu' if s['proj'] == 'relu' else 'gelu_tanh'} ln_eps 9.99999997e-07 "
             f"n_layer {s['DL']} n_head {s['NH']} n_embd {s['C']} d_ff {s['F']} "
             f"block_size 512 vocab_size {V} segments 0 emb_norm 0 tied {int(s['tied'])} "
             f"bias 0 tokenizer none 0")
    want1 = (f"n_enc_layer {s['L']} norm_type rmsnorm "
             f"ffn {1 if s['proj'] == 'gated-gelu' else 0} attn_unscaled 1 "
             f"t5 {s['NB']} {s['MD'] or 128} head_scale {int(s['tied'])} decoder_start 0 "
             f"tie_source 1 head_dim {s['KV']} forced_bos -1 source_bos 0")
    if desc[:2] != [want0, want1]:
        bad.append(f"description:\n  got  {desc[:2]}\n  want {[want0, want1]}")
    got = np.fromfile(of, np.float32).reshape(B, T, V).astype(np.float64)
    ref = t5_logits(P, s, torch.from_numpy(src), src_len, torch.from_numpy(tgt)).numpy()
    err = np.abs(got - ref).max()
    print(f"  {s['name']}: teacher-forced logits max |tfm - torch| = {err:.2e} "
          f"(max |logit| {np.abs(ref).max():.2f})")
    if not err <= TOL:
        bad.append(f"logits differ by {err:.3g} > {TOL}")

    # greedy generation through tfm_lm_open and the cached decode step
    lines, refs = [], []
    for b in range(B):
        sb = src[b, :src_len[b] - 1]  # tfm appends end-of-text (1), as HF's tokenizer does
        full = torch.from_numpy(np.append(sb, 1))
        refs.append(greedy(P, s, full, 30))
        lines.append(" ".join(map(str, sb)))
    r = run([GEN, "-m", d, "--ids", "--greedy", "--json", "-n", "30", "-q"],
            input="\n".join(lines) + "\n")
    if r.returncode != 0:
        return bad + [f"tfm-generate: {r.stderr.strip()}"]
    outs = [json.loads(x) for x in r.stdout.splitlines()]
    bad += compare_greedy(s["name"], outs, refs, 1)
    r = run([EVAL, "info", "-m", d])
    if r.returncode != 0 or "kind\tt5-huggingface\n" not in r.stdout or \
            "model_kind\tencoder-decoder\n" not in r.stdout or "eos\t1\n" not in r.stdout:
        bad.append(f"tfm-eval info: exit {r.returncode}: {r.stdout}{r.stderr}")
    return bad


def expect(what, d, cmd_out_substr, mutate_cfg=None, mutate_t=None, s=None, t=None):
    """Loading the mutated folder fails (exit 1) in io_probe and
    tfm-generate with a message containing every given piece."""
    cfg = hf_config(s)
    t2 = dict(t)
    if mutate_cfg:
        mutate_cfg(cfg)
    if mutate_t:
        mutate_t(t2)
    shutil.rmtree(d, ignore_errors=True)
    write_folder(d, s, t2, cfg)
    bad = []
    src = np.array([[5, 6, 1]])
    r, _ = probe_encdec(d, src, [3], np.zeros((1, 2), np.int64))
    r2 = run([GEN, "-m", d, "--ids", "--greedy", "-n", "2"], input="5 6\n")
    for prog, rr in (("io_probe", r), ("tfm-generate", r2)):
        msg = rr.stderr.strip()
        if rr.returncode != 1 or not msg.startswith(prog + ": ") or \
                not all(x in msg for x in cmd_out_substr):
            bad.append(f"{what} ({prog}): exit {rr.returncode}: {msg!r}, want {cmd_out_substr}")
    return bad


def check_errors(top, rng):
    s = CASES[1]
    t = random_checkpoint(s, rng)
    d = os.path.join(top, "bad")
    cj, st = os.path.join(d, "config.json"), os.path.join(d, "model.safetensors")
    bad = []

    def drop(k):
        return lambda c: c.pop(k)

    def setv(k, v):
        return lambda c: c.__setitem__(k, v)

    bad += expect("missing d_model", d, [cj, "d_model is missing"], drop("d_model"), s=s, t=t)
    bad += expect("absurd num_heads", d, [cj, "num_heads must be between 1 and 1024"],
                  setv("num_heads", 0), s=s, t=t)
    bad += expect("absurd d_ff", d, [cj, "d_ff must be"], setv("d_ff", -3), s=s, t=t)
    bad += expect("unknown feed_forward_proj", d,
                  [cj, "feed_forward_proj 'gated-swish' is not supported"],
                  setv("feed_forward_proj", "gated-swish"), s=s, t=t)
    bad += expect("d_kv", d, [cj, "num_heads 1024 x d_kv 2048 is too wide"],
                  lambda c: c.update(num_heads=1024, d_kv=2048), s=s, t=t)
    bad += expect("umt5", d, [cj, "model_type 'umt5' is not supported"],
                  setv("model_type", "umt5"), s=s, t=t)
    w = "decoder.block.2.layer.2.DenseReluDense.wi_1.weight"
    bad += expect("missing tensor", d, [st, f"no tensor '{w}'", "F32 [40, 32]"],
                  mutate_t=lambda x: x.pop(w), s=s, t=t)
    w2 = "encoder.block.1.layer.0.SelfAttention.k.weight"
    bad += expect("misshapen tensor", d, [st, f"tensor '{w2}' is F32 [32, 31]",
                                          "F32 [32, 32]"],
                  mutate_t=lambda x: x.__setitem__(w2, x[w2][:, :31].copy()), s=s, t=t)
    bad += expect("extra block", d, [st, "has a block 3", "config.json says 3"],
                  setv("num_decoder_layers", 3),
                  mutate_t=lambda x: x.update({k.replace("block.2.", "block.3."): v
                                               for k, v in list(x.items())
                                               if k.startswith("decoder.block.2.")}),
                  s=s, t=t)
    bad += expect("untied without lm_head", d, [st, "no tensor 'lm_head.weight'"],
                  mutate_t=lambda x: x.pop("lm_head.weight"), s=s, t=t)
    return bad


def check_f16(top, rng):
    """HF's safetensors in F16: read as float32, so the same tokens as the
    float32 checkpoint of the same (half-precision) values."""
    s = CASES[0]
    t = random_checkpoint(s, rng)
    t = {k: a.astype(np.float16).astype(a.dtype) for k, a in t.items()}
    d, d32 = os.path.join(top, "f16"), os.path.join(top, "f16-as-f32")
    write_folder(d, s, t)
    write_folder(d32, s, t)
    # rewrite by hand: hf_bert.write_safetensors writes F32 and I64 only
    import struct
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in t.items():
        b = a.astype(np.float16).tobytes()
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    r = run([GEN, "-m", d, "--ids", "--greedy", "-n", "6"], input="5 6\n")
    r32 = run([GEN, "-m", d32, "--ids", "--greedy", "-n", "6"], input="5 6\n")
    if r.returncode != 0 or r32.returncode != 0 or r.stdout != r32.stdout or not r.stdout.strip():
        return [f"F16: exit {r.returncode}: {r.stdout.strip()} {r.stderr.strip()}, "
                f"float32: {r32.stdout.strip()}"]
    return []


def check_spiece_and_train(top, rng):
    """spiece.model beside the checkpoint: the tokenizer of every program;
    tfm-train fine-tunes from the folder (train.init)."""
    if not shutil.which("spm_train"):
        print("  SKIP spiece.model and train.init: no spm_train (Debian: sentencepiece)")
        return []
    words = "the of and to in a that is was he for it with as his on be at by".split()
    text = os.path.join(top, "text.txt")
    with open(text, "w") as f:
        for i in range(400):
            f.write(" ".join(words[(i * 7 + k * 3) % len(words)] for k in range(6 + i % 5)) + "\n")
    prefix = os.path.join(top, "spiece")
    r = run(["spm_train", f"--input={text}", f"--model_prefix={prefix}", "--vocab_size=48",
             "--model_type=unigram", "--pad_id=0", "--eos_id=1", "--unk_id=2", "--bos_id=-1",
             "--num_threads=1", "--minloglevel=2"])
    if r.returncode != 0:
        return [f"spm_train: {r.stderr.strip()[-400:]}"]
    bad = []
    # t5-small's shape, and flan-t5-small's heads narrower than d_model (V 60
    # and 64 > 48 pieces, as t5-small's 32128 > 32100)
    for s in (CASES[0], CASES[2]):
        sub = os.path.join(top, s["name"] + "-spm")
        os.makedirs(sub)
        bad += [f"{s['name']}: {b}" for b in spiece_case(sub, prefix, words, s, rng)]
    return bad


def spiece_case(top, prefix, words, s, rng):
    d = os.path.join(top, "tok")
    t = random_checkpoint(s, rng)
    write_folder(d, s, t)
    shutil.copy(prefix + ".model", os.path.join(d, "spiece.model"))
    bad = []
    # T5Tokenizer's sentinels: without tokenizer_config.json 100 of them
    # (too many for this model), with its extra_ids those, <extra_id_0> the
    # last id (V - 1, as HF numbers them), each one token in text
    r = run([PROBE, "model-encode", d], input="a\n")
    want = (f"{d}/spiece.model: the tokenizer has 148 tokens (with 100 <extra_id_N> sentinels, "
            f"T5Tokenizer's default without tokenizer_config.json) but the model only {s['V']}")
    if r.returncode != 1 or want not in r.stderr:
        bad.append(f"spiece.model without tokenizer_config.json: exit {r.returncode}: "
                   f"{r.stderr.strip()!r}, want {want!r}")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "extra_ids": s["V"] - 48, "model_max_length": 512,
                   "tokenizer_class": "T5Tokenizer"}, f)
    line = "the of <extra_id_0> and <extra_id_1> to"
    r = run([PROBE, "model-encode", d], input=line + "\n")
    spm = lambda x: [int(i) for i in run(["spm_encode", f"--model={prefix}.model",
                                          "--output_format=id"], input=x + "\n").stdout.split()]
    # HF: the text between added tokens is encoded piece by piece
    want = spm("the of") + [s["V"] - 1] + spm(" and") + [s["V"] - 2] + spm(" to")
    got = [int(x) for x in r.stdout.split()] if r.returncode == 0 else r.stderr.strip()
    print(f"  tokenizer_config.json extra_ids {s['V'] - 48}: {line!r} -> {got}")
    if got != want:
        bad.append(f"sentinels: {line!r} gives {got}, want {want}")
    # the folder as a tokenizer (tfm_model_folder_tokenizer): the same
    r = run([PROBE, "folder-encode", d], input=line + "\n")
    if r.returncode != 0 or [int(x) for x in r.stdout.split()] != want:
        bad.append(f"folder-encode: exit {r.returncode}: {r.stdout.strip()!r} "
                   f"{r.stderr.strip()!r}, want {want}")
    r = run([GEN, "-m", d, "--greedy", "-n", "8", "-q"], input="the of and\n")
    if r.returncode != 0:
        bad.append(f"tfm-generate with spiece.model: {r.stderr.strip()}")
    # the seeds' infilling prompt from the shell: with --split-special the
    # sentinels in the text are those ids, and the translation is that of the
    # ids the tokenizer gives (without it they are characters)
    seed = "Thank you <extra_id_0> me to your party <extra_id_1> week"
    r = run([PROBE, "model-encode", d], input=seed + "\n")
    sids = r.stdout.split()
    if r.returncode != 0 or str(s["V"] - 1) not in sids or str(s["V"] - 2) not in sids:
        bad.append(f"sentinels of {seed!r}: {r.stdout}{r.stderr}")
    outs = []
    for args in (["--split-special", seed], ["--ids", " ".join(sids)], [seed]):
        r = run([GEN, "-m", d, "--greedy", "-n", "4", "-q", "--json"] + args)
        o = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr.strip()}
        o.pop("source", None), o.pop("timings", None)
        outs.append(o)
    print(f"  tfm-generate --split-special {seed!r}: {outs[0].get('source_tokens')} source tokens")
    if outs[0] != outs[1] or outs[0].get("source_tokens") != len(sids) + 1:
        bad.append(f"--split-special: {outs[0]}, its ids give {outs[1]}")
    if outs[2].get("source_tokens") == outs[0].get("source_tokens"):
        bad.append(f"without --split-special the sentinels are read too: {outs[2]}")
    r = run([EVAL, "info", "-m", d])
    if r.returncode != 0 or "unigram" not in r.stdout:
        bad.append(f"tfm-eval info with spiece.model: {r.stdout}{r.stderr}")
    # tfm-embed: the encoder's output (after final_layer_norm), mean-pooled
    # over spm_encode's ids of the line (tfm-embed adds no end-of-text)
    line = "the of and to in"
    r = run(["spm_encode", f"--model={prefix}.model", "--output_format=id"], input=line + "\n")
    ids = [int(x) for x in r.stdout.split()]
    r2 = run([EMBED, "-m", d, "--pool", "mean", "--layers", "last", "-f", "tsv"],
             input=line + "\n")
    if r.returncode != 0 or r2.returncode != 0:
        bad.append(f"spm_encode / tfm-embed: {r.stderr.strip()} {r2.stderr.strip()}")
    else:
        P = {k: torch.from_numpy(v).double() for k, v in t.items()}
        ref = t5_encode(P, s, torch.tensor([ids]), [len(ids)])[0][0].mean(0).numpy()
        got = np.array([float(x) for x in r2.stdout.split()])
        err = np.abs(got - ref).max() if got.shape == ref.shape else float("inf")
        print(f"  tfm-embed: mean of the encoder's output, max |tfm - torch| = {err:.2e}")
        if not err <= TOL:
            bad.append(f"tfm-embed differs by {err:.3g}")
    P = {k: torch.from_numpy(v).double() for k, v in t.items()}
    bad += check_train_init(top, d, words, s["V"],
                            lambda src, sl, tgt: t5_logits(P, s, src, sl, tgt), rng,
                            RATES, dict(RATES, dropout=0.05, attn_dropout=0.05,
                                        emb_dropout=0.05))
    return bad + check_lora(top, d, s["V"], t, rng)


def main():
    for p in (PROBE, GEN, EVAL, TRAIN, EMBED):
        if not os.path.exists(p):
            print(f"missing {p}")
            return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(29)
    top = tempfile.mkdtemp(prefix="hf_t5.")
    bad = []
    try:
        for s in CASES:
            bad += [f"{s['name']}: {b}" for b in check_case(s, os.path.join(top, s["name"]), rng)]
        bad += check_errors(top, rng)
        bad += check_f16(top, rng)
        bad += check_spiece_and_train(top, rng)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
