#!/usr/bin/python3
"""DistilBERT, ELECTRA and ALBERT folders as transformers writes them,
judged by transformers (lib/convert/distilbert.c, electra.c, albert.c over
lib/convert/bert.c; tfm's factorised embedding, model.embedding_size).

Small random models made by transformers, with BERT's WordPiece tokenizer
(tests/hf_bert_models.py's vocabulary and checks, shared): tfm-embed's
hidden states of every layer, poolings and attention maps; tfm-eval fill
(masked LM: DistilBERT's vocab_*, ELECTRA's generator, ALBERT's
predictions), classify (DistilBERT's pre_classifier + ReLU, ELECTRA's
dense + GELU + out_proj, ALBERT's pooler; also from the tfm file
tfm-train --convert writes), tag and span, each against transformers to
1e-4, in float32 and float16 or bfloat16; tfm-train classify for two steps
from a DistilBERT, an ELECTRA and an ALBERT folder; ALBERT with its
layers shared across groups (num_hidden_groups 2, inner_group_num 2); an
ALBERT folder with its own tokenizer (a SentencePiece Unigram trained here,
saved by AlbertTokenizer: quotes, NFKD, accents stripped, lowercase, the
charsmap), its ids with and without [CLS] ... [SEP] against AutoTokenizer's,
tfm-tokenize convert's tokenizer.json of it read by HF tokenizers, and
tfm-embed's hidden states of its texts; and an ALBERT config whose
num_hidden_groups does not divide its layers, refused naming the key."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import sentencepiece
import torch
import transformers
from tokenizers import Tokenizer
from transformers import (AlbertConfig, AlbertTokenizer, AutoTokenizer, AlbertForMaskedLM, AlbertForQuestionAnswering,
                          AlbertForSequenceClassification, AlbertForTokenClassification,
                          AlbertModel, DistilBertConfig, DistilBertForMaskedLM,
                          DistilBertForQuestionAnswering, DistilBertForSequenceClassification,
                          DistilBertForTokenClassification, DistilBertModel, ElectraConfig,
                          ElectraForMaskedLM, ElectraForPreTraining,
                          ElectraForSequenceClassification, ElectraForTokenClassification,
                          ElectraModel)

SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
import hf_bert_models as hb  # noqa: E402
from hf_lib import EMBED, EVAL, TOKENIZE, TRAIN, refusals, run  # noqa: E402

transformers.logging.set_verbosity_error()


def no_types(cls):
    """cls reading the tokenizer's token_type_ids as DistilBERT does: not at all"""
    class NoTypes(cls):
        def forward(self, *a, token_type_ids=None, **kw):
            return super().forward(*a, **kw)
    NoTypes.__name__ = cls.__name__
    return NoTypes


def randomized(m, seed):
    """every parameter away from its initial value (norms' gains about 1)"""
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if ("LayerNorm" in n or "layer_norm" in n) and n.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 0.2)
    return m.eval()


V = len(hb.VOCAB)
LAB = {0: "positive", 1: "negative", 2: "neutral"}
TAGS = {0: "O", 1: "B-X", 2: "I-X"}


def labels(d):
    return dict(num_labels=len(d), id2label=d, label2id={v: k for k, v in d.items()})


def distil(**kw):
    return DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                            max_position_embeddings=40, attn_implementation="eager", **kw)


def electra(**kw):
    c = dict(vocab_size=V, embedding_size=16, hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=48, max_position_embeddings=40,
             attn_implementation="eager")
    c.update(kw)
    return ElectraConfig(**c)


def albert(**kw):
    c = dict(vocab_size=V, embedding_size=16, hidden_size=32, num_hidden_layers=4,
             num_hidden_groups=2, inner_group_num=2, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=40, attn_implementation="eager")
    c.update(kw)
    return AlbertConfig(**c)


def with_info(check, family, E):
    """check, then tfm-eval info's kind and embedding_size"""
    def run_both(n, d):
        bad, note = check(n, d)
        r = run([EVAL, "info", "--json", "-m", d])
        info = json.loads(r.stdout) if r.returncode == 0 else {}
        want = {"kind": f"{family}-huggingface", "embedding_size": E}
        got = {k: info.get(k) for k in want}
        if got != want:
            bad.append(f"{n}: tfm-eval info {got}, want {want} ({r.stderr.strip()})")
        return bad, note
    return run_both


