#!/usr/bin/python3
"""HuggingFace BART checkpoints load as tfm encoder-decoders (lib/convert/bart.c).

Random BartForConditionalGeneration checkpoints are written here in HF's
layout (safetensors with "format": "pt", names under "model.", Linears
[out, in] with biases, embed_positions [max_position_embeddings + 2, C],
final_logits_bias [1, V], config.json as BartConfig.to_json writes it) with
a byte-level BPE tokenizer as vocab.json + merges.txt (<s> 0, <pad> 1,
</s> 2, <unk> 3, <mask> last, as facebook/bart-*'s), in two shapes:
  bart-base's: gelu, scale_embedding false, equal depths, only
    model.shared.weight in the file;
  a variant: scale_embedding true, relu, 3 encoder and 1 decoder layers,
    every tied copy saved (model.encoder/decoder.embed_tokens,
    lm_head.weight).
The reference is transformers' BartForConditionalGeneration of that
config.json holding the file's tensors (modeling_bart.py: embeddings times
sqrt(d_model) with scale_embedding, learned positions at position + 2,
layernorm_embedding, post-LN layers, the head tied to shared.weight plus
final_logits_bias); its searches are HF's greedy rules written out here
over transformers' logits (forced <s> and </s>; tfm-generate's -n counts
the tokens after a forced <s>, HF's max_new_tokens counts it too; both
searches are also judged by generate() in hf_bart_models.py).
Checked:
  - teacher-forced logits of a padded batch (tests/io_probe model-logits:
    tfm_model_load and the training forward) within 1e-4 of the reference;
  - tfm-generate --greedy --ids --json (tfm_lm_open: the cached decode
    step) emits the reference's greedy tokens for sources given as ids
    ("0 ... " as BartTokenizer starts them; tfm appends </s>), starting
    from decoder_start_token_id 2 and stopping at eos 2, log-probabilities
    within 1e-4; the reference is HF's greedy search with its forced
    first token (forced_bos_token_id 0, <s>, as bart-large's config.json
    has it, in bart-base-like; absent in the variant, where nothing is
    forced), which tfm makes part of the decoder's prompt, not of the
    output (HF's decoded text skips it too);
  - a text source begins with <s> and ends with </s>, as BartTokenizer
    makes it: tfm-generate on text equals the reference's greedy search
    over [0] + BPE ids + [2]; tfm-train's batches (--dump-batches) begin
    each source and, with forced_bos, each target with <s>, as HF's
    tokenizer makes BART's labels, and the fine-tuned model keeps both;
  - a source given with its </s> (HF's input_ids) gets no second one;
  - tfm-eval info names the folder bart-huggingface;
  - BartModel's layout (no prefix, no head): the logits of the tied head
    without a bias;
  - the tokenizer: tfm-tokenize encode gives this file's byte-level BPE
    ids; tfm-embed's mean of the encoder's output over them (the packed
    forward, model/forward.c) is the reference's within 1e-4;
  - tfm-train fine-tunes from the folder (train.init), and a step at lr 0
    saves a model whose logits are still the reference's;
  - bad input (missing or absurd config.json fields, differing encoder and
    decoder heads, mBART's normalize_before, a missing tensor, a tensor of
    the wrong shape, a layer more than config.json says): exit 1 and a
    message naming the file."""
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import BartConfig, BartForConditionalGeneration

transformers.logging.set_verbosity_error()
SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
from embed_torch import bytes_to_unicode  # noqa: E402  (GPT-2's byte stand-ins)
from hf_lib import (EMBED, EVAL, GEN, PROBE, TOKENIZE, TOL, TRAIN,  # noqa: E402
                    check_lora, check_rates, check_train_init, compare_greedy, probe_encdec,
                    refusals, run, write_safetensors)
BOS, PAD, EOS = 0, 1, 2

