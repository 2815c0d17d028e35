#!/usr/bin/python3
"""BERT tokenizers as transformers writes them, judged by AutoTokenizer.

From testdata's bert-base-uncased vocab.txt, folders in both layouts a user
meets: BertTokenizer(...).save_pretrained (transformers 5: tokenizer.json
and tokenizer_config.json) and the older vocab.txt + tokenizer_config.json
(transformers 4's, as the published all-MiniLM-L6-v2 ships beside its
tokenizer.json), for do_lower_case true and false, strip_accents
unset/true/false and tokenize_chinese_chars true/false.  tfm-tokenize
encode -t FOLDER (--add-special: [CLS] A [SEP], pairs A<TAB>B with their
type ids; --split-special, as transformers finds [MASK] in a text) and the
model's own tokenizer (tests/io_probe model-encode on a
BertModel folder holding the tokenizer) must give AutoTokenizer's ids."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoTokenizer, BertConfig, BertModel, BertTokenizer

from hf_lib import PROBE, SRC, TOKENIZE, run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
transformers.logging.set_verbosity_error()

VOCAB = os.path.join(SRC, "testdata", "bert", "bert-base-uncased-vocab.txt")
TEXTS = ["Hello, World! This is BERT.", "Café résumé naïve façade Ångström",
         "中文字符 mixed with English 日本語", "don't stop-believing... (really?)",
         "ÉCOLE élève Über straße", "numbers 3.14159 and 1,000,000 $5",
         "a" * 120 + " long words become [UNK]", "tabs\tand  spaces   and\u00a0nbsp",
         "combining e\u0301 and o\u0308 marks", "emoji 🙂 and symbols © ® ™",
         "UPPER lower MiXeD", "[MASK] is a special token, [CLS] too"]
PAIRS = [("Who wrote it?", "The Café owner wrote it."), ("中文", "ENGLISH words")]


def folders(top):
    """(name, folder, settings) of each layout and setting."""
    out = []
    for lower in (True, False):
        for strip in (None, True, False):
            for cjk in (True, False):
                if not lower and cjk is False and strip is not None:
                    continue  # keep the matrix small
                kw = dict(do_lower_case=lower, strip_accents=strip, tokenize_chinese_chars=cjk)
                name = f"lower={lower} strip_accents={strip} chinese={cjk}"
                d = os.path.join(top, f"tok-{len(out)}")
                BertTokenizer(VOCAB, **kw).save_pretrained(d)
                out.append((f"save_pretrained {name}", d))
                if cjk:  # transformers 4's layout: vocab.txt and its settings
                    d4 = os.path.join(top, f"tok-{len(out)}")
                    os.makedirs(d4)
                    shutil.copy(VOCAB, os.path.join(d4, "vocab.txt"))
                    with open(os.path.join(d4, "tokenizer_config.json"), "w") as f:
                        json.dump(dict(kw, tokenizer_class="BertTokenizer",
                                       model_max_length=512), f)
                    out.append((f"vocab.txt {name}", d4))
    return out


def tfm_ids(d, lines, special):
    # --split-special: [MASK] in the text is the token, as transformers reads it
    r = run([TOKENIZE, "encode", "-q", "-t", d, "--format", "jsonl", "--split-special"] +
            (["--add-special"] if special else []),
            input="".join(x + "\n" for x in lines))
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [json.loads(x) for x in r.stdout.splitlines()], None


def check(name, d, top):
    bad = []
    t = AutoTokenizer.from_pretrained(d)
    got, e = tfm_ids(d, TEXTS, False)
    if e:
        return [f"{name}: tfm-tokenize: {e}"]
    for x, g in zip(TEXTS, got):
        want = t(x, add_special_tokens=False)["input_ids"]
        if g["ids"] != want:
            bad.append(f"{name}: {x!r}: tfm {t.convert_ids_to_tokens(g['ids'])}, "
                       f"transformers {t.convert_ids_to_tokens(want)}")
    lines = TEXTS[:4] + ["\t".join(p) for p in PAIRS]
    got, e = tfm_ids(d, lines, True)
    if e:
        return bad + [f"{name}: tfm-tokenize --add-special: {e}"]
    for x, g in zip(lines, got):
        want = t(*x.split("\t"))
        if g["ids"] != want["input_ids"] or ("\t" in x and
                                             g.get("type_ids") != want["token_type_ids"]):
            bad.append(f"{name}: --add-special {x!r}: tfm {g}, transformers "
                       f"{want['input_ids']} {want['token_type_ids']}")
    # the model's tokenizer: a BertModel folder with this tokenizer beside it
    m = os.path.join(top, "model")
    shutil.rmtree(m, ignore_errors=True)
    shutil.copytree(d, m)
    BertModel(BertConfig(vocab_size=t.vocab_size if hasattr(t, "vocab_size") else 30522,
                         hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16, max_position_embeddings=16)).save_pretrained(m)
    for x in TEXTS[:6]:
        r = run([PROBE, "model-encode", m], input=x + "\n")
        want = t(x, add_special_tokens=False)["input_ids"]
        gm = [int(v) for v in r.stdout.split()] if r.returncode == 0 else r.stderr.strip()
        if gm != want:
            bad.append(f"{name}: the model folder's tokenizer on {x!r}: {gm}, transformers "
                       f"{want}")
    return bad


def main():
    for p in (TOKENIZE, PROBE):
        if not os.path.exists(p):
            print(f"SKIP: {p} not built")
            return 77
    torch.manual_seed(0)
    top = tempfile.mkdtemp(prefix="hf_bert_tok.")
    failed = n = 0
    try:
        for name, d in folders(top):
            bad = check(name, d, top)
            n += 1
            print(f"{'FAIL' if bad else 'ok'} {name}: {len(TEXTS)} texts, "
                  f"{len(PAIRS)} pairs")
            for b in bad[:6]:
                print(f"  {b}")
            failed += bool(bad)
    finally:
        shutil.rmtree(top)
    print(f"hf_bert_tok: {n - failed}/{n} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
