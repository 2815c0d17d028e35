#!/usr/bin/python3
"""RoBERTa and XLM-RoBERTa folders as transformers writes them, judged by
transformers (lib/convert/roberta.c over lib/convert/bert.c).

Small random models made by transformers itself (RobertaModel,
XLMRobertaModel, RobertaForMaskedLM tied and untied,
RobertaForSequenceClassification; save_pretrained in float32 and
bfloat16) with their tokenizers (RoBERTa: a byte-level BPE trained by HF
tokenizers, XLM-R: a SentencePiece Unigram, both saved by transformers as
tokenizer.json), every parameter moved away from its initial value so that
each tensor's mapping shows:
- tfm-tokenize -t FOLDER: the ids of AutoTokenizer, without and with the
  <s> ... </s> its post-processor adds (--add-special), <mask> included;
- tfm-embed: the hidden states of every layer (--layers N --pool none) and
  mean pooling against output_hidden_states, a batch of unequal lengths,
  to 1e-4 (positions are numbered from padding_idx + 1 there);
- tfm-eval fill: the top-k of each <mask> against RobertaForMaskedLM's
  softmax; tfm-eval classify against RobertaForSequenceClassification's
  (labels out of sorted order);
- a folder BERT's names would mis-read (RoFormer's rotary positions) and
  a RoBERTa head tfm does not read: refused, one message naming them."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import sentencepiece
import transformers
from tokenizers import ByteLevelBPETokenizer
from transformers import (AutoTokenizer, RoFormerConfig, RoFormerModel, RobertaConfig,
                          RobertaForMaskedLM, RobertaForSequenceClassification,
                          RobertaForTokenClassification, RobertaModel, RobertaTokenizer,
                          XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizer)

SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
from hf_lib import EMBED, EVAL, TOKENIZE, TOL, refusals, run  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

CORPUS = os.path.join(SRC, "testdata", "gpt2", "corpus.txt")
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
TEXTS = ["In the beginning God created the heaven and the earth.",
         "And the earth was without form, and void",
         "light", "And God saw the light, that it was good: and God divided the light "
         "from the darkness.", "Let there be a firmament in the midst of the waters."]
MASKED = ["In the <mask> God created the heaven and the earth.",
          "And the <mask> was without form, and <mask>", "<mask> light"]


def corpus_lines(n):
    with open(CORPUS, encoding="utf-8") as f:
        return [x.strip() for x in f if x.strip()][:n]


def roberta_tokenizer(top):
    raw = os.path.join(top, "rtok")
    os.makedirs(raw, exist_ok=True)
    t = ByteLevelBPETokenizer()
    t.train([CORPUS], vocab_size=300, min_frequency=2, special_tokens=SPECIALS,
            show_progress=False)
    t.save_model(raw)
    return RobertaTokenizer.from_pretrained(raw)


def xlmr_tokenizer(top):
    raw = os.path.join(top, "xtok")
    os.makedirs(raw, exist_ok=True)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines(3000)), model_prefix=os.path.join(top, "xspm"),
        vocab_size=200, model_type="unigram", num_threads=1, minloglevel=2)
    shutil.copy(os.path.join(top, "xspm.model"), os.path.join(raw, "sentencepiece.bpe.model"))
    return XLMRobertaTokenizer.from_pretrained(raw)


def config(cls, tok, **kw):
    c = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=66, type_vocab_size=1,
             pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
             eos_token_id=tok.eos_token_id, attn_implementation="eager")
    c.update(kw)
    return cls(**c)


def randomized(m, seed):
    """every parameter well away from its initial value (layer norms' gains
    about 1), the padding row and token type included"""
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if ("LayerNorm" in n or "layer_norm" in n) and n.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 0.3)
    return m.eval()


def save(model, tok, d, dtype=None):
    os.makedirs(d, exist_ok=True)
    (model.to(dtype) if dtype else model).save_pretrained(d)
    model.float()
    tok.save_pretrained(d)
    return d


def reference(cls, d):
    return cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()


def tfm_embed(d, lines, top, *opts):
    inp, out = os.path.join(top, "in.txt"), os.path.join(top, "e.npy")
    with open(inp, "w") as f:
        f.write("".join(x + "\n" for x in lines))
    r = run([EMBED, "-m", d, "-q", "--threads", "2", "-o", out, *opts, inp])
    if r.returncode != 0:
        return None, r.stderr.strip()
    v = np.load(out)
    off = os.path.join(top, "e.offsets.npy")
    if os.path.exists(off):
        o = np.load(off)
        os.remove(off)
        return [v[o[i]:o[i + 1]] for i in range(len(o) - 1)], None
    return v, None


def tfm_ids(d, texts, *extra):
    r = run([TOKENIZE, "encode", "-q", "-t", d, "--format", "jsonl", *extra],
            input="".join(t + "\n" for t in texts))
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [json.loads(x)["ids"] for x in r.stdout.splitlines()], None


def check_tokens(name, d):
    hf = AutoTokenizer.from_pretrained(d)
    texts = TEXTS + MASKED + corpus_lines(40)[20:]
    bad = []
    for extra, special in (((), False), (("--add-special",), True)):
        got, e = tfm_ids(d, texts, "--split-special", *extra)
        if e:
            return [f"{name}: tfm-tokenize {' '.join(extra)}: {e}"], ""
        for t, g in zip(texts, got):
            want = hf(t, add_special_tokens=special).input_ids
            if g != want:
                bad.append(f"{name}: {t!r}{' (special)' if special else ''}: tfm {g[:16]}, "
                           f"AutoTokenizer {want[:16]}")
    return bad, f"{len(texts)} texts, ids equal without and with <s> ... </s>"


def check_embed(name, d, top, cls):
    ref = reference(cls, d)
    tok = AutoTokenizer.from_pretrained(d)
    with torch.no_grad():
        outs = [ref(**tok(x, return_tensors="pt"), output_hidden_states=True) for x in TEXTS]
    L = len(outs[0].hidden_states) - 1
    bad, worst = [], 0.0
    for layer in range(L + 1):
        got, e = tfm_embed(d, TEXTS, top, "--layers", str(layer), "--pool", "none")
        if e:
            return [f"{name}: tfm-embed --layers {layer}: {e}"], ""
        for i, o in enumerate(outs):
            want = o.hidden_states[layer][0].numpy()
            if got[i].shape != want.shape:
                bad.append(f"{name}: layer {layer} line {i + 1}: shape {got[i].shape}, "
                           f"transformers {want.shape}")
                continue
            worst = max(worst, float(np.abs(got[i] - want).max()))
    got, e = tfm_embed(d, TEXTS, top, "--pool", "mean")
    if e:
        return [f"{name}: tfm-embed --pool mean: {e}"], ""
    want = np.stack([o.hidden_states[L][0].mean(0).numpy() for o in outs])
    worst = max(worst, float(np.abs(got - want).max()))
    if not worst <= TOL:
        bad.append(f"{name}: hidden states max |tfm - transformers| = {worst:.3g}")
    return bad, f"{len(TEXTS)} texts, layers 0-{L}, mean pooling: max diff {worst:.2e}"


def check_fill(name, d):
    ref = reference(RobertaForMaskedLM, d)
    tok = AutoTokenizer.from_pretrained(d)
    K = 5
    r = run([EVAL, "fill", "-m", d, "--top-k", str(K), "--json", "--threads", "1", "-q"],
            input="".join(x + "\n" for x in MASKED))
    if r.returncode != 0:
        return [f"{name}: tfm-eval fill: {r.stderr.strip()}"], ""
    got = [json.loads(x) for x in r.stdout.splitlines()]
    bad, worst, n = [], 0.0, 0
    for g, line in zip(got, MASKED):
        enc = tok(line, return_tensors="pt")
        with torch.no_grad():
            prob = ref(**enc).logits[0].softmax(-1).numpy()
        pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero().flatten().tolist()
        if [m["position"] for m in g["masks"]] != pos:
            bad.append(f"{name}: {line!r}: mask positions {[m['position'] for m in g['masks']]}"
                       f", transformers {pos}")
            continue
        for m in g["masks"]:
            n += 1
            want = np.argsort(-prob[m["position"]], kind="stable")[:K].tolist()
            ids = [c["token"] for c in m["candidates"]]
            if ids != want:
                bad.append(f"{name}: {line!r} position {m['position']}: {ids}, "
                           f"transformers {want}")
                continue
            worst = max(worst, max(abs(c["score"] - prob[m["position"], c["token"]])
                                   for c in m["candidates"]))
    if len(got) != len(MASKED):
        bad.append(f"{name}: {len(got)} answers for {len(MASKED)} lines")
    if not worst <= TOL:
        bad.append(f"{name}: fill probabilities differ by {worst:.3g}")
    return bad, f"top-{K} of {n} masks equal, max diff {worst:.2e}"


def check_classify(name, d):
    ref = reference(RobertaForSequenceClassification, d)
    tok = AutoTokenizer.from_pretrained(d)
    r = run([EVAL, "classify", "-m", d, "--json", "--top-k", "100", "--threads", "1", "-q"],
            input="".join(x + "\n" for x in TEXTS))
    if r.returncode != 0:
        return [f"{name}: tfm-eval classify: {r.stderr.strip()}"], ""
    got = [json.loads(x) for x in r.stdout.splitlines()]
    bad, worst = [], 0.0
    id2label = ref.config.id2label
    for i, (g, t) in enumerate(zip(got, TEXTS)):
        with torch.no_grad():
            p = ref(**tok(t, return_tensors="pt")).logits[0].softmax(-1).numpy()
        want = {id2label[k]: float(p[k]) for k in range(len(p))}
        have = {c["label"]: c["probability"] for c in g["top"]}
        if set(have) != set(want):
            bad.append(f"{name}: line {i + 1}: labels {sorted(have)}, transformers "
                       f"{sorted(want)}")
            continue
        worst = max(worst, max(abs(have[k] - want[k]) for k in have))
        if g["label"] != id2label[int(p.argmax())]:
            bad.append(f"{name}: line {i + 1}: label {g['label']}, transformers "
                       f"{id2label[int(p.argmax())]}")
    if len(got) != len(TEXTS):
        bad.append(f"{name}: {len(got)} answers for {len(TEXTS)} texts")
    if not worst <= TOL:
        bad.append(f"{name}: classify probabilities differ by {worst:.3g}")
    return bad, f"{len(got)} texts, max diff {worst:.2e}"


def check_refused(top, rtok):
    """Encoders whose tensors look like BERT's but compute otherwise, and a
    RoBERTa head tfm does not read: one message naming the architecture
    (and what tfm reads), from tfm-embed and tfm-eval, exit 1."""
    small = dict(vocab_size=len(rtok), max_position_embeddings=66)
    cases = [
        ("RoFormerModel", RoFormerModel(RoFormerConfig(embedding_size=32, hidden_size=32,
                                                       num_hidden_layers=2,
                                                       num_attention_heads=4,
                                                       intermediate_size=48, **small)),
         ["'RoFormerModel'", "'roformer'", "RoBERTa", "ALBERT"]),
        ("RobertaForTokenClassification",
         RobertaForTokenClassification(config(RobertaConfig, rtok, num_labels=3)),
         ["RobertaForTokenClassification", "RobertaForSequenceClassification"]),
    ]
    bad = []
    for name, model, pieces in cases:
        d = save(model.eval(), rtok, os.path.join(top, "refuse-" + name))
        out = os.path.join(top, "never.npy")
        bad += refusals(name, pieces,
                        [("tfm-embed", run([EMBED, "-m", d, "-q", "-o", out], input="hello\n")),
                         ("tfm-eval", run([EVAL, "info", "-m", d]))])
        if os.path.exists(out):
            bad.append(f"{name}: tfm-embed wrote {out}")
    return bad, f"{len(cases)} folders refused by name"


def main():
    for p in (EMBED, EVAL, TOKENIZE):
        if not os.path.exists(p):
            print(f"SKIP: {p} not built")
            return 77
    torch.set_num_threads(1)
    top = tempfile.mkdtemp(prefix="hf_roberta.")
    checks = []
    try:
        rtok, xtok = roberta_tokenizer(top), xlmr_tokenizer(top)
        rob = randomized(RobertaModel(config(RobertaConfig, rtok)), 1)
        for dt, dn in ((None, "f32"), (torch.bfloat16, "bf16")):
            d = save(rob, rtok, os.path.join(top, f"roberta-{dn}"), dt)
            checks.append((f"RobertaModel {dn}",
                           lambda d=d, dn=dn: check_embed(f"roberta {dn}", d, top, RobertaModel)))
        d = os.path.join(top, "roberta-f32")
        checks.append(("RoBERTa tokenizer (byte-level BPE)", lambda d=d: check_tokens("roberta", d)))
        # pad_token_id 3 (<unk>, which byte-level BPE never gives, as HF
        # numbers every token but padding): the positions start at row 4
        d = save(randomized(RobertaModel(config(RobertaConfig, rtok, pad_token_id=3,
                                                max_position_embeddings=70)), 2),
                 rtok, os.path.join(top, "roberta-pad3"))
        checks.append(("RobertaModel pad_token_id 3, 70 positions",
                       lambda d=d: check_embed("pad 3", d, top, RobertaModel)))
        d = save(randomized(XLMRobertaModel(config(XLMRobertaConfig, xtok)), 3), xtok,
                 os.path.join(top, "xlmr-f32"))
        checks.append(("XLMRobertaModel f32",
                       lambda d=d: check_embed("xlm-r", d, top, XLMRobertaModel)))
        checks.append(("XLM-R tokenizer (SentencePiece Unigram)",
                       lambda d=d: check_tokens("xlm-r", d)))
        for tie in (True, False):
            mlm = randomized(RobertaForMaskedLM(config(RobertaConfig, rtok,
                                                       tie_word_embeddings=tie)), 4)
            d = save(mlm, rtok, os.path.join(top, f"mlm-{tie}"))
            checks.append((f"RobertaForMaskedLM tied {tie}",
                           lambda d=d, t=tie: check_fill(f"mlm tied {t}", d)))
        d = os.path.join(top, "mlm-True")
        checks.append(("RobertaForMaskedLM's encoder in tfm-embed",
                       lambda d=d: check_embed("mlm", d, top, RobertaModel)))
        lab = {0: "positive", 1: "negative", 2: "neutral"}
        sc = randomized(RobertaForSequenceClassification(
            config(RobertaConfig, rtok, num_labels=3, id2label=lab,
                   label2id={v: k for k, v in lab.items()})), 5)
        d = save(sc, rtok, os.path.join(top, "seq"))
        checks.append(("RobertaForSequenceClassification", lambda d=d: check_classify("seq", d)))
        checks.append(("folders tfm must refuse", lambda: check_refused(top, rtok)))
        failed = 0
        for name, fn in checks:
            bad, note = fn()
            if bad:
                failed += 1
                print(f"FAIL {name}")
                for b in bad[:8]:
                    print("  " + b)
            else:
                print(f"ok {name}: {note}")
        print(f"hf_roberta: {len(checks) - failed}/{len(checks)} passed")
        return 1 if failed else 0
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
