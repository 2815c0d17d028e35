#!/usr/bin/python3
"""BERT folders as transformers writes them, judged by transformers.

Small random models made by transformers itself (BertConfig; BertModel,
BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification,
BertForQuestionAnswering; save_pretrained in float32, float16 and bfloat16,
one file and sharded), with a BertTokenizerFast saved beside them, and
every program against the same model in transformers (float32, eager
attention) on the same inputs, to 1e-4:
- tfm-embed: the hidden states of every layer (--layers N --pool none)
  against output_hidden_states, padding included (a batch of unequal
  lengths), pairs (A<TAB>B: token_type_ids); cls, mean, max and
  mean-sqrt-len pooling of them; the attention maps (--attention) against
  output_attentions;
- tfm-eval fill: the top-k of each [MASK] against BertForMaskedLM's softmax,
  tied and untied (tie_word_embeddings false: cls.predictions.decoder);
- tfm-eval classify (labels from id2label, not in sorted order; and
  regression), tag and span against the heads' logits;
- config.json: each hidden_act tfm reads; keys tfm cannot honour are
  refused naming the key."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import (BertConfig, BertForMaskedLM, BertForQuestionAnswering,
                          BertForSequenceClassification, BertForTokenClassification,
                          BertModel, BertTokenizerFast)

from hf_lib import EMBED, EVAL, TOL, TRAIN, refusals, run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
transformers.logging.set_verbosity_error()

WORDS = ("the a cat dog sat ran on in mat park big red house who what where is was "
         "hello world bird sang tree green small old man woman saw city river boat "
         "##s ##ed ##ing , . ? !").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
TEXTS = ["the cat sat on the mat .", "a big red dog ran in the park", "hello world",
         "who saw the old man ?", "the small bird sang in the green tree !",
         "where is the boat ? the river was big .", "cats dogs sang", "what"]
PAIRS = [("the cat sat", "a dog ran in the park ."), ("hello", "the old woman saw the city")]


def config(**kw):
    c = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=48, max_position_embeddings=40,
             type_vocab_size=2, attn_implementation="eager")
    c.update(kw)
    return BertConfig(**c)


def save(model, d, dtype=None, shard=None):
    """model saved to d (in dtype; sharded at shard) with the tokenizer."""
    os.makedirs(d, exist_ok=True)
    m = model.to(dtype) if dtype else model
    kw = {"max_shard_size": shard} if shard else {}
    m.save_pretrained(d, **kw)
    tok_src = os.path.join(os.path.dirname(d.rstrip("/")), "vocab.txt")
    BertTokenizerFast(tok_src, do_lower_case=True).save_pretrained(d)
    model.float()
    return d


def reference(cls, d):
    """The folder as transformers reads it, in float32 and eval mode."""
    return cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()


def tok(d):
    return BertTokenizerFast.from_pretrained(d)


def tfm_embed(d, lines, top, *opts):
    inp = os.path.join(top, "in.txt")
    with open(inp, "w") as f:
        f.write("".join(x + "\n" for x in lines))
    out = os.path.join(top, "e.npy")
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


def hf_line(t, line):
    """A line as tfm-embed reads it: a text, or a pair A<TAB>B."""
    return t(*line.split("\t"), return_tensors="pt")


def check_embed(name, d, top, cls=BertModel, pairs=True):
    """Hidden states of each layer, poolings and attention maps (pairs:
    with text pairs, for a model with token types)."""
    bad, worst = [], 0.0
    ref = reference(cls, d)
    base = ref.bert if hasattr(ref, "bert") else ref
    lines = TEXTS + (["\t".join(p) for p in PAIRS] if pairs else [])
    t = tok(d)
    with torch.no_grad():  # each line alone; tfm-embed batches them, padded
        outs = [base(**hf_line(t, x), output_hidden_states=True, output_attentions=True)
                for x in lines]
    lens = [o.hidden_states[0].shape[1] for o in outs]
    L = len(outs[0].hidden_states) - 1
    for layer in range(L + 1):
        got, e = tfm_embed(d, lines, top, "--layers", str(layer), "--pool", "none")
        if e:
            return [f"{name}: tfm-embed --layers {layer}: {e}"], ""
        for i, o in enumerate(outs):
            want = o.hidden_states[layer][0].numpy()
            if got[i].shape != want.shape:
                bad.append(f"{name}: layer {layer} line {i + 1}: shape {got[i].shape}, "
                           f"transformers {want.shape}")
                continue
            worst = max(worst, np.abs(got[i] - want).max())
    last = [o.hidden_states[L][0] for o in outs]
    pools = {"cls": [h[0] for h in last], "mean": [h.mean(0) for h in last],
             "max": [h.max(0).values for h in last],
             "mean-sqrt-len": [h.sum(0) / np.sqrt(h.shape[0]) for h in last]}
    for p, want in pools.items():
        got, e = tfm_embed(d, lines, top, "--pool", p)
        if e:
            return [f"{name}: tfm-embed --pool {p}: {e}"], ""
        worst = max(worst, np.abs(got - torch.stack(want).numpy()).max())
    # attention maps, line by line: [layers, heads, T, T]
    pat = os.path.join(top, "att%d.npy")
    got, e = tfm_embed(d, lines, top, "--attention", pat)
    if e:
        return [f"{name}: tfm-embed --attention: {e}"], ""
    aworst = 0.0
    for i, o in enumerate(outs):
        a = np.load(pat % (i + 1))
        want = torch.stack([x[0] for x in o.attentions]).numpy()
        if a.size != want.size:
            bad.append(f"{name}: attention of line {i + 1}: {a.size} values, want {want.shape}")
            continue
        aworst = max(aworst, np.abs(a.reshape(want.shape) - want).max())
    if not worst <= TOL:
        bad.append(f"{name}: hidden states / pooling max |tfm - transformers| = {worst:.3g}")
    if not aworst <= TOL:
        bad.append(f"{name}: attention maps max |tfm - transformers| = {aworst:.3g}")
    return bad, (f"{len(lines)} inputs ({len(PAIRS) if pairs else 0} pairs), layers 0-{L}, 4 poolings: "
                 f"max diff {worst:.2e}; attention {aworst:.2e}")


def check_fill(name, d, top, cls=BertForMaskedLM):
    ref = reference(cls, d)
    t = tok(d)
    lines = ["the [MASK] sat on the mat .", "a big [MASK] ran in the [MASK]",
             "[MASK] world"]
    K = 5
    r = run([EVAL, "fill", "-m", d, "--top-k", str(K), "--json", "--threads", "1", "-q"],
            input="".join(x + "\n" for x in lines))
    if r.returncode != 0:
        return [f"{name}: tfm-eval fill: {r.stderr.strip()}"], ""
    got = [json.loads(x) for x in r.stdout.splitlines()]
    bad, worst = [], 0.0
    for g, line in zip(got, lines):
        enc = t(line, return_tensors="pt")
        with torch.no_grad():
            prob = ref(**enc).logits[0].softmax(-1).numpy()
        pos = (enc["input_ids"][0] == t.mask_token_id).nonzero().flatten().tolist()
        if [m["position"] for m in g["masks"]] != pos:
            bad.append(f"{name}: {line!r}: mask positions {[m['position'] for m in g['masks']]}"
                       f", transformers {pos}")
            continue
        for m in g["masks"]:
            want = np.argsort(-prob[m["position"]], kind="stable")[:K]
            ids = [c["token"] for c in m["candidates"]]
            if ids != want.tolist():
                bad.append(f"{name}: {line!r} position {m['position']}: {ids}, "
                           f"transformers {want.tolist()}")
                continue
            worst = max(worst, max(abs(c["score"] - prob[m["position"], c["token"]])
                                   for c in m["candidates"]))
            if m["candidates"][0]["token_str"] != t.convert_ids_to_tokens(int(want[0])):
                bad.append(f"{name}: token_str {m['candidates'][0]['token_str']!r}")
    if not worst <= TOL:
        bad.append(f"{name}: fill probabilities differ by {worst:.3g}")
    return bad, f"top-{K} of {sum(len(g['masks']) for g in got)} masks equal, max diff {worst:.2e}"


def check_classify(name, d, top, regression=False, model=None,
                   cls=BertForSequenceClassification):
    """model: the file tfm reads instead of the folder d (its conversion)."""
    ref = reference(cls, d)
    t = tok(d)
    r = run([EVAL, "classify", "-m", model or d, "--json", "--top-k", "100", "--threads", "1", "-q"],
            input="".join(x + "\n" for x in TEXTS))
    if r.returncode != 0:
        return [f"{name}: tfm-eval classify: {r.stderr.strip()}"], ""
    got = [json.loads(x) for x in r.stdout.splitlines()]
    enc = t(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = ref(**enc).logits
    bad, worst = [], 0.0
    id2label = ref.config.id2label
    for i, g in enumerate(got):
        if regression:
            v = g.get("value", g.get("label"))
            worst = max(worst, abs(float(v) - float(logits[i, 0])))
            continue
        p = logits[i].softmax(-1).numpy()
        want = {id2label[k]: float(p[k]) for k in range(len(p))}
        have = {c["label"]: c["probability"] for c in g["top"]} if "top" in g else \
            {g["label"]: g["probability"]}
        if set(have) - set(want):
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
        bad.append(f"{name}: classify {'values' if regression else 'probabilities'} differ "
                   f"by {worst:.3g}")
    return bad, f"{len(got)} texts, max diff {worst:.2e}"


def check_tag(name, d, top, cls=BertForTokenClassification):
    ref = reference(cls, d)
    t = tok(d)
    sents = [x.split() for x in TEXTS]
    r = run([EVAL, "tag", "-m", d, "--json", "--threads", "1", "-q"],
            input="".join(json.dumps({"tokens": s}) + "\n" for s in sents))
    if r.returncode != 0:
        return [f"{name}: tfm-eval tag: {r.stderr.strip()}"], ""
    got = [json.loads(x) for x in r.stdout.splitlines()]
    bad, worst = [], 0.0
    for s, g in zip(sents, got):
        enc = t(s, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            p = ref(**enc).logits[0].softmax(-1).numpy()
        first = {}
        for k, w in enumerate(enc.word_ids()):
            if w is not None and w not in first:
                first[w] = k
        want = [ref.config.id2label[int(p[first[w]].argmax())] for w in range(len(s))]
        wp = [float(p[first[w]].max()) for w in range(len(s))]
        tags = g.get("tags")
        probs = g.get("probabilities", g.get("probs"))
        if tags != want:
            bad.append(f"{name}: {s}: tags {tags}, transformers {want}")
            continue
        worst = max(worst, max(abs(a - b) for a, b in zip(probs, wp)))
    if len(got) != len(sents):
        bad.append(f"{name}: {len(got)} answers for {len(sents)} sentences")
    if not worst <= TOL:
        bad.append(f"{name}: tag probabilities differ by {worst:.3g}")
    return bad, f"{len(sents)} sentences, tags equal, max diff {worst:.2e}"


def check_span(name, d, top, cls=BertForQuestionAnswering):
    ref = reference(cls, d)
    t = tok(d)
    items = [("who sang ?", "the small bird sang in the green tree ."),
             ("where is the boat ?", "the boat was in the big river , the man saw it ."),
             ("what ran ?", "a big red dog ran in the park")]
    r = run([EVAL, "span", "-m", d, "--json", "--threads", "1", "-q"],
            input="".join(json.dumps({"question": q, "context": c}) + "\n" for q, c in items))
    if r.returncode != 0:
        return [f"{name}: tfm-eval span: {r.stderr.strip()}"], ""
    got = [json.loads(x) for x in r.stdout.splitlines()]
    bad, worst = [], 0.0
    for (q, c), g in zip(items, got):
        enc = t(q, c, return_tensors="pt", return_offsets_mapping=True)
        offs = enc.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            o = ref(**enc)
        ls = o.start_logits[0].log_softmax(-1).numpy()
        le = o.end_logits[0].log_softmax(-1).numpy()
        ctx = [k for k, s in enumerate(enc.sequence_ids()) if s == 1]
        best, span = -np.inf, None
        for a in ctx:
            for b in ctx:
                if a <= b < a + 30 and ls[a] + le[b] > best:
                    best, span = ls[a] + le[b], (a, b)
        st, en = offs[span[0]][0], offs[span[1]][1]
        while st > 0 and c[st - 1] != " ":
            st -= 1
        while en < len(c) and c[en] != " ":
            en += 1
        if g.get("answer") != c[st:en]:
            bad.append(f"{name}: {q!r}: answer {g.get('answer')!r}, transformers {c[st:en]!r}")
        worst = max(worst, abs(g.get("score", np.inf) - best))
    if not worst <= TOL:
        bad.append(f"{name}: span scores differ by {worst:.3g}")
    return bad, f"{len(items)} questions, answers equal, score max diff {worst:.2e}"


def check_refusals(top, base):
    """config.json keys tfm cannot honour: each refused naming the key, by
    tfm-embed and tfm-eval."""
    bad = []
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    cases = [("position_embedding_type", "relative_key"), ("hidden_act", "silu"),
             ("add_cross_attention", True), ("is_decoder", True),
             ("problem_type", "multi_label_classification"),
             ("architectures", ["BertForMultipleChoice"]), ("not_a_bert_key", 1)]
    for key, val in cases:
        d = os.path.join(top, "refuse")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(cfg, **{key: val}), f, indent=2)
        bad += refusals(f"config.json {key}: {val!r}", [key],
                        [("tfm-embed", run([EMBED, "-m", d, "-q"], input="hello\n")),
                         ("tfm-eval", run([EVAL, "info", "-m", d]))])
    return bad, f"{len(cases)} keys refused by name"


def check_shards(top, base):
    """A sharded folder with a shard missing, or cut short: one message
    naming the shard, from tfm-embed and tfm-eval, exit 1, no output."""
    with open(os.path.join(base, "model.safetensors.index.json")) as f:
        shard = sorted(set(json.load(f)["weight_map"].values()))[1]
    bad = []
    for how in ("missing", "truncated"):
        d = os.path.join(top, "shards")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        p = os.path.join(d, shard)
        if how == "missing":
            os.remove(p)
        else:
            with open(p, "r+b") as f:
                f.truncate(os.path.getsize(p) - 100)
        out = os.path.join(top, "never.npy")
        bad += refusals(f"a shard {how}", [shard],
                        [("tfm-embed", run([EMBED, "-m", d, "-q", "-o", out], input="hello\n")),
                         ("tfm-eval", run([EVAL, "info", "-m", d]))])
        if os.path.exists(out):
            bad.append(f"a shard {how}: tfm-embed wrote {out}")
    return bad, f"{shard} missing, then cut: refused naming it"


def main():
    for p in (EMBED, EVAL):
        if not os.path.exists(p):
            print(f"SKIP: {p} not built")
            return 77
    torch.manual_seed(0)
    torch.set_num_threads(1)
    top = tempfile.mkdtemp(prefix="hf_bert_models.")
    with open(os.path.join(top, "vocab.txt"), "w") as f:
        f.write("".join(w + "\n" for w in VOCAB))
    checks = []
    try:
        # the encoder in three dtypes, one file and sharded
        m = BertModel(config()).eval()
        for dt, dn in ((None, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")):
            d = save(m, os.path.join(top, f"model-{dn}"), dt)
            checks.append((f"BertModel {dn}", lambda d=d, dn=dn: check_embed(dn, d, top)))
        d = save(m, os.path.join(top, "model-sharded"), shard="20KB")
        def sharded(d=d):
            bad, note = check_embed("sharded", d, top)
            if not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
                bad.append("save_pretrained wrote no model.safetensors.index.json")
            n = len([x for x in os.listdir(d) if x.endswith(".safetensors")])
            return bad, f"{n} shards; {note}"
        checks.append(("BertModel sharded", sharded))
        # every shape key away from the defaults above
        d = save(BertModel(config(hidden_size=24, num_attention_heads=2, num_hidden_layers=3,
                                  intermediate_size=40, max_position_embeddings=30,
                                  type_vocab_size=3, layer_norm_eps=1e-3,
                                  pad_token_id=1)).eval(), os.path.join(top, "shape"))
        checks.append(("BertModel C 24, 2 heads, 3 layers, d_ff 40, 3 segments, eps 1e-3",
                       lambda d=d: check_embed("shape", d, top)))
        checks.append(("sharded folder, a shard missing or cut",
                       lambda: check_shards(top, os.path.join(top, "model-sharded"))))
        for act in ("gelu_new", "relu", "gelu_pytorch_tanh"):
            d = save(BertModel(config(hidden_act=act)).eval(), os.path.join(top, f"act-{act}"))
            checks.append((f"hidden_act {act}", lambda d=d, a=act: check_embed(a, d, top)))
        # the masked LM, tied and untied, f32 and bf16
        for tie in (True, False):
            mlm = BertForMaskedLM(config(tie_word_embeddings=tie)).eval()
            with torch.no_grad():  # the decoder's bias matters too (untied: its own)
                mlm.cls.predictions.bias.normal_(0, 0.5)
                mlm.cls.predictions.decoder.bias.normal_(0, 0.5)
            for dt, dn in ((None, "f32"), (torch.bfloat16, "bf16")):
                d = save(mlm, os.path.join(top, f"mlm-{tie}-{dn}"), dt)
                checks.append((f"BertForMaskedLM tied {tie} {dn}",
                               lambda d=d, n=f"mlm {dn}": check_fill(n, d, top)))
        d = os.path.join(top, "mlm-True-f32")
        checks.append(("BertForMaskedLM's encoder in tfm-embed",
                       lambda d=d: check_embed("mlm", d, top, BertForMaskedLM)))
        # the task heads: labels out of sorted order, regression
        lab = {0: "positive", 1: "negative", 2: "neutral"}
        sc = BertForSequenceClassification(config(num_labels=3, id2label=lab,
                                                  label2id={v: k for k, v in lab.items()}))
        d = save(sc.eval(), os.path.join(top, "seq"))
        checks.append(("BertForSequenceClassification", lambda d=d: check_classify("seq", d, top)))

        def converted(d=d):  # tfm-train --convert keeps the head and its labels
            f = os.path.join(top, "seq.safetensors")
            r = run([TRAIN, "-q", "--convert", "f32", d, "-o", f])
            if r.returncode != 0:
                return [f"tfm-train --convert f32: {r.stderr.strip()}"], ""
            return check_classify("seq converted", d, top, model=f)
        checks.append(("BertForSequenceClassification converted to a tfm file", converted))
        d = save(BertForSequenceClassification(config(num_labels=1)).eval(),
                 os.path.join(top, "reg"))
        checks.append(("BertForSequenceClassification regression",
                       lambda d=d: check_classify("regression", d, top, regression=True)))
        tags = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
        tc = BertForTokenClassification(config(num_labels=5, id2label=tags,
                                               label2id={v: k for k, v in tags.items()}))
        for dt, dn in ((None, "f32"), (torch.float16, "f16")):
            d = save(tc.eval(), os.path.join(top, f"tok-{dn}"), dt)
            checks.append((f"BertForTokenClassification {dn}",
                           lambda d=d, dn=dn: check_tag(dn, d, top)))
        d = save(BertForQuestionAnswering(config()).eval(), os.path.join(top, "qa"))
        checks.append(("BertForQuestionAnswering", lambda d=d: check_span("qa", d, top)))
        checks.append(("config.json refusals",
                       lambda: check_refusals(top, os.path.join(top, "model-f32"))))
        failed = 0
        for name, fn in checks:
            bad, note = fn()
            print(f"{'FAIL' if bad else 'ok'} {name}{': ' + note if note else ''}")
            for b in bad:
                print(f"  {b}")
            failed += bool(bad)
    finally:
        shutil.rmtree(top)
    print(f"hf_bert_models: {len(checks) - failed}/{len(checks)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
