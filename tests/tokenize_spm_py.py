#!/usr/bin/env python3
# sentencepiece (Python) judges tfm's SentencePiece support, beside
# tests/tokenize_spm.sh (Debian's spm_encode): models that
# SentencePieceTrainer trains (unigram and bpe; byte_fallback on and off;
# add_dummy_prefix off; remove_extra_whitespaces off; user symbols; a
# character coverage that leaves characters unknown) give
# SentencePieceProcessor's ids, pieces (its pieces are the vocabulary's but
# for the unknown piece, whose surface it shows) and n-best lists
# (unigram) in tfm-tokenize encode, its text in tfm-tokenize decode, and
# its BOS/EOS where --add-special adds them; the tokenizer.json that
# tfm-tokenize convert writes gives the same ids in HF tokenizers (Python).
# Texts: held-out KJV verses and tests/tok_texts.py's lines, with
# characters no model has seen.
import json
import os
import random
import sys
import tempfile

import sentencepiece as spm
import tokenizers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_texts as T  # noqa: E402

tmp = tempfile.mkdtemp(prefix="tfm-spm-py.")
failures = []
rng = random.Random(7)
kjv = T.kjv(3000) or T.corpus_lines()
train = os.path.join(tmp, "train.txt")
with open(train, "w", encoding="utf-8") as f:
    f.write("\n".join(kjv[0::2] + T.lines(seed=8, n_random=300)[-300:]) + "\n")
UNSEEN = ["ᚠᚢᚦ", "𝔘𝔫𝔦", "⟨∀x⟩", "ꙮ", "🜁🜂", "ⴰⵣ", "ᐊᐃ"]
texts = kjv[1::2][:400 if T.SANITIZED else 800] + \
    T.lines(seed=9, n_random=150 if T.SANITIZED else 300, stride=5)
texts += [" ".join(rng.choice(T.WORDS + UNSEEN) for _ in range(rng.randint(1, 8)))
          for _ in range(100)]
texts = [t for t in texts if "\r" not in t]
# a combining mark: HF's Precompiled normalizer works on grapheme clusters
# and so departs from sentencepiece there (lib/text/hf_compat_test.sh)
MARK = {chr(c) for c in list(range(0x300, 0x370))}


def unescape_pieces(line):
    """tfm-tokenize --format pieces: \\xHH and \\\\ in a piece."""
    out = []
    for p in line.split(" ") if line else []:
        b, i = bytearray(), 0
        while i < len(p):
            if p.startswith("\\x", i):
                b.append(int(p[i + 2:i + 4], 16))
                i += 4
            elif p.startswith("\\\\", i):
                b.append(0x5C)
                i += 2
            else:
                b += p[i].encode()
                i += 1
        out.append(b.decode("utf-8", "surrogateescape"))
    return out