ODD = ["In the Beginning God created   the heaven and the earth.",
       "Don't ``quote'' him: ÉCOLE, café, Ångström, ﬁne, ½", "[MASK] light",
       "  leading and trailing  ", "İstanbul ǅ naïve"]


def albert_folder(top):
    """an AlbertModel folder with AlbertTokenizer's tokenizer.json"""
    corpus = os.path.join(SRC, "testdata", "gpt2", "corpus.txt")
    with open(corpus, encoding="utf-8") as f:
        lines = [x.strip() for x in f if x.strip()]
    raw = os.path.join(top, "spm")
    os.makedirs(raw)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=os.path.join(raw, "spiece"),
        vocab_size=300, model_type="unigram", num_threads=1, minloglevel=2, pad_id=0,
        unk_id=1, bos_id=2, eos_id=3, pad_piece="<pad>", unk_piece="<unk>",
        bos_piece="[CLS]", eos_piece="[SEP]", control_symbols=["[MASK]"])
    tok = AlbertTokenizer.from_pretrained(raw)
    d = os.path.join(top, "albert-spm")
    randomized(AlbertModel(albert(vocab_size=len(tok), max_position_embeddings=256)),
               20).save_pretrained(d)
    tok.save_pretrained(d)
    return d, ODD + lines[100:160]


def check_albert_tokenizer(top):
    d, texts = albert_folder(top)
    hf = AutoTokenizer.from_pretrained(d)
    bad = []
    for extra, special in (((), False), (("--add-special",), True)):
        r = run([TOKENIZE, "encode", "-q", "-t", d,
                 "--format", "jsonl", "--split-special", *extra],
                input="".join(t + "\n" for t in texts))
        if r.returncode != 0:
            return [f"tfm-tokenize {' '.join(extra)}: {r.stderr.strip()}"], ""
        for t, line in zip(texts, r.stdout.splitlines()):
            got, want = json.loads(line)["ids"], hf(t, add_special_tokens=special).input_ids
            if got != want:
                bad.append(f"{t!r}{' (special)' if special else ''}: tfm {got[:16]}, "
                           f"AutoTokenizer {want[:16]}")
    # and written back: tfm's tokenizer.json of it, read by HF tokenizers
    conv = os.path.join(top, "albert-tok.json")
    r = run([TOKENIZE, "convert", "-t", d, "-o", conv])
    if r.returncode != 0:
        return bad + [f"tfm-tokenize convert: {r.stderr.strip()}"], ""
    back = Tokenizer.from_file(conv)
    for t in texts:
        got = back.encode(t, add_special_tokens=False).ids
        want = hf(t, add_special_tokens=False).input_ids
        if got != want:
            bad.append(f"tfm-tokenize convert {t!r}: HF tokenizers {got[:16]}, AutoTokenizer "
                       f"{want[:16]}")
    ref = AlbertModel.from_pretrained(d, attn_implementation="eager").eval()
    # tfm-embed reads text, special tokens' text included, as text
    plain = [t for t in texts if "[MASK]" not in t][:8]
    got, e = hb.tfm_embed(d, plain, top, "--pool", "none")
    if e:
        return bad + [f"tfm-embed: {e}"], ""
    worst = 0.0
    for t, g in zip(plain, got):
        with torch.no_grad():
            want = ref(**hf(t, return_tensors="pt")).last_hidden_state[0].numpy()
        if g.shape != want.shape:
            bad.append(f"tfm-embed {t!r}: shape {g.shape}, transformers {want.shape}")
            continue
        worst = max(worst, float(np.abs(g - want).max()))
    if not worst <= hb.TOL:
        bad.append(f"tfm-embed: hidden states differ by {worst:.3g}")
    # its sentencepiece model alone lacks AlbertTokenizer's normalizers: refused
    alone = os.path.join(top, "albert-spiece")
    os.makedirs(alone)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(d, f), alone)
    shutil.copy(os.path.join(top, "spm", "spiece.model"), alone)
    bad += refusals("ALBERT spiece.model alone", ["spiece.model", "tokenizer.json"],
                    [("tfm-embed", run([EMBED, "-m", alone, "-q", "-o",
                                        os.path.join(top, "never.npy")], input="hello\n"))])
    return bad, (f"{len(texts)} texts, ids equal without and with [CLS] ... [SEP] and "
                 f"written back; tfm-embed max diff {worst:.2e}")


