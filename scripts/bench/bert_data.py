#!/usr/bin/python3
"""The BERT-small benchmark's token ids (the README's benchmark section): the
corpus lower-cased and split by [a-z]+|[0-9]+|[^\\sa-z0-9]; the vocabulary is
[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then the 8000 most frequent tokens
of the first 90% of the lines (ties alphabetical); the first 90% of the
lines are train.npy, the rest val.npy (uint16, unknown tokens [UNK]).

    bert_data.py CORPUS OUTDIR"""
import collections
import re
import sys

import numpy as np

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    lines = open(corpus, encoding="utf-8").read().lower().split("\n")
    cut = len(lines) * 9 // 10
    split = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")
    train = split.findall("\n".join(lines[:cut]))
    val = split.findall("\n".join(lines[cut:]))
    counts = collections.Counter(train)
    words = sorted(counts, key=lambda w: (-counts[w], w))[:8000]
    vocab = {w: i for i, w in enumerate(SPECIALS + words)}
    for name, toks in (("train", train), ("val", val)):
        ids = np.array([vocab.get(t, 1) for t in toks], dtype=np.uint16)
        np.save(f"{out}/{name}.npy", ids)
    print(len(vocab))


if __name__ == "__main__":
    main()
