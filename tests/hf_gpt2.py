#!/usr/bin/python3
"""GPT-2 folders as transformers writes them, judged by transformers.

Random GPT2LMHeadModel folders are made with GPT2Config(...) and
save_pretrained (with a byte-level BPE tokenizer trained by HF tokenizers
and saved by GPT2Tokenizer: tokenizer.json + tokenizer_config.json), in
F32, F16 and BF16, tied and untied, with every GPT2Config key that changes
the computation and that tfm honours set away from its default
(tie_word_embeddings, n_inner, scale_attn_weights, layer_norm_epsilon,
activation_function gelu / relu, reorder_and_upcast_attn), single-file and
sharded (max_shard_size: model.safetensors.index.json + shards).  For each,
transformers' own model of the folder (from_pretrained in float32, eager
attention) is the reference:
- tests/io_probe model-logits (tfm_model_load) = model(input_ids).logits;
- tfm-generate --greedy: the tokens of generate(do_sample=False) and their
  log-probabilities (log_softmax of the model's logits);
- tfm-generate --beam N --lenpen A: the tokens of generate(num_beams=N,
  length_penalty=A, early_stopping="never"), with and without the end of
  text reachable (tfm's search stops when no live beam can beat the
  finished ones at any length, which is early_stopping="never";
  transformers' default, early_stopping=False, is a heuristic that stops
  sooner, reported but not required);
- tfm-eval perplexity = exp of the mean loss of model(ids, labels=ids)
  (with the end-of-text token before the text and without, --tokens, and a
  sliding window as transformers' perplexity guide computes it);
- tfm-embed --layers K --pool none = output_hidden_states' K-th, --pool
  last its last row, --attention = output_attentions;
- generation stops at config.json's / generation_config.json's
  eos_token_id, as generate does, also where the tokenizer's
  <|endoftext|> is another token.
A key that changes the computation must change transformers' logits in the
test's folder (from_pretrained with the key at its default differs), so a
key tfm ignored would fail the comparison."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import tokenizers  # noqa: F401  (the skip of tests/run-python)
import torch
import transformers  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_lib import EMBED, EVAL, GEN, PROBE, TOL, run  # noqa: E402
from hf_gpt2_lib import hf_logits, hf_model, make_model, probe, train_tokenizer  # noqa: E402

PROMPTS = ["In the beginning", "And God said, Let there be light: and there was light.",
           "the waters", "Ye shall not  eat of it,\tneither shall ye touch it"]
EMBED_LINES = ["In the beginning God created the heaven and the earth.", "light",
               "And the evening and the morning were the first day"]

# name, dtype at save, GPT2Config keys, shard size (None: one file), what to run
CASES = [
    ("f32-tied", torch.float32, {}, None, "all"),
    ("f32-keys", torch.float32,
     dict(tie_word_embeddings=False, n_inner=48, scale_attn_weights=False,
          layer_norm_epsilon=0.05, activation_function="gelu"), None, "all"),
    ("f16-relu", torch.float16, dict(activation_function="relu", n_inner=80), None, "model"),
    ("bf16-untied-reorder", torch.bfloat16,
     dict(tie_word_embeddings=False, reorder_and_upcast_attn=True,
          activation_function="gelu_pytorch_tanh"), None, "model"),
    ("f32-keys-sharded", torch.float32,
     dict(tie_word_embeddings=False, n_inner=48, scale_attn_weights=False,
          layer_norm_epsilon=0.05, activation_function="gelu"), "20KB", "model"),
    ("bf16-sharded", torch.bfloat16, {}, "16KB", "model"),
]
# under the sanitizers (slow programs): F16, and BF16 through shards, only
SANITIZED = bool(os.environ.get("TFM_SANITIZED"))
if SANITIZED:
    CASES = [c for c in CASES if c[0] not in ("bf16-untied-reorder", "f32-keys-sharded")]
# the keys' defaults (from_pretrained overrides): each must change the logits
DEFAULTS = dict(tie_word_embeddings=True, n_inner=None, scale_attn_weights=True,
                layer_norm_epsilon=1e-5, activation_function="gelu_new")

worst = {}


def note(what, err):
    worst[what] = max(worst.get(what, 0.0), float(err))


def check_logits(name, d, m, tok, top):
    rows = [tok(p).input_ids for p in PROMPTS]
    r, got = probe(d, rows, top)
    if r.returncode != 0:
        return [f"io_probe: {r.stderr.strip()}"]
    bad = []
    err = max(np.abs(g - hf_logits(m, ids)).max() for g, ids in zip(got, rows))
    note("logits", err)
    print(f"  {name}: io_probe logits, {len(rows)} rows in one padded batch: "
          f"max |tfm - transformers| = {err:.2e}")
    if not err <= TOL:
        bad.append(f"logits differ from transformers' by {err:.3g}")
    return bad


def keys_matter(name, d, m, keys, tok):
    """Each key set away from its default changes transformers' logits by
    more than 10 x the tolerance (gelu against gelu_new: about 1e-3)."""
    bad = []
    ids = tok(PROMPTS[1]).input_ids
    ref = hf_logits(m, ids)
    for k, v in keys.items():
        if k not in DEFAULTS or k == "n_inner" or v == "gelu_pytorch_tanh":
            continue  # n_inner: the shapes say it; gelu_pytorch_tanh is gelu_new's formula
        if k == "tie_word_embeddings":
            # from_pretrained keeps a file's lm_head.weight whatever the key
            # says: the tied head is the last hidden state times wte
            with torch.no_grad():
                h = m(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
                alt = (h @ m.transformer.wte.weight.T).numpy()
        else:
            alt = hf_logits(hf_model(d, **{k: DEFAULTS[k]}), ids)
        diff = np.abs(alt - ref).max()
        if not diff > 10 * TOL:
            bad.append(f"{k}={v!r}: transformers' logits change by only {diff:.2g} with "
                       f"{k}={DEFAULTS[k]!r} (the test cannot tell it is honoured)")
    return bad


def gen(d, args, prompts):
    r = run([GEN, "-m", d, "--json", "-q"] + args, input="\n".join(prompts) + "\n")
    if r.returncode != 0:
        return r.stderr.strip(), None
    return None, [json.loads(x) for x in r.stdout.splitlines()]


def check_greedy(name, d, m, tok, eos):
    n = 8
    e, outs = gen(d, ["--greedy", "-n", str(n), "--ignore-eos"], PROMPTS)
    if e:
        return [f"tfm-generate --greedy: {e}"]
    m.generation_config.eos_token_id = None  # --ignore-eos on both sides
    bad, err = [], 0.0
    for p, o in zip(PROMPTS, outs):
        ids = tok(p).input_ids
        with torch.no_grad():
            g = m.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=n,
                           pad_token_id=eos)[0]
            lp = torch.log_softmax(m(g[None]).logits[0].double(), -1)
        want = g[len(ids):].tolist()
        if o["ids"] != want:
            bad.append(f"greedy from {p!r}: tfm {o['ids']}, transformers {want}")
            continue
        ref = [lp[len(ids) - 1 + i, t].item() for i, t in enumerate(want)]
        err = max(err, max(abs(a - b) for a, b in zip(o["logprobs"], ref)))
    m.generation_config.eos_token_id = eos
    note("greedy log-probabilities", err)
    print(f"  {name}: tfm-generate --greedy -n {n}: tokens equal transformers' generate on "
          f"{len(PROMPTS)} prompts, log-prob max diff {err:.2e}")
    if not err <= TOL:
        bad.append(f"greedy log-probabilities differ by {err:.3g}")
    return bad


def check_beam(name, d, m, tok, eos, prompts, ignore_eos):
    bad, n = [], 10
    stops = heur = total = 0
    if ignore_eos:
        m.generation_config.eos_token_id = None
    for nb, lp in ((2, 1.0), (4, 0.6)):
        e, outs = gen(d, ["--beam", str(nb), "--lenpen", str(lp), "-n", str(n)] +
                      (["--ignore-eos"] if ignore_eos else []), prompts)
        if e:
            return [f"tfm-generate --beam {nb}: {e}"]
        for p, o in zip(prompts, outs):
            ids = torch.tensor([tok(p).input_ids])
            got = o["ids"]
            for es in ("never", False):
                with torch.no_grad():
                    g = m.generate(ids, do_sample=False, num_beams=nb, max_new_tokens=n,
                                   length_penalty=lp, early_stopping=es,
                                   pad_token_id=eos)[0, ids.shape[1]:].tolist()
                if eos in g and not ignore_eos:
                    g = g[:g.index(eos) + 1]
                same = g == got
                if es == "never":
                    total += 1
                    stops += g[-1:] == [eos]
                    if not same:
                        bad.append(f"--beam {nb} --lenpen {lp} from {p!r}: tfm {got}, "
                                   f"transformers (num_beams={nb}, length_penalty={lp}, "
                                   f"early_stopping='never') {g}")
                else:
                    heur += same
    m.generation_config.eos_token_id = eos
    print(f"  {name}: tfm-generate --beam 2/4 --lenpen 1/0.6 -n {n}"
          f"{' --ignore-eos' if ignore_eos else ''}: tokens equal generate(num_beams, "
          f"length_penalty, early_stopping='never') on {total - len(bad)}/{total} "
          f"({stops} ended at end of text); early_stopping=False (transformers' default) "
          f"agrees on {heur}/{total}")
    return bad


def check_perplexity(name, d, m, tok, eos, top):
    bad = []
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata",
                             "gpt2", "corpus.txt"), encoding="utf-8").read()[:120]
    ids = tok(text).input_ids
    assert len(ids) < m.config.n_positions, len(ids)

    def hf_ppl(seq, first_scored):
        with torch.no_grad():
            lab = torch.tensor([[-100] * first_scored + seq[first_scored:]])
            return float(np.exp(m(torch.tensor([seq]), labels=lab).loss.item()))

    def tfm_ppl(args, inp=None):
        r = run([EVAL, "perplexity", "-m", d, "--json", "-q"] + args, input=inp)
        if r.returncode != 0:
            return r.stderr.strip(), None
        return None, json.loads(r.stdout)

    npy = os.path.join(top, "ppl.npy")
    np.save(npy, np.array(ids, np.int32))
    # the text as one document (the input's last newline is part of it, as
    # tfm reads a file whole): with the end-of-text token before it, and not
    runs = [("the text, end-of-text first", ["-"], text, [eos] + ids, 1),
            ("the text, --no-bos", ["--no-bos", "-"], text, ids, 1),
            ("--tokens, --no-bos", ["--tokens", npy, "--no-bos"], None, ids, 1)]
    for what, args, inp, seq, first in runs:
        e, o = tfm_ppl(args, inp)
        if e:
            bad.append(f"tfm-eval perplexity ({what}): {e}")
            continue
        ref = hf_ppl(seq, first)
        rel = abs(o["perplexity"] - ref) / ref
        note("perplexity (relative)", rel)
        print(f"  {name}: tfm-eval perplexity ({what}) {o['perplexity']:.4f}, "
              f"transformers exp(loss) {ref:.4f} (relative {rel:.1e})")
        if not rel <= TOL or o["tokens"] != len(seq) - first:
            bad.append(f"perplexity ({what}) {o['perplexity']} over {o['tokens']} tokens, "
                       f"transformers {ref} over {len(seq) - first}")
    # transformers' sliding window (its perplexity guide): windows of N
    # tokens every S, each scoring the tokens the last one did not.  Over
    # N + k.S tokens the guide's last window is full, as tfm's always is
    # (tfm_ppl_windows; the guide's last one is shorter when it ends early)
    N, S = 16, 8
    ids = ids[:N + S * ((len(ids) - N) // S)]
    np.save(npy, np.array(ids, np.int32))
    nll, count, prev = 0.0, 0, 0
    for begin in range(0, len(ids), S):
        end = min(begin + N, len(ids))
        trg = end - prev
        lab = torch.tensor([ids[begin:end]])
        lab[:, :-trg] = -100
        with torch.no_grad():
            loss = m(torch.tensor([ids[begin:end]]), labels=lab).loss.item()
        k = int((lab[:, 1:] != -100).sum())
        nll += loss * k
        count += k
        prev = end
        if end == len(ids):
            break
    ref = float(np.exp(nll / count))
    e, o = tfm_ppl(["--tokens", npy, "--no-bos", "--context", str(N), "--stride", str(S)])
    if e:
        return bad + [f"tfm-eval perplexity --context {N} --stride {S}: {e}"]
    rel = abs(o["perplexity"] - ref) / ref
    note("perplexity (relative)", rel)
    print(f"  {name}: tfm-eval perplexity --context {N} --stride {S}: {o['perplexity']:.4f} "
          f"over {o['tokens']} tokens, transformers' sliding window {ref:.4f} over {count} "
          f"(relative {rel:.1e})")
    if not rel <= TOL or o["tokens"] != count:
        bad.append(f"sliding-window perplexity {o['perplexity']} over {o['tokens']}, "
                   f"transformers {ref} over {count}")
    return bad


def check_embed(name, d, m, tok, top):
    bad = []
    L = m.config.n_layer
    inp = "\n".join(EMBED_LINES) + "\n"
    hs, att = [], []
    for line in EMBED_LINES:
        with torch.no_grad():
            o = m(torch.tensor([tok(line).input_ids]), output_hidden_states=True,
                  output_attentions=True)
        hs.append([h[0].numpy() for h in o.hidden_states])
        att.append(torch.stack(o.attentions)[:, 0].numpy())
    err = 0.0
    out = os.path.join(top, "emb.npy")
    for k in range(L + 1):
        r = run([EMBED, "-m", d, "--layers", str(k), "--pool", "none", "-o", out, "-q"],
                input=inp)
        if r.returncode != 0:
            return [f"tfm-embed --layers {k}: {r.stderr.strip()}"]
        got = np.load(out)
        off = np.load(out.replace(".npy", ".offsets.npy"))
        for i in range(len(EMBED_LINES)):
            g = got[off[i]:off[i + 1]]
            if g.shape != hs[i][k].shape:
                bad.append(f"tfm-embed --layers {k} line {i}: shape {g.shape}, "
                           f"transformers {hs[i][k].shape}")
                continue
            err = max(err, np.abs(g - hs[i][k]).max())
    r = run([EMBED, "-m", d, "--pool", "last", "-o", out, "-q"], input=inp)
    if r.returncode != 0:
        return bad + [f"tfm-embed --pool last: {r.stderr.strip()}"]
    last = np.load(out)
    err = max(err, max(np.abs(last[i] - hs[i][L][-1]).max() for i in range(len(EMBED_LINES))))
    note("hidden states", err)
    aerr = 0.0
    for i, line in enumerate(EMBED_LINES):
        a = os.path.join(top, "att.npy")
        r = run([EMBED, "-m", d, "--attention", a, "-o", out, "-q"], input=line + "\n")
        if r.returncode != 0:
            return bad + [f"tfm-embed --attention: {r.stderr.strip()}"]
        got = np.load(a)
        if got.shape != att[i].shape:
            bad.append(f"--attention of line {i}: shape {got.shape}, transformers "
                       f"{att[i].shape}")
            continue
        aerr = max(aerr, np.abs(got - att[i]).max())
    note("attention maps", aerr)
    print(f"  {name}: tfm-embed layers 0..{L} (--pool none, last) max |diff| {err:.2e}, "
          f"--attention max |diff| {aerr:.2e} vs output_hidden_states / output_attentions")
    if not err <= TOL:
        bad.append(f"tfm-embed hidden states differ by {err:.3g}")
    if not aerr <= TOL:
        bad.append(f"tfm-embed attention maps differ by {aerr:.3g}")
    return bad


def eos_model(V, tok, seed):
    """An untied model whose end-of-text row of the head copies the row of
    the token greedy decoding picks most, so beams end there often."""
    m = make_model(V, seed, tie_word_embeddings=False)
    cnt = torch.zeros(V)
    m.generation_config.eos_token_id = None
    with torch.no_grad():
        for p in PROMPTS:
            ids = tok(p).input_ids
            g = m.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=10,
                           pad_token_id=0)
            for t in g[0, len(ids):].tolist():
                cnt[t] += 1
        top = int(cnt[1:].argmax()) + 1
        m.lm_head.weight[0] = m.lm_head.weight[top] + 0.3 * torch.randn(m.config.n_embd)
    m.generation_config.eos_token_id = 0
    return m


def check_config_eos(top, V, tok):
    """config.json's and generation_config.json's eos_token_id (another
    token than the tokenizer's <|endoftext|>) is where transformers'
    generate stops: tfm-generate --greedy stops there too."""
    d = os.path.join(top, "f32-config-eos")
    m = make_model(V, 7)
    m.generation_config.eos_token_id = None
    cnt = torch.zeros(V)
    with torch.no_grad():
        for p in PROMPTS:
            ids = tok(p).input_ids
            for t in m.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=10,
                                pad_token_id=0)[0, len(ids):].tolist():
                cnt[t] += 1
    stop = int(cnt[1:].argmax()) + 1
    m.config.eos_token_id = m.generation_config.eos_token_id = stop
    m.save_pretrained(d)
    tok.save_pretrained(d)
    ref = hf_model(d)
    e, outs = gen(d, ["--greedy", "-n", "10"], PROMPTS)
    if e:
        return [f"tfm-generate: {e}"]
    bad, ended = [], 0
    for p, o in zip(PROMPTS, outs):
        ids = tok(p).input_ids
        with torch.no_grad():
            g = ref.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=10,
                             pad_token_id=0)[0, len(ids):].tolist()
        ended += g[-1:] == [stop]
        if o["ids"] != g:
            bad.append(f"config eos_token_id {stop}: greedy from {p!r}: tfm {o['ids']}, "
                       f"transformers {g}")
    print(f"  f32-config-eos: eos_token_id {stop} in config.json and generation_config.json "
          f"(the tokenizer's is 0): tfm-generate --greedy stops where generate does "
          f"({ended}/{len(PROMPTS)} stopped there)")
    if not ended:
        bad.append(f"no prompt reached eos_token_id {stop}: the check proves nothing")
    return bad


def main():
    for p in (PROBE, GEN, EVAL, EMBED):
        if not os.path.exists(p):
            print(f"missing {p}")
            return 1
    torch.set_num_threads(1)
    top = tempfile.mkdtemp(prefix="hf_gpt2.")
    bad = []
    try:
        _, tok = train_tokenizer(top)
        V, eos = len(tok), tok.eos_token_id
        print(f"  tokenizer: byte-level BPE of {V} tokens (HF tokenizers), "
              f"{tok.eos_token} id {eos}")
        made = {}
        for i, (name, dt, keys, shard, what) in enumerate(CASES):
            d = os.path.join(top, name)
            src = made.get(json.dumps(keys, sort_keys=True))
            m = src if src is not None else make_model(V, 10 + i, **keys)
            made.setdefault(json.dumps(keys, sort_keys=True), m)
            m.to(dt).save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
            m.float()
            tok.save_pretrained(d)
            if shard and not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
                bad.append(f"{name}: save_pretrained(max_shard_size={shard}) wrote one file")
            ref = hf_model(d)
            case = []
            case += check_logits(name, d, ref, tok, top)
            if src is None:
                case += keys_matter(name, d, ref, keys, tok)
            case += check_greedy(name, d, ref, tok, eos)
            if what == "all":
                case += check_beam(name, d, ref, tok, eos, PROMPTS, True)
                case += check_perplexity(name, d, ref, tok, eos, top)
            if what == "all" or not SANITIZED:
                case += check_embed(name, d, ref, tok, top)
            bad += [f"{name}: {b}" for b in case]
        # beams that end at the end of text
        d = os.path.join(top, "f32-eos")
        eos_model(V, tok, 5).save_pretrained(d)
        tok.save_pretrained(d)
        many = PROMPTS + ["And the earth", "Let there be", "and the evening", "He called",
                          "And it was so", "waters under the heaven"]
        bad += [f"f32-eos: {b}" for b in check_beam("f32-eos", d, hf_model(d), tok, eos, many,
                                                    False)]
        bad += check_config_eos(top, V, tok)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print("  largest differences: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