def converted(check, top):
    """check on the folder, then on its tfm file (tfm-train --convert f32:
    model.embedding_size, model.pooler_activation and the head kept)"""
    def both(n, d):
        bad, note = check(n, d, None)
        f = os.path.join(top, "conv.safetensors")
        r = run([TRAIN, "-q", "--convert", "f32", d, "-o", f])
        if r.returncode != 0:
            return bad + [f"{n}: tfm-train --convert f32: {r.stderr.strip()}"], note
        b2, n2 = check(n + " converted", d, f)
        return bad + b2, f"{note}; converted: {n2}"
    return both


def finetuned(check, top):
    """check, then tfm-train classify for two steps from the folder (its
    encoder, factorised embedding included): the result classifies"""
    def both(n, d):
        bad, note = check(n, d)
        data = os.path.join(top, "cls.tsv")
        with open(data, "w") as f:
            f.write("".join(f"{'pos' if i % 2 else 'neg'}\t{t}\n"
                            for i, t in enumerate(hb.TEXTS)))
        out = os.path.join(top, "ft")
        r = run([TRAIN, "-q", "--threads", "1", "-o", out, "--set", "train.task=classify",
                 "--set", f"train.init={d}", "--set", f"data.text={data}", "--set",
                 f"data.tokenizer={d}", "--set", "train.max_steps=2", "--set",
                 "train.batch_size=4", "--set", "train.eval_interval=0"])
        if r.returncode != 0:
            return bad + [f"{n}: tfm-train classify from the folder: {r.stderr.strip()}"], note
        r = run([EVAL, "classify", "-m", os.path.join(out, "model.safetensors"), "-q"],
                input="the cat sat\nhello world\n")
        if r.returncode != 0 or len(r.stdout.splitlines()) != 2:
            bad.append(f"{n}: tfm-eval classify of the fine-tuned model: {r.stderr.strip()}")
        shutil.rmtree(out)
        return bad, note + "; fine-tuned for two steps, classifies"
    return both


def check_bad_groups(top):
    d = hb.save(AlbertModel(albert(num_hidden_layers=3, num_hidden_groups=2)).eval(),
                os.path.join(top, "albert-bad"))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["num_hidden_groups"] = 2  # save_pretrained keeps it; make sure
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    out = os.path.join(top, "never.npy")
    bad = refusals("ALBERT num_hidden_groups 2 of 3 layers",
                   ["config.json", "num_hidden_groups 2 does not divide num_hidden_layers 3"],
                   [("tfm-embed", run([EMBED, "-m", d, "-q", "-o", out], input="hello\n")),
                    ("tfm-eval", run([EVAL, "info", "-m", d]))])
    return bad, "refused naming num_hidden_groups"