def judge(name, **opts):
    prefix = os.path.join(tmp, name)
    spm.SentencePieceTrainer.train(input=train, model_prefix=prefix, minloglevel=2,
                                   num_threads=1, hard_vocab_limit=False, **opts)
    model = prefix + ".model"
    sp = spm.SentencePieceProcessor(model_file=model)
    n, n_tied = 0, 0

    def check(what, want, got, excused=None):
        nonlocal n
        bad = [i for i in range(len(want)) if want[i] != got[i] and not
               (excused and excused(i))]
        for i in bad[:2]:
            failures.append(f"{name}: {what}: {texts[i]!r}: sentencepiece {want[i]!r} "
                            f"tfm {got[i]!r}")
        if bad:
            failures.append(f"{name}: {what}: {len(bad)} of {len(want)} differ")
        n += len(want) - len(bad)

    ids = T.tfm_encode_lines(model, texts)
    want = sp.encode(texts)
    check("ids", want, ids)
    out = T.tfm("encode", "-q", "-t", model, "--format", "pieces",
                stdin="".join(t + "\n" for t in texts).encode())
    pieces = [unescape_pieces(l) for l in out.decode("utf-8", "surrogateescape").split("\n")[:-1]]
    unk = sp.unk_id()
    # sentencepiece shows the unknown piece as its surface, tfm as the piece
    sp_pieces = [[p if i != unk else sp.id_to_piece(unk) for p, i in zip(ps, w)]
                 for ps, w in zip(sp.encode(texts, out_type=str), want)]
    n_unk = sum(unk in w for w in want)
    check("pieces", sp_pieces, pieces)
    check("decode", sp.decode(want), T.tfm_decode(model, want, "--skip-special"))
    check("decode with specials", sp.decode(want), T.tfm_decode(model, want))
    if sp.eos_id() >= 0:
        check("ids with --add-special (EOS)", sp.encode(texts, add_eos=True),
              T.tfm_encode_lines(model, texts, "--add-special"))
    if opts.get("model_type") == "unigram":
        k = 4
        out = T.tfm("encode", "-q", "-t", model, "--nbest", str(k), "--format", "jsonl",
                    stdin="".join(t + "\n" for t in texts[:200]).encode())
        got = [json.loads(l)["nbest"] for l in out.decode().splitlines()]
        want_nb = [sp.nbest_encode_as_ids(t, k) for t in texts[:200]]

        def score(ids):
            return sum(sp.get_score(i) for i in ids)

        def tied(i):
            """segmentations of equal score in another order (sentencepiece's
            A* and tfm's k-best order ties differently): the same scores,
            each a segmentation of the text, none twice"""
            w, g = want_nb[i], got[i]
            return len(w) == len(g) and len({tuple(x) for x in g}) == len(g) and all(
                abs(score(a) - score(b)) < 1e-4 and sp.decode(a) == sp.decode(b)
                for a, b in zip(w, g))
        n_tied = sum(want_nb[i] != got[i] and tied(i) for i in range(len(got)))
        check("n-best", want_nb, got, tied)
    # tfm's tokenizer.json in HF tokenizers
    js = prefix + ".json"
    T.tfm("convert", "-t", model, "-o", js)
    hf = tokenizers.Tokenizer.from_file(js)
    hf.encode_special_tokens = True  # the text "<s>" is text, as for sentencepiece
    hf_ids = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    n_mark = sum(bool(MARK & set(t)) and hf_ids[i] != want[i] for i, t in enumerate(texts))
    controls = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                if sp.is_control(i) or sp.is_unknown(i)]

    def hf_rule(i):
        """a combining mark, or a control or unknown piece's text, which HF's
        Unigram finds in its vocabulary where sentencepiece never matches it"""
        return bool(MARK & set(texts[i])) or any(c in texts[i] for c in controls)
    check("HF tokenizers on convert's tokenizer.json", want, hf_ids, hf_rule)
    print(f"{name}: sentencepiece agrees on {n} cases ({len(texts)} lines, {n_unk} with the "
          f"unknown piece; {n_mark} lines with a combining mark where HF departs; "
          f"{n_tied} n-best lists with equal scores in another order)")


judge("unigram", model_type="unigram", vocab_size=800)
judge("unigram_bytes", model_type="unigram", vocab_size=1000, byte_fallback=True,
      character_coverage=0.995)
judge("unigram_no_dummy", model_type="unigram", vocab_size=800, add_dummy_prefix=False)
judge("unigram_spaces", model_type="unigram", vocab_size=800, remove_extra_whitespaces=False,
      user_defined_symbols=["<sep>", "the"])
judge("bpe", model_type="bpe", vocab_size=800)
judge("bpe_bytes", model_type="bpe", vocab_size=1000, byte_fallback=True,
      character_coverage=0.995)
judge("bpe_no_dummy", model_type="bpe", vocab_size=800, add_dummy_prefix=False)
if failures:
    print("\n".join("FAIL " + f for f in failures[:20]))
    print(f"{len(failures)} failures")
    sys.exit(1)
print("sentencepiece gives tfm-tokenize's ids, pieces and text")