CASES = [
    dict(name="bart-base-like", C=32, NH=4, F=48, L=2, DL=2, P=40, act="gelu", scale=False,
         copies=False, forced=True, forced_eos=True, rates=True),
    dict(name="scaled-relu", C=32, NH=2, F=40, L=3, DL=1, P=24, act="relu", scale=True,
         copies=True, forced=False, forced_eos=False, rates=False),
]

# tfm-eval info's rates: config.json's dropout (also on the embeddings),
# attention_dropout and activation_dropout (the feed-forward's); BART has no
# final dropout.  Absent: BartConfig's defaults, 0.1, 0 and 0.
RATES = dict(dropout=0.12, attn_dropout=0.07, emb_dropout=0.12, ffn_dropout=0.03,
             final_dropout=0.0)
DEFAULT_RATES = dict(dropout=0.1, attn_dropout=0.0, emb_dropout=0.1, ffn_dropout=0.0,
                     final_dropout=0.0)

WORDS = ("the of and to in a that is was he for it with as his on be at by they "
         "lord god unto shall").split()


# ---- the tokenizer: GPT-2's byte-level BPE, BART's specials --------------------

B2U = bytes_to_unicode()
# GPT-2's pre-tokenizer, with re's letter and digit classes for \p{L} and
# \p{N} (the same on the ASCII text used here)
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


def words_of(text):
    return ["".join(B2U[b] for b in w.encode()) for w in PAT.findall(text)]


