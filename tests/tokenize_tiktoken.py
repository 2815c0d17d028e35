#!/usr/bin/env python3
# tiktoken judges tfm's byte-level BPE: a tiktoken.Encoding built from a
# tokenizer's own ranks (tfm-tokenize vocab: the 256 bytes, then each token
# at the rank of the merge that made it) with GPT-2's pat_str gives
# tfm-tokenize encode's ids, per line and as one document, on the King
# James Bible (Debian's bible-kjv; the project's corpus without it) and the
# varied lines of tests/tok_texts.py; tfm-tokenize decode gives tiktoken's
# bytes back.  The tokenizers: BPE that tfm-tokenize train writes (two
# vocabulary sizes) and GPT-2's published files (testdata/gpt2).
import json
import os
import sys
import tempfile

import tiktoken

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_texts as T  # noqa: E402

GPT2_PAT = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
tmp = tempfile.mkdtemp(prefix="tfm-tiktoken.")
failures = []


def byte_decoder():
    """GPT-2's printable alphabet back to bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


BYTES = byte_decoder()


def unescape(p):
    """A piece as tfm-tokenize vocab prints it (\\t, \\n, \\r, \\\\)."""
    out, i = [], 0
    while i < len(p):
        if p[i] == "\\" and i + 1 < len(p):
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[p[i + 1]])
            i += 2
        else:
            out.append(p[i])
            i += 1
    return "".join(out)


def encoding(name, tok):
    """The tiktoken.Encoding of tfm's ranks, and tiktoken's token -> tfm's id."""
    ranks, to_tfm, specials = {}, {}, {}
    merged = []
    for line in T.tfm("vocab", "-t", tok).decode("utf-8").splitlines():
        tid, piece, rank = line.split("\t")
        piece = unescape(piece)
        if all(c in BYTES for c in piece):
            b = bytes(BYTES[c] for c in piece)
            if rank == "-" and len(b) == 1:
                ranks[b] = b[0]
                to_tfm[b[0]] = int(tid)
                continue
            if rank != "-":
                merged.append((int(rank), b, int(tid)))
                continue
        specials[piece] = int(tid)
    for r, b, tid in sorted(merged):
        ranks[b] = 256 + r
        to_tfm[256 + r] = tid
    assert len(ranks) == 256 + len(merged), f"{name}: a token twice"
    base = max(ranks.values()) + 1
    sp = {p: base + i for i, p in enumerate(specials)}
    for i, p in enumerate(specials):
        to_tfm[base + i] = specials[p]
    enc = tiktoken.Encoding(name=name, pat_str=GPT2_PAT, mergeable_ranks=ranks,
                            special_tokens=sp)
    return enc, to_tfm


def judge(name, tok, texts, docs):
    enc, to_tfm = encoding(name, tok)
    n = 0
    got = T.tfm_encode_lines(tok, texts)
    want = [[to_tfm[t] for t in enc.encode_ordinary(x)] for x in texts]
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    for i in bad[:3]:
        failures.append(f"{name}: {texts[i]!r}: tiktoken {want[i]} tfm {got[i]}")
    n += len(texts) - len(bad)
    # specials split out: tiktoken's encode with allowed_special="all"
    got_s = T.tfm_encode_lines(tok, texts, "--split-special")
    want_s = [[to_tfm[t] for t in enc.encode(x, allowed_special="all")] for x in texts]
    bad_s = [i for i in range(len(texts)) if got_s[i] != want_s[i]]
    for i in bad_s[:3]:
        failures.append(f"{name} (specials): {texts[i]!r}: tiktoken {want_s[i]} tfm {got_s[i]}")
    n += len(texts) - len(bad_s)
    for d in docs:
        g = T.tfm_encode_doc(tok, d)
        w = [to_tfm[t] for t in enc.encode_ordinary(d)]
        if g != w:
            failures.append(f"{name}: document of {len(d)} characters: {len(g)} ids, "
                            f"tiktoken {len(w)}; first difference at "
                            f"{next(i for i in range(min(len(g), len(w)) + 1) if g[i:i+1] != w[i:i+1])}")
        else:
            n += 1
        # tfm's decode of the ids is tiktoken's bytes of them
        inv = {v: k for k, v in to_tfm.items()}
        text = T.tfm_decode_doc(tok, g).encode("utf-8", "surrogateescape")
        if text != enc.decode_bytes([inv[i] for i in g]) or text != d.encode():
            failures.append(f"{name}: decode of a document differs from tiktoken's bytes")
        else:
            n += 1
    print(f"{name}: tiktoken agrees on {n} cases ({len(texts)} lines twice, {len(docs)} "
          f"documents of {sum(len(d) for d in docs)} characters, encoded and decoded)")


kjv = T.kjv(2500 if T.SANITIZED else 6000)
source = "the King James Bible (bible-kjv)" if kjv else "testdata/gpt2/corpus.txt"
if not kjv:
    kjv = T.corpus_lines()
train, held = kjv[0::2], kjv[1::2]
varied = T.lines(seed=3, n_random=150 if T.SANITIZED else 400, stride=4)
texts = held[:1500] + varied
docs = ["\n".join(held[i:i + 200]) + "\n" for i in range(0, min(len(held), 1000), 200)]
docs += T.documents(seed=4, n=8)
corpus = os.path.join(tmp, "train.txt")
with open(corpus, "w", encoding="utf-8") as f:
    f.write("\n".join(train + T.lines(seed=6, n_random=300)[-300:]) + "\n")
for v in (1000, 4000):
    path = os.path.join(tmp, f"bpe{v}.json")
    T.tfm("train", "-q", "--model", "bpe", "--vocab-size", str(v), "-o", path, corpus)
    judge(f"tfm bpe {v}", path, texts, docs)
judge("GPT-2's files", os.path.join(T.SRC, "testdata", "gpt2"), texts, docs)
print(f"(held-out text: {source})")
if failures:
    print("\n".join("FAIL " + f for f in failures[:20]))
    print(f"{len(failures)} failures")
    sys.exit(1)
print("tiktoken gives tfm-tokenize's ids and bytes")
