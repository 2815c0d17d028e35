#!/usr/bin/python3
"""GPT-2 folders that tfm must refuse, made by transformers and then broken.

Each bad folder is refused by every program that opens a model, with one
message naming the file (and the line and column of config.json's key)
and what was expected, exit 1, and no output file: tests/io_probe
model-logits (tfm_model_load), tfm-generate and tfm-eval perplexity
(tfm_lm_open), tfm-embed -o and tfm-train --convert -o (under the
sanitizers, one of each way in: io_probe, tfm-generate, tfm-train).
- config.json: n_layer, n_embd, vocab_size or n_positions disagreeing with
  the tensors; n_inner disagreeing with c_fc (and null over a c_fc that is
  not 4 x n_embd); tie_word_embeddings false without lm_head.weight; a key
  GPT2Config does not have; a GPT2Config key tfm does not honour away from
  its default (scale_attn_by_inverse_layer_idx, add_cross_attention); an
  activation_function tfm does not have (silu); an architecture that is
  not GPT2LMHeadModel / GPT2Model (LlamaForCausalLM written over GPT-2
  tensors, and a real GPT2ForSequenceClassification folder, whose score
  head tfm would drop).
- An OPTForCausalLM folder written by transformers: the architecture is
  named, with the families tfm reads.
- Sharded folders (save_pretrained(max_shard_size=...)): a shard missing,
  a shard truncated, the index listing a tensor its shard lacks, a shard
  holding a tensor the index does not list.
- pytorch_model.bin alone (torch.save of the state dict): the pickle format
  is named as unsupported, with the way to convert.
- A tokenizer larger than the model: blamed on tokenizer.json.
- tfm-train --convert q8_0 of a folder whose matrix holds a NaN: the
  tensor is named and nothing is written."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import tokenizers  # noqa: F401  (the skip of tests/run-python)
import torch
import transformers  # noqa: F401
from transformers import GPT2Config, GPT2ForSequenceClassification, OPTConfig, OPTForCausalLM
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_lib import EMBED, EVAL, GEN, PROBE, TRAIN, refusals, run  # noqa: E402
from hf_gpt2_lib import make_model, probe, train_tokenizer  # noqa: E402

PRE = "transformer."
CASES = []


ALL = ("io_probe", "tfm-generate", "tfm-eval", "tfm-embed", "tfm-train")
# under the sanitizers (slow programs): one of each way in
SANITIZED = bool(os.environ.get("TFM_SANITIZED"))


def refused(what, d, pieces, work, programs=None):
    """Every program refuses folder d: exit 1, one message holding every
    piece, no output file."""
    if programs is None:
        programs = ("io_probe", "tfm-generate", "tfm-train") if SANITIZED else ALL
    outs = {"tfm-embed": os.path.join(work, "out.npy"),
            "tfm-train": os.path.join(work, "out.safetensors")}
    for o in outs.values():
        if os.path.exists(o):
            os.remove(o)
    np.save(os.path.join(work, "ids.npy"), np.array([5, 6, 7, 8], np.int32))
    res = []
    for p in programs:
        if p == "io_probe":
            r, _ = probe(d, [[5, 6, 7]], work)
        elif p == "tfm-generate":
            r = run([GEN, "-m", d, "--ids", "--greedy", "-n", "2"], input="5 6\n")
        elif p == "tfm-eval":
            r = run([EVAL, "perplexity", "-m", d, "--tokens", os.path.join(work, "ids.npy")])
        elif p == "tfm-embed":
            r = run([EMBED, "-m", d, "-o", outs[p]], input="In the beginning\n")
        else:
            r = run([TRAIN, "--convert", "bf16", d, "-o", outs[p]])
        res.append((p, r))
    CASES.append(what)
    bad = refusals(what, pieces, res)
    bad += [f"{what}: {p} wrote {o}" for p, o in outs.items() if os.path.exists(o)]
    return bad


def line_col(path, needle):
    with open(path) as f:
        text = f.read()
    i = text.index(needle)
    return text.count("\n", 0, i) + 1


def main():
    for p in (PROBE, GEN, EVAL, EMBED, TRAIN):
        if not os.path.exists(p):
            print(f"missing {p}")
            return 1
    torch.set_num_threads(1)
    top = tempfile.mkdtemp(prefix="hf_gpt2_errors.")
    bad = []
    try:
        bad = check(top)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


def check(top):
    _, tok = train_tokenizer(top)
    V = len(tok)
    bad = []
    good = os.path.join(top, "good")
    make_model(V, 1, tie_word_embeddings=False, n_inner=48).save_pretrained(good)
    tok.save_pretrained(good)
    tied = os.path.join(top, "tied")
    make_model(V, 2).save_pretrained(tied)
    tok.save_pretrained(tied)
    r, _ = probe(good, [[5, 6, 7]], top)
    if r.returncode != 0:
        return [f"the unbroken folder: {r.stderr.strip()}"]
    with open(os.path.join(good, "config.json")) as f:
        cfg0 = json.load(f)
    d = os.path.join(top, "bad")
    cj = os.path.join(d, "config.json")

    def with_cfg(what, change, key, pieces, src=good):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        with open(cj) as f:
            cfg = json.load(f)
        change(cfg)
        with open(cj, "w") as f:
            json.dump(cfg, f, indent=2)
        return refused(what, d, [f"{cj}:{line_col(cj, json.dumps(key))}:"] + pieces, top)

    bad += with_cfg("n_layer 3", lambda c: c.update(n_layer=3), "n_layer",
                    ["n_layer 3 but the checkpoint has 2"])
    bad += with_cfg("n_embd 64", lambda c: c.update(n_embd=64), "n_embd",
                    ["n_embd 64 but the checkpoint has 32"])
    bad += with_cfg("vocab_size", lambda c: c.update(vocab_size=V + 1), "vocab_size",
                    [f"vocab_size {V + 1} but the checkpoint has {V}"])
    bad += with_cfg("n_positions", lambda c: c.update(n_positions=1024), "n_positions",
                    ["n_positions 1024 but the checkpoint has 64"])
    bad += with_cfg("an unknown key", lambda c: c.update(rotary_dim=16), "rotary_dim",
                    ["'rotary_dim' is not a GPT2Config key tfm reads"])
    bad += with_cfg("scale_attn_by_inverse_layer_idx",
                    lambda c: c.update(scale_attn_by_inverse_layer_idx=True),
                    "scale_attn_by_inverse_layer_idx",
                    ["scale_attn_by_inverse_layer_idx true is not supported"])
    bad += with_cfg("add_cross_attention", lambda c: c.update(add_cross_attention=True),
                    "add_cross_attention", ["add_cross_attention true is not supported"])
    bad += with_cfg("activation silu", lambda c: c.update(activation_function="silu"),
                    "activation_function",
                    ["activation_function 'silu' is not supported (tfm has gelu_new"])
    bad += with_cfg("n_inner 128 over c_fc [32, 48]", lambda c: c.update(n_inner=128),
                    "n_inner", ["n_inner 128 but the checkpoint's h.0.mlp.c_fc.weight is "
                                "[32, 48]"])
    reads = ("it reads the folders of GPT-2 (GPT2LMHeadModel, GPT2Model), BERT")
    bad += with_cfg("architectures LlamaForCausalLM over GPT-2 tensors",
                    lambda c: c.update(architectures=["LlamaForCausalLM"]), "LlamaForCausalLM",
                    ["architecture 'LlamaForCausalLM' is not one tfm reads", reads])
    bad += with_cfg("untied without lm_head", lambda c: c.update(tie_word_embeddings=False),
                    "tie_word_embeddings",
                    ["tie_word_embeddings false but", "has no lm_head.weight"], tied)
    # n_inner null is 4 x n_embd: c_fc [32, 48] is not that (no line: the
    # key's absence is as wrong)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(good, d)
    cfg = dict(cfg0, n_inner=None)
    with open(cj, "w") as f:
        json.dump(cfg, f, indent=2)
    bad += refused("n_inner null over c_fc [32, 48]", d,
                   [f"{cj}: n_inner null means 4 x n_embd = 128, but the checkpoint's "
                    "h.0.mlp.c_fc.weight is [32, 48]"], top)

    # real folders of other architectures, as transformers writes them
    torch.manual_seed(3)
    sc = os.path.join(top, "seqclass")
    GPT2ForSequenceClassification(GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2,
                                             n_head=4, num_labels=3, pad_token_id=0)
                                  ).save_pretrained(sc)
    tok.save_pretrained(sc)
    c = os.path.join(sc, "config.json")
    bad += refused("GPT2ForSequenceClassification", sc,
                   [f"{c}:{line_col(c, 'GPT2ForSequenceClassification')}:",
                    "architecture 'GPT2ForSequenceClassification' is not one tfm reads", reads],
                   top)
    ll = os.path.join(top, "opt")
    OPTForCausalLM(OPTConfig(vocab_size=V, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=64,
                             word_embed_proj_dim=32)).save_pretrained(ll)
    tok.save_pretrained(ll)
    c = os.path.join(ll, "config.json")
    bad += refused("OPTForCausalLM folder", ll,
                   [f"{c}:{line_col(c, 'OPTForCausalLM')}:",
                    "architecture 'OPTForCausalLM' (model_type 'opt') is not one tfm reads",
                    reads], top)

    # sharded folders, broken
    m = make_model(V, 4)
    sh = os.path.join(top, "shards")

    def shards(what, breakit, pieces):
        shutil.rmtree(sh, ignore_errors=True)
        m.save_pretrained(sh, max_shard_size="20KB")
        tok.save_pretrained(sh)
        idx = os.path.join(sh, "model.safetensors.index.json")
        with open(idx) as f:
            index = json.load(f)
        files = sorted(set(index["weight_map"].values()))
        if len(files) < 3:
            return [f"save_pretrained(max_shard_size=20KB) wrote {len(files)} shards"]
        breakit(idx, index, os.path.join(sh, files[1]))
        return refused(what, sh, [p.replace("IDX", idx).replace("SHARD",
                                                                 os.path.join(sh, files[1]))
                                  for p in pieces], top)

    def rewrite_index(idx, index):
        with open(idx, "w") as f:
            json.dump(index, f, indent=2)

    bad += shards("a shard missing", lambda idx, index, f: os.remove(f),
                  ["IDX:", "shard: SHARD: No such file or directory"])
    bad += shards("a shard truncated",
                  lambda idx, index, f: os.truncate(f, os.path.getsize(f) - 100),
                  ["IDX:", "shard: SHARD:", "lie outside the", "data buffer"])

    def lacks(idx, index, f):
        index["weight_map"][PRE + "h.7.ln_1.weight"] = os.path.basename(f)
        rewrite_index(idx, index)

    bad += shards("the index lists a tensor its shard lacks", lacks,
                  ["IDX", f"tensor '{PRE}h.7.ln_1.weight' is not in its shard"])

    def unlisted(idx, index, f):
        t = load_file(f)
        name = sorted(t)[0]
        del index["weight_map"][name]
        rewrite_index(idx, index)
        unlisted.name = name

    unlisted.name = None
    got = shards("a shard's tensor the index does not list", unlisted, ["IDX"])
    if unlisted.name and got:
        # the message names the tensor: check it was this one
        got = shards("a shard's tensor the index does not list", unlisted,
                     [f"tensor '{unlisted.name}' is not listed in IDX"])
    bad += got

    # pytorch_model.bin only (transformers 5 writes safetensors whatever
    # safe_serialization says: the file is torch.save of the state dict, as
    # transformers 4 wrote it)
    pt = os.path.join(top, "pickle")
    m5 = make_model(V, 5)
    m5.save_pretrained(pt)
    tok.save_pretrained(pt)
    os.remove(os.path.join(pt, "model.safetensors"))
    torch.save(m5.state_dict(), os.path.join(pt, "pytorch_model.bin"))
    bad += refused("pytorch_model.bin only", pt,
                   [os.path.join(pt, "pytorch_model.bin"), "pickle format is not supported",
                    "save_pretrained"], top)

    # a tokenizer larger than the model
    small = os.path.join(top, "small")
    make_model(V - 10, 6).save_pretrained(small)
    tok.save_pretrained(small)
    bad += refused("tokenizer.json larger than the model", small,
                   [f"{os.path.join(small, 'tokenizer.json')}: the tokenizer has {V} tokens "
                    f"but the model only {V - 10}"], top,
                   ("tfm-generate", "tfm-embed"))

    # --convert q8_0 of a NaN matrix: an error naming the tensor, no file
    nan = os.path.join(top, "nan")
    shutil.copytree(tied, nan)
    f = os.path.join(nan, "model.safetensors")
    t = load_file(f)
    t[PRE + "h.1.mlp.c_fc.weight"][3, 5] = float("nan")
    save_file(t, f, {"format": "pt"})
    out = os.path.join(top, "nan-q8.safetensors")
    r = run([TRAIN, "--convert", "q8_0", nan, "-o", out])
    want = "tensor 'h.1.mlp.c_fc.weight' holds nan at [3, 5]: q8_0 cannot store it"
    if r.returncode != 1 or want not in r.stderr or nan not in r.stderr:
        bad.append(f"--convert q8_0 of a NaN matrix: exit {r.returncode}: "
                   f"{r.stderr.strip()!r}, want {want!r}")
    if os.path.exists(out):
        bad.append(f"--convert q8_0 of a NaN matrix wrote {out}")
    print(f"  {len(set(CASES))} bad folders, each refused by every program that opens it: "
          + "; ".join(dict.fromkeys(CASES)))
    return bad


if __name__ == "__main__":
    sys.exit(main())