def main():
    for p in (EMBED, EVAL, TOKENIZE, TRAIN):
        if not os.path.exists(p):
            print(f"SKIP: {p} not built")
            return 77
    torch.set_num_threads(1)
    top = tempfile.mkdtemp(prefix="hf_bert_family.")
    with open(os.path.join(top, "vocab.txt"), "w") as f:
        f.write("".join(w + "\n" for w in hb.VOCAB))
    checks = []

    def add(name, model, seed, check, dtypes=((None, "f32"),)):
        for dt, dn in dtypes:
            d = hb.save(randomized(model, seed), os.path.join(top, f"{name}-{dn}"), dt)
            checks.append((f"{name} {dn}", lambda d=d, n=f"{name} {dn}": check(n, d)))

    half = ((None, "f32"), (torch.float16, "f16"))
    bf = ((None, "f32"), (torch.bfloat16, "bf16"))
    try:
        # DistilBERT: no token types
        add("DistilBertModel", DistilBertModel(distil()), 1,
            with_info(lambda n, d: hb.check_embed(n, d, top, no_types(DistilBertModel),
                                                  pairs=False), "distilbert", 0), half)
        add("DistilBertModel relu", DistilBertModel(distil(activation="relu")), 2,
            lambda n, d: hb.check_embed(n, d, top, no_types(DistilBertModel), pairs=False))
        add("DistilBertForMaskedLM", DistilBertForMaskedLM(distil()), 3,
            finetuned(lambda n, d: hb.check_fill(n, d, top, no_types(DistilBertForMaskedLM)),
                      top))
        add("DistilBertForSequenceClassification",
            DistilBertForSequenceClassification(distil(**labels(LAB))), 4,
            converted(lambda n, d, f: hb.check_classify(
                n, d, top, model=f, cls=no_types(DistilBertForSequenceClassification)), top),
            half)
        add("DistilBertForTokenClassification",
            DistilBertForTokenClassification(distil(**labels(TAGS))), 5,
            lambda n, d: hb.check_tag(n, d, top, no_types(DistilBertForTokenClassification)))
        add("DistilBertForQuestionAnswering", DistilBertForQuestionAnswering(distil()), 6,
            lambda n, d: hb.check_span(n, d, top, no_types(DistilBertForQuestionAnswering)))
        # ELECTRA: embeddings 16 wide, projected to 32; and without the projection
        add("ElectraModel", ElectraModel(electra()), 7,
            with_info(lambda n, d: hb.check_embed(n, d, top, ElectraModel), "electra", 16), bf)
        add("ElectraModel E = H", ElectraModel(electra(embedding_size=32)), 8,
            with_info(lambda n, d: hb.check_embed(n, d, top, ElectraModel), "electra", 0))
        add("ElectraForPreTraining", ElectraForPreTraining(electra()), 9,
            finetuned(lambda n, d: hb.check_embed(n, d, top, ElectraModel), top))
        # the generator: hidden 24, embeddings 16 (and wider than hidden)
        add("ElectraForMaskedLM", ElectraForMaskedLM(electra(hidden_size=24,
                                                             num_attention_heads=2)), 10,
            lambda n, d: hb.check_fill(n, d, top, ElectraForMaskedLM))
        add("ElectraForMaskedLM E > H", ElectraForMaskedLM(electra(embedding_size=40)), 11,
            lambda n, d: hb.check_fill(n, d, top, ElectraForMaskedLM))
        add("ElectraForSequenceClassification",
            ElectraForSequenceClassification(electra(**labels(LAB))), 12,
            converted(lambda n, d, f: hb.check_classify(
                n, d, top, model=f, cls=ElectraForSequenceClassification), top))
        add("ElectraForTokenClassification",
            ElectraForTokenClassification(electra(**labels(TAGS))), 13,
            lambda n, d: hb.check_tag(n, d, top, ElectraForTokenClassification))
        # ALBERT: 4 layers over 2 groups of 2 inner layers
        add("AlbertModel", AlbertModel(albert()), 14,
            with_info(lambda n, d: hb.check_embed(n, d, top, AlbertModel), "albert", 16), half)
        add("AlbertModel shared", AlbertModel(albert(num_hidden_groups=1, inner_group_num=1,
                                                     embedding_size=32)), 15,
            lambda n, d: hb.check_embed(n, d, top, AlbertModel))
        add("AlbertForMaskedLM", AlbertForMaskedLM(albert()), 16,
            finetuned(lambda n, d: hb.check_fill(n, d, top, AlbertForMaskedLM), top))
        add("AlbertForSequenceClassification",
            AlbertForSequenceClassification(albert(**labels(LAB))), 17,
            converted(lambda n, d, f: hb.check_classify(
                n, d, top, model=f, cls=AlbertForSequenceClassification), top))
        add("AlbertForTokenClassification",
            AlbertForTokenClassification(albert(**labels(TAGS))), 18,
            lambda n, d: hb.check_tag(n, d, top, AlbertForTokenClassification))
        add("AlbertForQuestionAnswering", AlbertForQuestionAnswering(albert()), 19,
            lambda n, d: hb.check_span(n, d, top, AlbertForQuestionAnswering))
        checks.append(("ALBERT tokenizer (AlbertTokenizer's tokenizer.json)",
                       lambda: check_albert_tokenizer(top)))
        checks.append(("ALBERT bad num_hidden_groups", lambda: check_bad_groups(top)))
        failed = 0
        for name, fn in checks:
            bad, note = fn()
            print(f"{'FAIL' if bad else 'ok'} {name}{': ' + note if note else ''}")
            for b in bad:
                print(f"  {b}")
            failed += bool(bad)
    finally:
        shutil.rmtree(top)
    print(f"hf_bert_family: {len(checks) - failed}/{len(checks)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
