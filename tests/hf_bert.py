#!/usr/bin/python3
"""HuggingFace BERT checkpoints load as tfm encoders (lib/convert/bert.c).

Random BERT checkpoints are written here in HuggingFace's exact layout (a
safetensors file by hand, HF's tensor names, Linear weights [out, in], the
pooler and cls.* heads, the position_ids buffer, "format": "pt") with a
config.json beside them; transformers itself (BertForPreTraining, or
BertModel for a checkpoint without heads, holding the same tensors, the old
gamma/beta names as transformers renames them) computes a padded batch,
and its MLM logits when the checkpoint has the head, else the tied LM head
tfm gives a BertModel (logits = hidden · word_embeddingsᵀ, which
transformers has no head for), are compared with
the logits of tests/io_probe model-logits, which loads the checkpoint with
tfm_model_load: max |tfm - transformers| <= 1e-4 · max |transformers| over the positions
that are not padding.  Shapes: with and without the "bert." prefix,
LayerNorm weight/bias and the old gamma/beta, each hidden_act tfm takes,
d_ff = 4C and not, 1 to 3 segments, a folder path and a file path.  Also:
tfm-eval info on a checkpoint (tfm_lm_open), the tokenizer from vocab.txt
beside it, and the errors (missing or misshapen tensor, missing or bad
config.json) with their exact messages."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import BertConfig, BertForPreTraining, BertModel

from hf_lib import EVAL, PROBE, TOKENIZE, TOL, write_safetensors  # noqa: F401  (others import them)


def hf_config(s):
    """config.json as HuggingFace writes it for BertConfig."""
    return {"architectures": ["BertForPreTraining"], "attention_probs_dropout_prob": 0.06,
            "hidden_act": s["act"], "hidden_dropout_prob": 0.11, "hidden_size": s["C"],
            "initializer_range": 0.02, "intermediate_size": s["F"],
            "layer_norm_eps": s["eps"], "max_position_embeddings": s["P"],
            "model_type": "bert", "num_attention_heads": s["NH"],
            "num_hidden_layers": s["L"], "pad_token_id": 0,
            "position_embedding_type": "absolute", "torch_dtype": "float32",
            "transformers_version": "4.30.2", "type_vocab_size": s["S"], "use_cache": True,
            "vocab_size": s["V"]}


def random_checkpoint(s, rng):
    """HF BertForPreTraining tensors, name -> float32 array (scaled so that
    every part matters in the output)."""
    C, F_, V, L = s["C"], s["F"], s["V"], s["L"]
    pre = s["prefix"]
    g, b = ("gamma", "beta") if s["gamma"] else ("weight", "bias")
    n = lambda *shape, sd=1.0: (rng.standard_normal(shape) * sd).astype(np.float32)
    t = {}

    def ln(name):
        t[f"{name}.{g}"] = (1 + n(C, sd=0.2)).astype(np.float32)
        t[f"{name}.{b}"] = n(C, sd=0.2)

    def lin(name, out, inp, gain=1.0):
        t[name + ".weight"] = n(out, inp, sd=gain / np.sqrt(inp))  # [out, in]
        t[name + ".bias"] = n(out, sd=0.2)

    e = pre + "embeddings."
    t[e + "word_embeddings.weight"] = n(V, C, sd=0.5)
    t[e + "position_embeddings.weight"] = n(s["P"], C, sd=0.5)
    t[e + "token_type_embeddings.weight"] = n(s["S"], C, sd=0.5)
    ln(e + "LayerNorm")
    for i in range(L):
        p = f"{pre}encoder.layer.{i}."
        for k in ("query", "key", "value"):
            lin(p + "attention.self." + k, C, C)
        lin(p + "attention.output.dense", C, C)
        ln(p + "attention.output.LayerNorm")
        lin(p + "intermediate.dense", F_, C, gain=2.0)   # where GELUs differ
        lin(p + "output.dense", C, F_)
        ln(p + "output.LayerNorm")
    # the pooler and the heads (tfm reads them), a buffer (it does not)
    lin(pre + "pooler.dense", C, C)
    t[e + "position_ids"] = np.arange(s["P"], dtype=np.int64)[None]
    if s["heads"]:
        lin("cls.predictions.transform.dense", C, C)
        ln("cls.predictions.transform.LayerNorm")
        t["cls.predictions.bias"] = n(V, sd=0.2)
        t["cls.predictions.decoder.weight"] = t[e + "word_embeddings.weight"]
        lin("cls.seq_relationship", 2, C)
    return t


transformers.logging.set_verbosity_error()

# hidden_act's functions, for tests/embed_torch.py's own reference
ACTS = {"gelu": F.gelu, "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}


def hf_model(s, t):
    """transformers' model holding the checkpoint's tensors t (float32, eval,
    eager attention): BertForPreTraining with the heads, else BertModel."""
    cfg = {k: v for k, v in hf_config(s).items()
           if k not in ("architectures", "torch_dtype", "transformers_version", "model_type")}
    cls = BertForPreTraining if s["heads"] else BertModel
    m = cls(BertConfig(**cfg, attn_implementation="eager")).eval()
    sd = {}
    for k, v in t.items():
        if k.endswith("position_ids"):
            continue
        k = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", k)
        k = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k)
        if s["heads"] and not k.startswith(("bert.", "cls.")):
            k = "bert." + k
        sd[k] = torch.from_numpy(np.ascontiguousarray(v))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    # the decoder's weight and bias are tied to the embedding and cls.predictions.bias
    missing = [k for k in missing if not k.startswith("cls.predictions.decoder.")]
    assert not missing and not unexpected, (missing, unexpected)
    return m


def hf_run(s, t, ids, seg, lengths):
    """transformers' last hidden states and, with the heads, MLM logits (else
    None), and the word embeddings, float64."""
    m = hf_model(s, t)
    ids, seg = torch.from_numpy(ids).long(), torch.from_numpy(seg).long()
    mask = (torch.arange(ids.shape[1])[None] < torch.from_numpy(lengths)[:, None]).long()
    with torch.no_grad():
        o = m(input_ids=ids, token_type_ids=seg, attention_mask=mask, output_hidden_states=True)
    hidden = o.hidden_states[-1].double()
    logits = o.prediction_logits.double() if s["heads"] else None
    E = (m.bert if s["heads"] else m).embeddings.word_embeddings.weight.double().detach()
    return hidden, logits, E


CASES = [
    # BertForPreTraining as published: "bert." prefix, weight/bias, a folder
    dict(name="bert. prefix, folder, gelu, d_ff 48", prefix="bert.", gamma=False, C=32,
         NH=4, L=2, F=48, P=16, S=2, V=50, eps=1e-12, act="gelu", heads=True, folder=True,
         vocab=True, B=3, T=12),
    # an old conversion: LayerNorm.gamma/beta, tanh GELU, d_ff = 4C, one segment
    dict(name="bert. prefix, gamma/beta, gelu_new, 1 segment", prefix="bert.", gamma=True,
         C=24, NH=3, L=3, F=96, P=20, S=1, V=37, eps=1e-3, act="gelu_new", heads=True,
         folder=False, vocab=False, B=2, T=20),
    # BertModel saved alone: no prefix, no heads, relu, three segments
    dict(name="no prefix, relu, 3 segments", prefix="", gamma=False, C=16, NH=2, L=1, F=40,
         P=12, S=3, V=29, eps=1e-12, act="relu", heads=False, folder=False, vocab=True,
         B=3, T=9),
]


def write_case(d, s, rng):
    """The checkpoint in d; returns (path to give tfm, tensors)."""
    t = random_checkpoint(s, rng)
    os.makedirs(d, exist_ok=True)
    st = os.path.join(d, "model.safetensors" if s["folder"] else "weights.safetensors")
    write_safetensors(st, t, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(s), f, indent=2, sort_keys=True)
    if s["vocab"]:
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(20)]
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("".join(w + "\n" for w in words))
    return (d if s["folder"] else st), t


def make_batch(s, rng):
    B, T = s["B"], s["T"]
    lengths = np.array([T, max(1, T - 5), 1][:B], dtype=np.int32)
    ids = rng.integers(0, s["V"], (B, T)).astype(np.int32)
    seg = np.zeros((B, T), np.int32)
    for r in range(B):
        ids[r, lengths[r]:] = 0              # [PAD]
        if s["S"] > 1 and lengths[r] > 1:
            cut = rng.integers(1, lengths[r])
            seg[r, cut:lengths[r]] = rng.integers(1, s["S"])
    return ids, seg, lengths


def probe(path, d, ids, seg, lengths):
    B, T = ids.shape
    bf, of = os.path.join(d, "batch.bin"), os.path.join(d, "logits.bin")
    with open(bf, "wb") as f:
        f.write(np.array([B, T], np.int32).tobytes() + ids.tobytes() + seg.tobytes()
                + lengths.astype(np.int32).tobytes())
    r = subprocess.run([PROBE, "model-logits", path, bf, of], capture_output=True, text=True)
    return r, of


def check_case(s, d, rng):
    bad = []
    path, t = write_case(d, s, rng)
    ids, seg, lengths = make_batch(s, rng)
    r, of = probe(path, d, ids, seg, lengths)
    if r.returncode != 0:
        return [f"io_probe failed: {r.stderr.strip()}"], ""
    want_desc = (f"kind encoder positions learned norm post "
                 f"act {dict(gelu='gelu_exact', gelu_new='gelu_tanh', relu='relu')[s['act']]} "
                 f"ln_eps {np.float32(s['eps']):.9g} n_layer {s['L']} n_head {s['NH']} "
                 f"n_embd {s['C']} d_ff {s['F']} block_size {s['P']} vocab_size {s['V']} "
                 f"segments {s['S']} emb_norm 1 tied 1 bias 1 "
                 f"tokenizer {'wordpiece 25' if s['vocab'] else 'none 0'}")
    got_desc = r.stdout.strip()
    # %.9g of the float epsilon against numpy's: compare the numbers
    gd, wd = got_desc.split(), want_desc.split()
    if len(gd) != len(wd) or any(a != b and not (k > 0 and gd[k - 1] == "ln_eps"
                                                 and np.isclose(float(a), float(b), rtol=1e-6))
                                 for k, (a, b) in enumerate(zip(gd, wd))):
        bad.append(f"description:\n  got  {got_desc}\n  want {want_desc}")
    B, T, V = s["B"], s["T"], s["V"]
    got = np.fromfile(of, np.float32).reshape(B, T, V).astype(np.float64)
    hidden, logits, E = hf_run(s, t, ids, seg, lengths)
    want = (logits if logits is not None else hidden @ E.T).numpy()
    valid = np.arange(T)[None] < lengths[:, None]
    err = np.abs(got - want)[valid].max()
    scale = np.abs(want[valid]).max()
    if not err <= TOL * scale:
        bad.append(f"logits: max |tfm - transformers| = {err:.3g}, {err / scale:.3g} of max |transformers| "
                   f"{scale:.3g} (tolerance {TOL})")
    return bad, f"max |tfm - transformers| / max |transformers| = {err / scale:.2g}"


def expect_error(what, path, d, message):
    """io_probe on path must fail with exactly 'io_probe: ' + message."""
    ids = np.zeros((1, 2), np.int32)
    r, _ = probe(path, d, ids, ids, np.array([2], np.int32))
    got = r.stderr.strip()
    want = "io_probe: " + message
    if r.returncode != 1 or got != want:
        return [f"{what}: exit {r.returncode}\n  got  {got}\n  want {want}"]
    return []


def line_col(text, needle):
    i = text.index(needle)
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


def check_errors(top, rng):
    bad = []
    s = dict(CASES[0], L=2)
    d = os.path.join(top, "err")
    path, t = write_case(d, s, rng)
    st = os.path.join(d, "model.safetensors")
    cfg = os.path.join(d, "config.json")

    def rewrite(tensors):
        write_safetensors(st, tensors, {"format": "pt"})

    # a missing core tensor, named with the shape config.json implies
    t2 = dict(t)
    del t2["bert.encoder.layer.1.attention.self.key.weight"]
    rewrite(t2)
    bad += expect_error("missing tensor", path, d,
                        f"{st}: no tensor 'bert.encoder.layer.1.attention.self.key.weight': "
                        f"a BERT checkpoint needs it, F32 [32, 32]")
    # a missing LayerNorm: both spellings named
    t2 = dict(t)
    del t2["bert.encoder.layer.0.output.LayerNorm.weight"]
    rewrite(t2)
    bad += expect_error("missing norm", path, d,
                        f"{st}: no tensor 'bert.encoder.layer.0.output.LayerNorm.weight' "
                        f"(nor 'bert.encoder.layer.0.output.LayerNorm.gamma'): a BERT "
                        f"checkpoint needs it, F32 [32]")
    # a misshapen one: intermediate.dense stored [in, out]
    t2 = dict(t)
    w = "bert.encoder.layer.0.intermediate.dense.weight"
    t2[w] = np.ascontiguousarray(t[w].T)
    rewrite(t2)
    bad += expect_error("misshapen tensor", path, d,
                        f"{st}: tensor '{w}' is F32 [32, 48] but config.json implies "
                        f"F32 [48, 32]")
    # another dtype
    t2 = dict(t)
    w = "bert.embeddings.token_type_embeddings.weight"
    t2[w] = t[w].astype(np.int64)
    rewrite(t2)
    bad += expect_error("dtype", path, d,
                        f"{st}: tensor '{w}' is I64 [2, 32] but config.json implies "
                        f"F32 [2, 32]")
    # more layers in the file than config.json says
    rewrite(t)
    c1 = dict(hf_config(s), num_hidden_layers=1)
    with open(cfg, "w") as f:
        json.dump(c1, f)
    bad += expect_error("extra layer", path, d,
                        f"{st}: the checkpoint has a layer 1 (tensor "
                        f"'bert.encoder.layer.1.attention.self.query.weight') but config.json's "
                        f"num_hidden_layers is 1")
    # config.json: a missing key, a bad value, bad JSON, none at all
    c1 = hf_config(s)
    del c1["layer_norm_eps"]
    with open(cfg, "w") as f:
        json.dump(c1, f, indent=2)
    bad += expect_error("missing key", path, d, f"{cfg}: layer_norm_eps is missing")
    for key, val, msg in (("hidden_act", "silu", "hidden_act 'silu' is not supported (tfm has "
                                                 "gelu, gelu_new and relu)"),
                          ("hidden_size", "32", "hidden_size must be a number, not a string"),
                          ("position_embedding_type", "relative_key",
                           "position_embedding_type 'relative_key' is not supported "
                           "(only absolute)")):
        c1 = dict(hf_config(s), **{key: val})
        text = json.dumps(c1, indent=2)
        with open(cfg, "w") as f:
            f.write(text)
        ln, col = line_col(text, f'"{key}": "{val}"')
        col += len(f'"{key}": ')
        bad += expect_error(f"config.json {key}", path, d, f"{cfg}:{ln}:{col}: {msg}")
    c1 = dict(hf_config(s), num_attention_heads=5)
    with open(cfg, "w") as f:
        json.dump(c1, f)
    bad += expect_error("heads", path, d,
                        f"{cfg}: model: n_embd 32 is not a multiple of n_head 5")
    text = json.dumps(hf_config(s), indent=2)
    with open(cfg, "w") as f:
        f.write(text[:-2] + ",\n  ]\n}\n")       # a stray ']'
    r, _ = probe(path, d, np.zeros((1, 1), np.int32), np.zeros((1, 1), np.int32),
                 np.array([1], np.int32))
    if r.returncode != 1 or not r.stderr.startswith(f"io_probe: {cfg}:{text.count(chr(10)) + 1}:"):
        bad.append(f"bad JSON: exit {r.returncode}: {r.stderr.strip()} "
                   f"(want {cfg}:{text.count(chr(10)) + 1}:COL: ...)")
    os.remove(cfg)
    msg = (f"{cfg}: no such file (a HuggingFace BERT checkpoint needs the config.json "
           f"beside it)")
    bad += expect_error("no config.json", path, d, msg)
    # the same through tfm_lm_open (tfm-eval)
    r = subprocess.run([EVAL, "info", "-m", path], capture_output=True, text=True)
    if r.returncode != 1 or r.stderr.strip() != "tfm-eval: " + msg:
        bad.append(f"tfm-eval info without config.json: exit {r.returncode}: "
                   f"{r.stderr.strip()}")
    return bad


def check_lm_open(top, rng):
    """tfm-eval info opens the checkpoint through tfm_lm_open."""
    s = CASES[0]
    path, _ = write_case(os.path.join(top, "info"), s, rng)
    r = subprocess.run([EVAL, "info", "-m", path, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return [f"tfm-eval info: {r.stderr.strip()}"]
    j = json.loads(r.stdout)
    want = dict(kind="bert-huggingface", model_kind="encoder", positions="learned",
                n_layer=s["L"], n_head=s["NH"], n_embd=s["C"], block_size=s["P"],
                vocab_size=s["V"], norm="post", tied=True, tokenizer="wordpiece",
                tokenizer_vocab=25, eos=3, checksum="none",
                # config.json's hidden_dropout_prob (embeddings, residual
                # branches) and attention_probs_dropout_prob, not HF's 0.1
                dropout=0.11, attn_dropout=0.06, emb_dropout=0.11, ffn_dropout=0,
                final_dropout=0, forced_eos=None)
    diff = {k: (j.get(k), v) for k, v in want.items() if j.get(k) != v}
    return [f"tfm-eval info: (got, want) {diff}"] if diff else []


def check_fill(top, rng):
    """tfm-eval fill on a checkpoint whose vocab.txt covers its vocabulary:
    the masks' top-k ids and probabilities against PyTorch's softmax of the
    MLM logits (as HF's fill-mask pipeline computes them), to 1e-4; a
    checkpoint without cls.predictions is refused."""
    bad = []
    s = dict(CASES[0], V=25)
    path, t = write_case(os.path.join(top, "fill"), s, rng)
    K = 5
    r = subprocess.run([EVAL, "fill", "-m", path, "--top-k", str(K), "--json", "--threads", "1"],
                       input="w1 [MASK] w3 [MASK]\n", capture_output=True, text=True)
    if r.returncode != 0:
        return [f"tfm-eval fill: exit {r.returncode}: {r.stderr.strip()}"], ""
    got = json.loads(r.stdout)
    # [CLS] w1 [MASK] w3 [MASK] [SEP]; vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK] w0 ...
    ids = np.array([[2, 6, 4, 8, 4, 3]], np.int32)
    _, logits, _ = hf_run(s, t, ids, np.zeros_like(ids), np.array([6], np.int32))
    prob = torch.softmax(logits[0], -1).numpy()
    worst = 0.0
    if [m["position"] for m in got["masks"]] != [2, 4]:
        bad.append(f"mask positions {[m['position'] for m in got['masks']]}, want [2, 4]")
    for m in got["masks"]:
        want = np.argsort(-prob[m["position"]], kind="stable")[:K]
        gids = [c["token"] for c in m["candidates"]]
        gp = np.array([c["score"] for c in m["candidates"]])
        if gids != want.tolist():
            bad.append(f"position {m['position']}: ids {gids}, torch {want.tolist()}")
            continue
        d = np.abs(gp - prob[m["position"]][want]).max()
        worst = max(worst, d)
        if not d <= TOL:
            bad.append(f"position {m['position']}: max |p_tfm - p_torch| = {d:.3g}")
        if [c["token_str"] for c in m["candidates"]][:1] != [
                (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                 + [f"w{i}" for i in range(20)])[want[0]]]:
            bad.append(f"token_str {m['candidates'][0]['token_str']} for id {want[0]}")
    # BertModel saved alone: no MLM head
    path, _ = write_case(os.path.join(top, "fill-nohead"), dict(CASES[2], V=25), rng)
    r = subprocess.run([EVAL, "fill", "-m", path], input="w1 [MASK]\n", capture_output=True,
                       text=True)
    if r.returncode != 1 or "has no masked-LM head" not in r.stderr:
        bad.append(f"fill without an MLM head: exit {r.returncode}: {r.stderr.strip()}")
    return bad, f"max |p_tfm - p_torch| = {worst:.2g}"


def check_case_settings(top, rng):
    """vocab.txt with tokenizer_config.json: do_lower_case false keeps the
    case (bert-base-cased), strip_accents true strips without lowercasing,
    no file is uncased BERT's (lowercase, accents stripped), a setting tfm
    cannot honour is refused naming the file and key."""
    s = CASES[0]
    d = os.path.join(top, "cased")
    write_case(d, s, rng)
    with open(os.path.join(d, "vocab.txt"), "a") as f:
        f.write("Hello\nhello\ncafé\ncafe\n")       # ids 25 .. 28
    tc = os.path.join(d, "tokenizer_config.json")
    bad = []
    for cfg, want in ((None, [26, 28]), ({"do_lower_case": True}, [26, 28]),
                      ({"do_lower_case": False}, [25, 27]),
                      ({"do_lower_case": False, "strip_accents": True}, [25, 28]),
                      ({"do_lower_case": False, "tokenize_chinese_chars": True,
                        "model_max_length": 512, "tokenizer_class": "BertTokenizer"}, [25, 27])):
        if os.path.exists(tc):
            os.remove(tc)
        if cfg is not None:
            with open(tc, "w") as f:
                json.dump(cfg, f)
        # the model's tokenizer, the folder's, and the folder given to -t
        for how in ("model-encode", "folder-encode", "tfm-tokenize -t"):
            cmd = ([TOKENIZE, "encode", "-q", "-t", d] if how.startswith("tfm-")
                   else [PROBE, how, d])
            r = subprocess.run(cmd, input="Hello café\n", capture_output=True, text=True)
            got = [int(x) for x in r.stdout.split()] if r.returncode == 0 else r.stderr.strip()
            if got != want:
                bad.append(f"{how}, tokenizer_config.json {cfg}: 'Hello café' gives {got}, "
                           f"want {want}")
    for cfg, key, msg in (({"do_basic_tokenize": False}, "do_basic_tokenize",
                           "do_basic_tokenize false is not supported"),
                          ({"never_split": ["Hello"]}, "never_split",
                           "never_split is not supported"),
                          ({"do_lower_case": "no"}, "do_lower_case", "do_lower_case")):
        with open(tc, "w") as f:
            json.dump(cfg, f)
        r = subprocess.run([PROBE, "model-encode", d], input="Hello\n", capture_output=True,
                           text=True)
        if r.returncode != 1 or f"{tc}:1:" not in r.stderr or msg not in r.stderr:
            bad.append(f"tokenizer_config.json {cfg}: exit {r.returncode}: {r.stderr.strip()!r}")
    return bad, "do_lower_case, strip_accents from tokenizer_config.json"


def main():
    for p in (PROBE, EVAL):
        if not os.path.exists(p):
            print(f"SKIP: {p} not built")
            return 77
    rng = np.random.default_rng(7)
    failed = 0
    top = tempfile.mkdtemp(prefix="hf_bert.")
    try:
        checks = [(s["name"], lambda s=s, i=i: check_case(s, os.path.join(top, f"c{i}"), rng))
                  for i, s in enumerate(CASES)]
        checks += [("tfm-eval info", lambda: check_lm_open(top, rng)),
                   ("tfm-eval fill", lambda: check_fill(top, rng)),
                   ("tokenizer_config.json", lambda: check_case_settings(top, rng)),
                   ("errors", lambda: check_errors(top, rng))]
        for name, fn in checks:
            bad, note = fn(), ""
            if isinstance(bad, tuple):
                bad, note = bad
            print(f"{'FAIL' if bad else 'ok'} {name}{': ' + note if note else ''}")
            for b in bad:
                print(f"  {b}")
            failed += bool(bad)
    finally:
        shutil.rmtree(top)
    print(f"hf_bert: {len(checks) - failed}/{len(checks)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
