"""Texts the tokenizer cross-checks (tokenizers_hf.py, tokenize_tiktoken.py,
tokenize_spm_py.py) share: the project's corpus and golden strings, and
seeded random lines over the characters tokenizers treat differently
(accents precomposed and combining, CJK, kana, Hangul, Greek, Cyrillic,
Arabic, emoji with ZWJ and skin tones, flags, digits, punctuation, runs of
spaces, tabs, NBSP and other Unicode spaces), and multi-line documents."""
import json
import os
import random
import subprocess

BUILD = os.environ.get("TFM_BUILDDIR", ".")
SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
TOKENIZE = os.path.join(BUILD, "tfm-tokenize")
CORPUS = os.path.join(SRC, "testdata", "gpt2", "corpus.txt")
SANITIZED = bool(os.environ.get("TFM_SANITIZED"))

WORDS = ["the", "The", "THE", "and", "beginning", "created", "heaven", "earth", "don't",
         "it's", "we'll", "I'M", "naïve", "café", "cafe\u0301", "Ångström", "Straße", "ﬁne",
         "Ⅻ", "½", "x²", "élève", "ÉCOLE", "Łódź", "Ελληνικά", "Привет", "мир", "日本語",
         "中文字", "東京", "ひらがな", "カタカナ", "한국어", "مرحبا", "שלום", "हिन्दी", "ไทย",
         "😀", "👍🏽", "👨‍👩‍👧", "🇩🇪", "❤️", "☃", "1234567", "3.14", "1,000", "5-6", "$42",
         "10%", "#tag", "@user", "e-mail", "U.S.A.", "...", "?!", "«»", "“quoted”", "(x)",
         "[MASK]", "<s>", "</s>", "<pad>", "<unk>", "<|endoftext|>", "[CLS]", "[SEP]", "a_b", "snake_case", "CamelCase", "http://x.org/a?b=c", "\u200b",
         "\u00ad", "Ǆ", "ǅ", "İstanbul", "ß", "ﬀ", "Ⓐ", "ｆｕｌｌ", "ｶﾀｶﾅ", "\u0301a"]
SPACES = [" ", " ", " ", " ", "  ", "   ", "\t", " \t ", "\u00a0", "\u3000", "\u2009",
          "\u202f", "      "]


def golden_strings():
    """The gpt2 golden files' texts (JSON strings, one a line)."""
    out = []
    for name in ("gpt2.tsv", "extra.tsv"):
        with open(os.path.join(SRC, "testdata", "gpt2", name), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    s = json.loads(line.split("\t", 1)[0])
                    if isinstance(s, str):
                        out.append(s)
    return out


def random_line(rng):
    n = rng.randint(1, 14)
    parts = []
    if rng.random() < 0.15:
        parts.append(rng.choice(SPACES))
    for i in range(n):
        parts.append(rng.choice(WORDS))
        if i + 1 < n:
            parts.append(rng.choice(SPACES) if rng.random() < 0.8 else "")
    if rng.random() < 0.15:
        parts.append(rng.choice(SPACES))
    return "".join(parts)


def corpus_lines():
    with open(CORPUS, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def lines(seed=1, n_random=300, stride=1):
    """One-line texts (no newline): the corpus (every stride-th line), the
    golden strings without line breaks and n_random random lines."""
    rng = random.Random(seed)
    out = corpus_lines()[::stride]
    out += [s for s in golden_strings() if "\n" not in s and "\r" not in s]
    out += [random_line(rng) for _ in range(n_random)]
    return out


def documents(seed=2, n=40):
    """Multi-line texts: random lines joined by newlines (and \\r\\n, blank
    lines, trailing whitespace), ending or not in a newline."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        k = rng.randint(1, 6)
        d = ""
        for _ in range(k):
            d += random_line(rng) + rng.choice(["\n", "\n", "\n\n", "\r\n", " \n", "\n   "])
        if rng.random() < 0.5:
            d = d.rstrip("\n")
        docs.append(d)
    docs.append("\n")
    docs.append("  \n\n  ")
    return docs


def kjv(n):
    """Up to n verses of the King James Bible from Debian's bible-kjv (none
    when it is not installed)."""
    try:
        out = subprocess.run(["bible", "-l", "79", "Gen1:1-Rev22:21"], capture_output=True,
                             env={**os.environ, "COLUMNS": ""}, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode:
        return []
    return [l for l in out.stdout.decode("utf-8", "replace").split("\n") if l.strip()][:n]


def tfm(*args, stdin=None):
    """Runs tfm-tokenize; returns stdout (bytes); raises on failure."""
    r = subprocess.run([TOKENIZE, *args], input=stdin, capture_output=True)
    if r.returncode:
        raise RuntimeError(f"tfm-tokenize {' '.join(args)}: exit {r.returncode}: "
                           f"{r.stderr.decode(errors='replace')}")
    return r.stdout


def tfm_encode_lines(tok, texts, *extra):
    """tfm-tokenize encode of each text (one a line): a list of id lists."""
    data = "".join(t + "\n" for t in texts).encode()
    out = tfm("encode", "-q", "-t", tok, "--format", "jsonl", *extra, stdin=data)
    got = [json.loads(l)["ids"] for l in out.decode().splitlines()]
    assert len(got) == len(texts), (len(got), len(texts))
    return got


def tfm_encode_doc(tok, text, *extra):
    out = tfm("encode", "-q", "-t", tok, "--document", "--format", "jsonl", *extra,
              stdin=text.encode())
    ls = out.decode().splitlines()
    return json.loads(ls[0])["ids"] if ls else []


def tfm_decode(tok, seqs, *extra):
    """tfm-tokenize decode of each id list: the texts (each line's newline
    taken off)."""
    data = "".join(" ".join(map(str, s)) + "\n" for s in seqs).encode()
    out = tfm("decode", "-t", tok, *extra, stdin=data).decode("utf-8", "surrogateescape")
    assert out.endswith("\n") or not seqs
    got = out[:-1].split("\n") if seqs else []
    return got


def tfm_decode_doc(tok, ids, *extra):
    """tfm-tokenize decode of one id sequence given as .npy (decoded as one
    text with nothing added, so newlines are the text's)."""
    import numpy as np
    import io
    b = io.BytesIO()
    np.save(b, np.array(ids, dtype=np.int32))
    return tfm("decode", "-t", tok, *extra, stdin=b.getvalue()).decode("utf-8",
                                                                         "surrogateescape")