def make_tokenizer(corpus, n_merges=40):
    """vocab (token -> id) and merges learned greedily from corpus."""
    counts = {}
    for line in corpus:
        for w in words_of(line):
            counts[tuple(w)] = counts.get(tuple(w), 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in counts.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        new = {}
        for w, c in counts.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = c
        counts = new
    toks = ["<s>", "<pad>", "</s>", "<unk>"] + [B2U[b] for b in range(256)] + \
        [a + b for a, b in merges] + ["<mask>"]
    return {t: i for i, t in enumerate(toks)}, merges


def bpe_encode(text, vocab, merges):
    rank = {m: i for i, m in enumerate(merges)}
    ids = []
    for w in words_of(text):
        parts = list(w)
        while len(parts) > 1:
            cand = [(rank.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            r, i = min(cand)
            if r == 1 << 30:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        ids += [vocab[p] for p in parts]
    return ids


def write_tokenizer(d, vocab, merges):
    with open(os.path.join(d, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


def write_tokenizer_json(d, vocab, merges):
    """tokenizer.json as BartTokenizerFast saves it (its specials listed in
    added_tokens, which is how tfm learns that </s> ends a text)."""
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": t == "<mask>",
              "rstrip": False, "normalized": t != "<mask>", "special": True}
             for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
         "normalizer": None,
         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                           "use_regex": True},
         "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                            "trim_offsets": True, "add_prefix_space": False},
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                     "use_regex": True},
         "model": {"type": "BPE", "dropout": None, "unk_token": None,
                   "continuing_subword_prefix": "", "end_of_word_suffix": "",
                   "fuse_unk": False, "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(j, f, ensure_ascii=False)


# ---- the checkpoint in HF's layout -------------------------------------------

def hf_config(s, V):
    c = hf_config_all(s, V)
    if not s["forced"]:
        del c["forced_bos_token_id"]
    if not s["forced_eos"]:
        del c["forced_eos_token_id"]
    if not s["rates"]:  # HF's defaults: dropout 0.1, the others 0
        for k in ("dropout", "attention_dropout", "activation_dropout"):
            del c[k]
    return c


def hf_config_all(s, V):
    return {"_name_or_path": "bart-tiny", "activation_dropout": 0.03,
            "activation_function": s["act"], "add_bias_logits": False,
            "add_final_layer_norm": False, "architectures": ["BartForConditionalGeneration"],
            "attention_dropout": 0.07, "bos_token_id": BOS, "classif_dropout": 0.1,
            "classifier_dropout": 0.0, "d_model": s["C"], "decoder_attention_heads": s["NH"],
            "decoder_ffn_dim": s["F"], "decoder_layerdrop": 0.0, "decoder_layers": s["DL"],
            "decoder_start_token_id": EOS, "dropout": 0.12, "early_stopping": True,
            "encoder_attention_heads": s["NH"], "encoder_ffn_dim": s["F"],
            "encoder_layerdrop": 0.0, "encoder_layers": s["L"], "eos_token_id": EOS,
            "forced_bos_token_id": BOS, "forced_eos_token_id": EOS, "gradient_checkpointing": False,
            "init_std": 0.02, "is_encoder_decoder": True, "max_position_embeddings": s["P"],
            "model_type": "bart", "no_repeat_ngram_size": 3, "normalize_before": False,
            "num_beams": 4, "num_hidden_layers": s["L"], "pad_token_id": PAD,
            "scale_embedding": s["scale"], "torch_dtype": "float32",
            "transformers_version": "4.30.2", "use_cache": True, "vocab_size": V}


def random_checkpoint(s, V, rng):
    """name -> float32 array, in the order save_pretrained writes them."""
    C, F, P = s["C"], s["F"], s["P"]
    n = lambda *shape, sd=1.0: (rng.standard_normal(shape) * sd).astype(np.float32)
    t = {"final_logits_bias": n(1, V, sd=0.5)}
    emb = n(V, C, sd=0.5 if s["scale"] else 1.0)
    emb[EOS] *= 1.5  # end-of-text likelier, so that greedy searches stop at it
    t["model.shared.weight"] = emb
    for stack, L in (("encoder", s["L"]), ("decoder", s["DL"])):
        p = f"model.{stack}."
        if s["copies"]:
            t[p + "embed_tokens.weight"] = emb.copy()
        t[p + "embed_positions.weight"] = n(P + 2, C)
        for i in range(L):
            q = f"{p}layers.{i}."
            attns = ["self_attn"] + (["encoder_attn"] if stack == "decoder" else [])
            for a in attns:
                for k in ("k_proj", "v_proj", "q_proj", "out_proj"):
                    t[f"{q}{a}.{k}.weight"] = n(C, C, sd=C ** -0.5)
                    t[f"{q}{a}.{k}.bias"] = n(C, sd=0.2)
                t[f"{q}{a}_layer_norm.weight"] = 1 + n(C, sd=0.2)
                t[f"{q}{a}_layer_norm.bias"] = n(C, sd=0.2)
            t[q + "fc1.weight"], t[q + "fc1.bias"] = n(F, C, sd=C ** -0.5), n(F, sd=0.2)
            t[q + "fc2.weight"], t[q + "fc2.bias"] = n(C, F, sd=F ** -0.5), n(C, sd=0.2)
            t[q + "final_layer_norm.weight"] = 1 + n(C, sd=0.2)
            t[q + "final_layer_norm.bias"] = n(C, sd=0.2)
        t[p + "layernorm_embedding.weight"] = 1 + n(C, sd=0.2)
        t[p + "layernorm_embedding.bias"] = n(C, sd=0.2)
    if s["copies"]:
        t["lm_head.weight"] = emb.copy()
    return t


def write_folder(d, s, t, V, cfg=None):
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(s, V) if cfg is None else cfg, f, indent=2)


# ---- transformers' BART on the checkpoint's tensors ---------------------------

_HF = {}


def hf_model(P, s):
    """BartForConditionalGeneration of config.json's configuration holding
    the tensors P (HF's names; the tied copies a file may lack are tied),
    float32, once per P."""
    if id(P) not in _HF:
        V = P["model.shared.weight"].shape[0]
        m = BartForConditionalGeneration(BartConfig.from_dict(hf_config(s, V))).eval()
        missing, unexpected = m.load_state_dict({k: v.float() for k, v in P.items()},
                                                strict=False)
        tied = {"lm_head.weight", "model.encoder.embed_tokens.weight",
                "model.decoder.embed_tokens.weight"}
        assert set(missing) <= tied and not unexpected, (missing, unexpected)
        _HF[id(P)] = (m, P)  # P kept alive: its id stays its own
    return _HF[id(P)][0]


def bart_encode(P, s, src, src_len):
    """src [B, S] with src_len -> the encoder's output [B, S, C]."""
    mask = torch.tensor([[1] * k + [0] * (src.shape[1] - k) for k in src_len])
    with torch.no_grad():
        return hf_model(P, s).get_encoder()(input_ids=src, attention_mask=mask) \
            .last_hidden_state.double(), None


def bart_logits(P, s, src, src_len, tgt):
    """src [B, S] with src_len; tgt [B, T] decoder inputs -> logits [B, T, V]."""
    mask = torch.tensor([[1] * k + [0] * (src.shape[1] - k) for k in src_len])
    with torch.no_grad():
        return hf_model(P, s)(input_ids=src, attention_mask=mask,
                              decoder_input_ids=tgt).logits.double()


def greedy(P, s, src, n_max, forced_eos=None):
    """HF's greedy search: decoder_start 2; with forced_bos_token_id,
    ForcedBOSTokenLogitsProcessor leaves only <s> (0) at the first step;
    with forced_eos_token_id (forced_eos: s's, unless given),
    ForcedEOSTokenLogitsProcessor leaves only </s> (2) when the sequence
    is max_length - 1 long, max_length being the decoder's prompt (2, or
    1 without forced_bos) + n_max: the n_max-th new token is </s>; stop
    at eos 2.  The ids and log-probabilities after the forced one (the
    model's log-probabilities, before the processors)."""
    if forced_eos is None:
        forced_eos = s["forced_eos"]
    out, lps = [EOS], []
    if s["forced"]:
        out.append(BOS)
    max_length = len(out) + n_max
    for _ in range(n_max):
        lg = bart_logits(P, s, src[None], [len(src)], torch.tensor([out]))[0, -1]
        lp = torch.log_softmax(lg, -1)
        nxt = int(torch.argmax(lp))
        if forced_eos and len(out) == max_length - 1:
            nxt = EOS
        lps.append(float(lp[nxt]))
        if nxt == EOS:
            break
        out.append(nxt)
    return out[1 + s["forced"]:], lps


# ---- checks -------------------------------------------------------------------

def check_forced_eos(s, d, P, src, src_len):
    """A limit that cuts the greedy search short (-n 3): with
    forced_eos_token_id the third new token is </s> (finish eos), without
    it the search stops at the limit (finish length), as HF's greedy at
    max_length = decoder prompt + 3; greedy, sampling with top-k 1, the
    no-cache path and one beam all follow it."""
    N = 3
    lines, refs, cut = [], [], []
    for b in range(len(src)):
        sb = src[b, :src_len[b] - 1]
        full = torch.from_numpy(np.append(sb, EOS))
        lines.append(" ".join(map(str, sb)))
        refs.append(greedy(P, s, full, N))
        free = greedy(P, s, full, N, forced_eos=False)
        if len(free[0]) == N:  # the limit, not </s>, ended it
            cut.append(b)
    if not cut:  # the check would show nothing
        return [f"-n {N}: every greedy search ends with </s> before the limit"]
    bad = []
    for how, opts in (("greedy", ["--greedy"]), ("top-k 1", ["--top-k", "1", "--seed", "1"]),
                      ("no cache", ["--greedy", "--no-cache"])):
        r = run([GEN, "-m", d, "--ids", "--json", "-n", str(N), "-q"] + opts,
                input="\n".join(lines) + "\n")
        if r.returncode != 0:
            bad.append(f"-n {N} {how}: {r.stderr.strip()}")
            continue
        outs = [json.loads(x) for x in r.stdout.splitlines()]
        bad += compare_greedy(f"{s['name']} -n {N} {how}", outs, refs, EOS)
        want = "eos" if s["forced_eos"] else "length"
        fin = [outs[b].get("finish_reason") for b in cut if b < len(outs)]
        if fin != [want] * len(cut):
            bad.append(f"-n {N} {how}: finish {fin} where the limit cut, want {want}")
    # one beam where greedy's first N - 1 tokens are not </s>: the forced
    # last step leaves it only </s>
    r = run([GEN, "-m", d, "--ids", "--beam", "1", "--json", "-n", str(N), "-q"],
            input="\n".join(lines[b] for b in cut) + "\n")
    if r.returncode != 0:
        bad.append(f"-n {N} --beam 1: {r.stderr.strip()}")
    else:
        bad += compare_greedy(f"{s['name']} -n {N} --beam 1",
                              [json.loads(x) for x in r.stdout.splitlines()],
                              [refs[b] for b in cut], EOS)
    return bad


def check_case(s, d, tok, rng):
    bad = []
    V = len(tok[0])
    t = random_checkpoint(s, V, rng)
    write_folder(d, s, t, V)
    write_tokenizer(d, *tok)
    P = {k: torch.from_numpy(v).double() for k, v in t.items()}
    B, S, T = 3, min(22, s["P"]), min(20, s["P"])
    src = rng.integers(4, V - 1, (B, S))
    src[:, 0] = BOS
    src_len = [S, 13, 4]
    for b in range(B):
        src[b, src_len[b] - 1] = EOS
    tgt = np.concatenate([np.full((B, 1), EOS), rng.integers(3, V, (B, T - 1))], 1)
    r, of = probe_encdec(d, src, src_len, tgt)
    if r.returncode != 0:
        return [f"io_probe: {r.stderr.strip()}"]
    desc = r.stdout.split("\n")
    want0 = (f"kind encoder-decoder positions learned norm post "
             f"act {'relu' if s['act'] == 'relu' else 'gelu_exact'} ln_eps 9.99999975e-06 "
             f"n_layer {s['DL']} n_head {s['NH']} n_embd {s['C']} d_ff {s['F']} "
             f"block_size {s['P']} vocab_size {V} segments 0 emb_norm 1 tied 1 "
             f"bias 1 tokenizer other {V}")
    want1 = (f"n_enc_layer {s['L']} norm_type layernorm ffn 0 attn_unscaled 0 t5 32 128 "
             f"head_scale 0 decoder_start 2 tie_source 1 head_dim {s['C'] // s['NH']} "
             f"forced_bos {BOS if s['forced'] else -1} source_bos 1")
    if desc[:2] != [want0, want1]:
        bad.append(f"description:\n  got  {desc[:2]}\n  want {[want0, want1]}")
    got = np.fromfile(of, np.float32).reshape(B, T, V).astype(np.float64)
    ref = bart_logits(P, s, torch.from_numpy(src), src_len, torch.from_numpy(tgt)).numpy()
    err = np.abs(got - ref).max()
    print(f"  {s['name']}: teacher-forced logits max |tfm - torch| = {err:.2e} "
          f"(max |logit| {np.abs(ref).max():.2f})")
    if not err <= TOL:
        bad.append(f"logits differ by {err:.3g} > {TOL}")

    # greedy generation through tfm_lm_open and the cached decode step
    lines, refs = [], []
    for b in range(B):
        sb = src[b, :src_len[b] - 1]  # "0 ...": tfm appends end-of-text (2)
        refs.append(greedy(P, s, torch.from_numpy(np.append(sb, EOS)), 16))
        lines.append(" ".join(map(str, sb)))
    r = run([GEN, "-m", d, "--ids", "--greedy", "--json", "-n", "16", "-q"],
            input="\n".join(lines) + "\n")
    if r.returncode != 0:
        return bad + [f"tfm-generate: {r.stderr.strip()}"]
    outs = [json.loads(x) for x in r.stdout.splitlines()]
    bad += compare_greedy(s["name"], outs, refs, EOS)
    # beam search starts from the same decoder prompt: one beam is greedy
    # where greedy never chose end-of-text (a beam finished by it makes
    # room for the next candidate)
    keep = [b for b in range(B) if len(refs[b][1]) == len(refs[b][0])] or [0]
    r = run([GEN, "-m", d, "--ids", "--beam", "1", "--json", "-n", "16", "-q"],
            input="\n".join(lines[b] for b in keep) + "\n")
    if r.returncode != 0:
        return bad + [f"tfm-generate --beam 1: {r.stderr.strip()}"]
    bad += compare_greedy(s["name"] + " --beam 1", [json.loads(x) for x in r.stdout.splitlines()],
                          [refs[b] for b in keep], EOS)
    # plain --ids output: the same tokens, space-separated; a source that
    # ends with </s> already (HF's input_ids) is not given a second one
    # (--json's ids end with </s> when it ended the text; the plain output's
    # do not)
    r = run([GEN, "-m", d, "--ids", "--greedy", "-n", "16", "-q"], input=lines[1] + " 2\n")
    want = outs[1]["ids"][:-1] if outs[1]["finish_reason"] == "eos" else outs[1]["ids"]
    if r.returncode != 0 or r.stdout.split() != [str(i) for i in want]:
        bad.append(f"tfm-generate --ids: {r.stdout!r} {r.stderr.strip()}, want {want}")
    bad += check_forced_eos(s, d, P, src, src_len)
    bad += check_rates(s["name"], d, RATES if s["rates"] else DEFAULT_RATES)
    r = run([EVAL, "info", "-m", d])
    forced = f"forced_bos\t{BOS if s['forced'] else '-'}\n"
    forced += f"source_bos\ttrue\nforced_eos\t{EOS if s['forced_eos'] else '-'}\n"
    if r.returncode != 0 or "kind\tbart-huggingface\n" not in r.stdout or \
            "model_kind\tencoder-decoder\n" not in r.stdout or "eos\t2\n" not in r.stdout or \
            forced not in r.stdout or "source_bos\ttrue\n" not in r.stdout:
        bad.append(f"tfm-eval info: exit {r.returncode}: {r.stdout}{r.stderr}")
    return bad


def check_text(top, tok, rng):
    """The tokenizer beside the checkpoint, the encoder through tfm-embed,
    and fine-tuning from the folder (train.init)."""
    s = CASES[0]
    V = len(tok[0])
    d = os.path.join(top, "text")
    t = random_checkpoint(s, V, rng)
    write_folder(d, s, t, V)
    write_tokenizer(d, *tok)
    bad = []
    # vocab.json + merges.txt alone: BART's five specials are special tokens
    # (as HF's BartTokenizer makes them), so text sources end with </s>
    r = run([TOKENIZE, "encode", "-q", "--split-special", "-t", d], input="the</s>\n")
    if r.returncode != 0 or r.stdout.split()[-1:] != [str(EOS)]:
        bad.append(f"vocab.json + merges.txt: </s> is not one token: {r.stdout.strip()!r} "
                   f"{r.stderr.strip()}")
    r = run([GEN, "-m", d, "--greedy", "-n", "4", "-q"], input="the of and\n", errors="replace")
    if r.returncode != 0:
        bad.append(f"tfm-generate on text with vocab.json + merges.txt: {r.stderr.strip()}")
    write_tokenizer_json(d, *tok)
    P = {k: torch.from_numpy(v).double() for k, v in t.items()}
    line = "the lord and his god shall be with unto them"
    ids = bpe_encode(line, *tok)
    r = run([TOKENIZE, "encode", "-t", d], input=line + "\n")
    if r.returncode != 0 or [int(x) for x in r.stdout.split()] != ids:
        bad.append(f"tfm-tokenize encode: {r.stdout.strip()!r} {r.stderr.strip()}, want {ids}")
    # a text source is <s> + its ids + </s>, as BartTokenizer makes it, and
    # the translation begins after the forced <s>
    r = run([GEN, "-m", d, "--greedy", "--json", "-n", "16", "-q"], input=line + "\n")
    if r.returncode != 0:
        bad.append(f"tfm-generate on text: {r.stderr.strip()}")
    else:
        outs = [json.loads(x) for x in r.stdout.splitlines()]
        full = torch.tensor([BOS] + ids + [EOS])
        if outs and outs[0].get("source_tokens") != len(ids) + 2:
            bad.append(f"text source: {outs[0].get('source_tokens')} tokens, want "
                       f"<s> + {len(ids)} + </s>")
        bad += compare_greedy("text source", outs, [greedy(P, s, full, 16)], EOS)
    r = run([EMBED, "-m", d, "--pool", "mean", "--layers", "last", "-f", "tsv"],
            input=line + "\n")
    if r.returncode != 0:
        bad.append(f"tfm-embed: {r.stderr.strip()}")
    else:
        ref = bart_encode(P, s, torch.tensor([ids]), [len(ids)])[0][0].mean(0).numpy()
        got = np.array([float(x) for x in r.stdout.split()])
        err = np.abs(got - ref).max() if got.shape == ref.shape else float("inf")
        print(f"  tfm-embed: mean of the encoder's output, max |tfm - torch| = {err:.2e}")
        if not err <= TOL:
            bad.append(f"tfm-embed differs by {err:.3g}")
    bad += check_train_init(top, d, WORDS, V,
                            lambda src, sl, tgt: bart_logits(P, s, src, sl, tgt), rng,
                            RATES, dict(RATES, dropout=0.05, emb_dropout=0.05))
    bad += check_lora(top, d, V, t, rng)
    # fine-tuning reads sources and targets as HF's tokenizer makes them:
    # <s> first (the target's because of forced_bos); the run keeps both keys
    r = run([TRAIN, "--dump-batches", "4", "--set",
             f"train.init={d}", "--set", f"data.text={os.path.join(top, 'pairs.tsv')}",
             "--set", f"data.tokenizer={d}", "--set", "train.batch_size=2"])
    rows = [json.loads(x) for x in r.stdout.splitlines()] if r.returncode == 0 else []
    if len(rows) != 4 or any(x["input_ids"][:1] != [BOS] or x["input_ids"][-1:] != [EOS] or
                             x["target_ids"][:1] != [BOS] for x in rows):
        bad.append(f"tfm-train --dump-batches of a BART folder: {r.stdout[:300]!r} "
                   f"{r.stderr.strip()}")
    r, _ = probe_encdec(os.path.join(top, "run0", "model.safetensors"),
                        np.array([[5, 6, 2]]), [3], np.zeros((1, 2), np.int64))
    if r.returncode != 0 or "forced_bos 0 source_bos 1" not in r.stdout:
        bad.append(f"the fine-tuned BART lost forced_bos/source_bos: {r.stdout[:400]!r} "
                   f"{r.stderr.strip()}")
    r = run([EVAL, "info", "-m", os.path.join(top, "run0", "model.safetensors")])
    if r.returncode != 0 or f"forced_eos\t{EOS}\n" not in r.stdout:
        bad.append(f"the fine-tuned BART lost forced_eos: {r.stdout[-300:]!r} "
                   f"{r.stderr.strip()}")
    return bad

def check_bartmodel(top, rng):
    """A BartModel file (no "model." prefix, no final_logits_bias, no
    lm_head): the head tied to shared.weight without a bias, as
    BartForConditionalGeneration.from_pretrained would make it."""
    s, V = CASES[0], 50
    t = random_checkpoint(s, V, rng)
    t = {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}
    d = os.path.join(top, "bartmodel")
    write_folder(d, s, t, V)
    P = {"model." + k: torch.from_numpy(v).double() for k, v in t.items()}
    P["final_logits_bias"] = torch.zeros(1, V, dtype=torch.float64)
    src, tgt = rng.integers(3, V, (2, 9)), rng.integers(0, V, (2, 7))
    r, of = probe_encdec(d, src, [9, 5], tgt)
    if r.returncode != 0:
        return [f"BartModel: io_probe: {r.stderr.strip()}"]
    got = np.fromfile(of, np.float32).reshape(2, 7, V)
    ref = bart_logits(P, s, torch.from_numpy(src), [9, 5], torch.from_numpy(tgt)).numpy()
    err = np.abs(got - ref).max()
    print(f"  BartModel layout: logits max |tfm - torch| = {err:.2e}")
    return [] if err <= TOL else [f"BartModel: logits differ by {err:.3g}"]


def expect(what, d, pieces, s, t, V, mutate_cfg=None, mutate_t=None):
    """Loading the mutated folder fails (exit 1) in io_probe and
    tfm-generate with a message containing every piece."""
    cfg = hf_config(s, V)
    t2 = dict(t)
    if mutate_cfg:
        mutate_cfg(cfg)
    if mutate_t:
        mutate_t(t2)
    shutil.rmtree(d, ignore_errors=True)
    write_folder(d, s, t2, V, cfg)
    r, _ = probe_encdec(d, np.array([[0, 5, 2]]), [3], np.full((1, 2), 2))
    r2 = run([GEN, "-m", d, "--ids", "--greedy", "-n", "2"], input="0 5 6\n")
    return refusals(what, pieces, (("io_probe", r), ("tfm-generate", r2)))


def check_errors(top, rng):
    s, V = CASES[1], 64
    t = random_checkpoint(s, V, rng)
    d = os.path.join(top, "bad")
    cj, st = os.path.join(d, "config.json"), os.path.join(d, "model.safetensors")

    def drop(k):
        return lambda c: c.pop(k)

    def setv(k, v):
        return lambda c: c.__setitem__(k, v)

    bad = []
    bad += expect("missing d_model", d, [cj, "d_model is missing"], s, t, V, drop("d_model"))
    bad += expect("absurd encoder_layers", d, [cj, "encoder_layers must be between 1 and 1024"],
                  s, t, V, setv("encoder_layers", 0))
    bad += expect("absurd eos", d, [cj, "eos_token_id must be between 0 and 63"], s, t, V,
                  setv("eos_token_id", 64))
    bad += expect("heads differ", d, [cj, "decoder_attention_heads 4 differs from "
                                          "encoder_attention_heads 2"], s, t, V,
                  setv("decoder_attention_heads", 4))
    bad += expect("mbart", d, [cj, "normalize_before true"], s, t, V,
                  setv("normalize_before", True))
    bad += expect("activation", d, [cj, "activation_function 'swish' is not supported"], s, t,
                  V, setv("activation_function", "swish"))
    bad += expect("model_type", d, [cj, "model_type 'mbart' is not supported"], s, t, V,
                  setv("model_type", "mbart"))
    w = "model.decoder.layers.0.encoder_attn.v_proj.bias"
    bad += expect("missing tensor", d, [st, f"no tensor '{w}'", "F32 [32]"], s, t, V,
                  mutate_t=lambda x: x.pop(w))
    w2 = "model.encoder.embed_positions.weight"
    bad += expect("positions without the offset", d,
                  [st, f"tensor '{w2}' is F32 [24, 32]", "F32 [26, 32]"], s, t, V,
                  mutate_t=lambda x: x.__setitem__(w2, x[w2][2:].copy()))
    bad += expect("extra layer", d, [st, "has a layer 2", "config.json says 2"], s, t, V,
                  setv("encoder_layers", 2))
    bad += expect("final_logits_bias shape", d,
                  [st, "tensor 'final_logits_bias' is F32 [63]", "F32 [1, 64]"], s, t, V,
                  mutate_t=lambda x: x.__setitem__("final_logits_bias",
                                                   x["final_logits_bias"][0, :63].copy()))
    return bad


def main():
    for p in (PROBE, GEN, EVAL, TRAIN, EMBED, TOKENIZE):
        if not os.path.exists(p):
            print(f"missing {p}")
            return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(29)
    corpus = [" ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6 + i % 5))
              for i in range(200)]
    tok = make_tokenizer(corpus)
    top = tempfile.mkdtemp(prefix="hf_bart.")
    bad = []
    try:
        for s in CASES:
            bad += [f"{s['name']}: {b}"
                    for b in check_case(s, os.path.join(top, s["name"]), tok, rng)]
        bad += check_errors(top, rng)
        bad += check_bartmodel(top, rng)
        bad += check_text(top, tok, rng)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
