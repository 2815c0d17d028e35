#!/usr/bin/python3
"""Llama-family folders as transformers writes them, judged by transformers.

Random LlamaForCausalLM (grouped-query attention 4/2, untied head, F32),
Qwen2ForCausalLM (multi-query 4/1, q/k/v biases, tied head, BF16) and
MistralForCausalLM (a sliding window of 8 over 40 tokens, F16) folders,
and Llamas with linear (F32) and llama3 (BF16) rope scaling,
made with their configs' from_config and save_pretrained; transformers'
own model of each folder (from_pretrained in float32, eager attention) is
the reference:
- tfm-eval perplexity --tokens = exp of model(ids, labels=ids)'s loss, and
  --token-logprobs each token's log-softmax, to 1e-4;
- tfm-generate --ids --greedy: generate(do_sample=False)'s tokens, and its
  log-probabilities those of the model's logits (Mistral's 200 tokens, on
  tfm's rolling cache of its window);
- tfm-eval info: the architecture tfm made of it (n_kv_head, window);
- config.json keys tfm lacks are refused, naming the file and the key:
  rope scaling dynamic and yarn, llama3's bounds reversed, an activation
  other than silu, Qwen2's window on some layers only;
- with a tokenizer in the folder (tests/hf_llama_tok.py's Llama 3, Qwen2
  and Llama 2 tokenizers beside Llama, Qwen2 and Mistral models of their
  vocabulary's size): text prompts through tfm-generate --greedy continue
  as generate() does from AutoTokenizer's input_ids (Llama 3's
  <|begin_of_text|> and Llama 2's <s> first), its text is decode()'s, and
  tfm-eval perplexity of a text is transformers' loss on those ids.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import tokenizers  # noqa: F401,E402  (the skip of tests/run-python)
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_lib import EVAL, GEN, TOL, run  # noqa: E402
import hf_llama_tok  # noqa: E402

hf_logging.set_verbosity_error()
V, N = 97, 40
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=64, rms_norm_eps=1e-5,
              bos_token_id=1, eos_token_id=2)
CASES = [
    ("llama", "LlamaConfig", "LlamaForCausalLM", torch.float32,
     dict(num_key_value_heads=2, tie_word_embeddings=False,
          rope_parameters={"rope_type": "default", "rope_theta": 5000.0})),
    ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", torch.bfloat16,
     dict(num_key_value_heads=1, tie_word_embeddings=True)),
    ("mistral", "MistralConfig", "MistralForCausalLM", torch.float16,
     dict(num_key_value_heads=2, sliding_window=8, tie_word_embeddings=False)),
    # scaled rotations: the head size 8 gives wavelengths 6.3, 167, 4443
    # and 118k, which llama3's bounds (100 and 400) keep, blend and divide
    ("llama-linear", "LlamaConfig", "LlamaForCausalLM", torch.float32,
     dict(num_key_value_heads=2, tie_word_embeddings=True,
          rope_parameters={"rope_type": "linear", "factor": 2.5, "rope_theta": 1e4})),
    ("llama3", "LlamaConfig", "LlamaForCausalLM", torch.bfloat16,
     dict(num_key_value_heads=4, tie_word_embeddings=False,
          rope_parameters={"rope_type": "llama3", "factor": 8.0, "rope_theta": 5e5,
                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 400})),
]


def make(top, name, cfg_cls, model_cls, dtype, keys):
    torch.manual_seed(len(name))
    cfg = getattr(transformers, cfg_cls)(**COMMON, **keys)
    m = getattr(transformers, model_cls)(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 0.2)
    d = os.path.join(top, name)
    m.to(dtype).save_pretrained(d)
    ref = getattr(transformers, model_cls).from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager").eval()
    return d, ref


def compare(what, got, want, bad, tol=TOL):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.abs(got - want).max() if got.shape == want.shape else float("inf")
    print(f"  {what}: largest difference {err:.2e}")
    if not err <= tol * max(1.0, np.abs(want).max()):
        bad.append(f"{what}: {err:.3g}")


def check(top, name, d, m, bad):
    rng = np.random.default_rng(5)
    ids = rng.integers(3, V, size=N).tolist()
    npy = os.path.join(top, name + ".npy")
    np.save(npy, np.array(ids, np.int32))
    with torch.no_grad():
        out = m(torch.tensor([ids]), labels=torch.tensor([ids]))
    lp = out.logits[0].log_softmax(-1)
    want = [lp[t - 1, ids[t]].item() for t in range(1, N)]
    r = run([EVAL, "perplexity", "-q", "-m", d, "--tokens", npy, "--no-bos", "--json"])
    if r.returncode:
        bad.append(f"{name}: tfm-eval perplexity: {r.stderr.strip()}")
        return
    got = json.loads(r.stdout)["perplexity"]
    ref = float(np.exp(out.loss.item()))
    print(f"  {name}: tfm-eval perplexity {got:.6f}, transformers {ref:.6f}")
    if not abs(got - ref) <= TOL * ref:
        bad.append(f"{name}: perplexity {got}, transformers {ref}")
    r = run([EVAL, "perplexity", "-q", "-m", d, "--tokens", npy, "--no-bos", "--context",
             str(N), "--token-logprobs", "-"])
    rows = [x.split("\t") for x in r.stdout.splitlines() if x and x[0].isdigit()]
    tl = {int(x[0]): float(x[2]) for x in rows if len(x) == 3}
    compare(f"{name}: tfm-eval --token-logprobs", [tl.get(t, 0.0) for t in range(1, N)], want,
            bad)
    prompt = ids[:6]
    # past the rolling cache of a window (window + 64 positions, kept once
    # the whole cache would hold twice that)
    new = 200 if getattr(m.config, "sliding_window", None) else 12
    with torch.no_grad():
        g = m.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new,
                       min_new_tokens=new, output_scores=True, return_dict_in_generate=True,
                       eos_token_id=None, pad_token_id=0)
    want_ids = g.sequences[0, len(prompt):].tolist()
    want_lp = [s[0].log_softmax(-1)[t].item() for s, t in zip(g.scores, want_ids)]
    r = run([GEN, "-q", "-m", d, "--ids", "--greedy", "--ignore-eos", "-n", str(new), "--json",
             " ".join(map(str, prompt))])
    if r.returncode:
        bad.append(f"{name}: tfm-generate: {r.stderr.strip()}")
        return
    o = json.loads(r.stdout.splitlines()[0])
    if o["ids"] != want_ids:
        bad.append(f"{name}: tfm-generate ids {o['ids']}, transformers {want_ids}")
    else:
        compare(f"{name}: tfm-generate --greedy log-probs", o["logprobs"], want_lp, bad)
    r = run([EVAL, "info", "--json", "-m", d])
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    cfg = m.config
    w = getattr(cfg, "sliding_window", None) or 0
    exp = {"n_kv_head": cfg.num_key_value_heads, "attention_window": w, "norm_type": "rmsnorm",
           "ffn": "swiglu", "positions": "rope", "tied": bool(cfg.tie_word_embeddings)}
    for k, v in exp.items():
        if info.get(k) != v:
            bad.append(f"{name}: tfm-eval info {k} = {info.get(k)!r}, expected {v!r}")


PROMPTS = ["The quick brown fox", "don't stop: 12345 apples", "日本語 and emoji 😀",
           "  two spaces\tand a tab", "<|im_start|>user hi"]


def text_prompts(top, name, mk_tok, cfg_cls, model_cls, keys, bad):
    d = os.path.join(top, name + "-text")
    tok = mk_tok(d)
    torch.manual_seed(7)
    cfg = getattr(transformers, cfg_cls)(**{**COMMON, "vocab_size": len(tok),
                                            "bos_token_id": tok.bos_token_id or 0,
                                            "eos_token_id": tok.eos_token_id}, **keys)
    m = getattr(transformers, model_cls)(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" not in n:
                p.normal_(0, 0.3)
    m.save_pretrained(d)
    m = getattr(transformers, model_cls).from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager").eval()
    r = run([GEN, "-q", "-m", d, "--greedy", "--ignore-eos", "-n", "8", "--json"],
            input="\n".join(PROMPTS) + "\n")
    if r.returncode:
        bad.append(f"{name}: tfm-generate with its tokenizer: {r.stderr.strip()}")
        return
    outs = [json.loads(x) for x in r.stdout.splitlines()]
    same = 0
    for p, o in zip(PROMPTS, outs):
        ids = tok(p).input_ids
        with torch.no_grad():
            # the mask given: generate() would take a first id equal to
            # pad_token_id for padding
            g = m.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)),
                           do_sample=False, max_new_tokens=8, min_new_tokens=8,
                           eos_token_id=None, pad_token_id=0)
        g = g[0, len(ids):].tolist()
        text = tok.decode(g, skip_special_tokens=True)
        if o["ids"] != g:
            bad.append(f"{name}: tfm-generate from {p!r}: {o['ids']}, transformers {g}")
        elif o["text"] != text:
            bad.append(f"{name}: tfm-generate's text from {p!r}: {o['text']!r}, "
                       f"transformers {text!r}")
        else:
            same += 1
    print(f"  {name}: tfm-generate continues {same}/{len(PROMPTS)} text prompts as "
          f"transformers from AutoTokenizer's ids ({tok(PROMPTS[0]).input_ids[:3]}...)")
    # perplexity of a text: transformers' loss on AutoTokenizer's ids (the
    # template's first token given, Qwen2's none: its first token given)
    text = "In the beginning God created the heaven and the earth. 1234 don't"
    ids = tok(text).input_ids
    with torch.no_grad():
        loss = m(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
    want = float(np.exp(loss))
    txt = os.path.join(top, name + ".txt")
    with open(txt, "w") as f:
        f.write(text)
    extra = [] if tok.bos_token_id is not None else ["--no-bos"]
    r = run([EVAL, "perplexity", "-q", "-m", d, "--json", *extra, txt])
    got = json.loads(r.stdout)["perplexity"] if r.returncode == 0 else float("nan")
    print(f"  {name}: tfm-eval perplexity of a text {got:.6f}, transformers {want:.6f}")
    if not abs(got - want) <= TOL * want:
        bad.append(f"{name}: perplexity of a text {got} ({r.stderr.strip()}), "
                   f"transformers {want}")


def refused(top, d, edit, words, bad):
    e = os.path.join(top, "edited")
    shutil.rmtree(e, ignore_errors=True)
    shutil.copytree(d, e)
    p = os.path.join(e, "config.json")
    c = json.load(open(p))
    edit(c)
    json.dump(c, open(p, "w"), indent=2)
    r = run([EVAL, "info", "-m", e])
    msg = r.stderr.strip()
    if r.returncode != 1 or "config.json" not in msg or not all(w in msg for w in words) or \
            len(msg.splitlines()) != 1:
        bad.append(f"refusal of {words}: exit {r.returncode}, {msg!r}")
    else:
        print(f"  refused: {msg}")


def main():
    bad = []
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as top:
        dirs = {}
        for name, cc, mc, dtype, keys in CASES:
            d, m = make(top, name, cc, mc, dtype, keys)
            dirs[name] = d
            check(top, name, d, m, bad)
        text_prompts(top, "llama", hf_llama_tok.llama3_tokenizer, "LlamaConfig",
                     "LlamaForCausalLM", CASES[0][4], bad)
        text_prompts(top, "qwen2", hf_llama_tok.qwen2_tokenizer, "Qwen2Config",
                     "Qwen2ForCausalLM", CASES[1][4], bad)
        text_prompts(top, "mistral", lambda d: hf_llama_tok.llama2_tokenizer(d, top),
                     "MistralConfig", "MistralForCausalLM", CASES[2][4], bad)
        refused(top, dirs["llama"], lambda c: c.update(
            rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}),
            ["dynamic"], bad)
        refused(top, dirs["llama"], lambda c: c.update(
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4,
                             "original_max_position_embeddings": 32}), ["yarn"], bad)
        refused(top, dirs["llama3"], lambda c: c["rope_parameters"].update(
            high_freq_factor=0.5), ["high_freq_factor"], bad)
        refused(top, dirs["llama"], lambda c: c.update(hidden_act="gelu"), ["hidden_act"], bad)
        refused(top, dirs["qwen2"], lambda c: c.update(
            use_sliding_window=True, sliding_window=8, max_window_layers=1,
            layer_types=["full_attention", "sliding_attention"]), ["layer"], bad)
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
