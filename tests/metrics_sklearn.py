#!/usr/bin/env python3
# tfm-eval score, bleu and chrf against the reference tools on random cases:
# scikit-learn (accuracy, F1 binary/macro/micro, MCC) and SciPy (Pearson,
# Spearman with ties); for tags, spans, BLEU and chrF, which have no Debian
# package, the reference algorithms written out here in Python from their
# published definitions (seqeval's chunk rules, the SQuAD v1.1 script,
# sacrebleu's 13a regexes, exp smoothing and chrF), so Python's own regex
# and Unicode semantics check the C code's.
import json
import math
import os
import random
import re
import string
import subprocess
import sys
import tempfile
from collections import Counter

import numpy as np
import scipy.stats
import sklearn.metrics as skm

BUILD = os.environ.get("TFM_BUILDDIR", os.getcwd())
EVAL = os.path.join(BUILD, "tfm-eval")
rng = random.Random(12)
failures = 0
tmp = tempfile.mkdtemp(prefix="tfm-metrics-py.")


def write(name, lines):
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in lines))
    return path


def run(*args):
    out = subprocess.run([EVAL, "-q", "--json", *args], capture_output=True, check=True)
    return json.loads(out.stdout)


def check(what, got, want, tol=1e-7):
    global failures
    if want is None or (isinstance(want, float) and math.isnan(want)):
        ok = got is None
    else:
        ok = got is not None and abs(got - want) <= tol
    if not ok:
        failures += 1
        if failures < 20:
            print(f"FAIL {what}: got {got}, want {want}")


# ---- classification: scikit-learn ------------------------------------------
for case in range(60):
    k = rng.choice([2, 2, 3, 5, 8])
    labels = rng.choice([[str(i) for i in range(k)], [f"c{i}" for i in range(k)]])
    n = rng.randint(1, 200)
    gold = [rng.choice(labels) for _ in range(n)]
    p_right = rng.random()
    pred = [g if rng.random() < p_right else rng.choice(labels) for g in gold]
    pos = None
    args = []
    if k == 2 and rng.random() < 0.5:
        pos = labels[1]
        args = ["--pos-label", pos]
    elif labels[0] == "0" and len(set(gold) | set(pred)) <= 2 and "1" in set(gold) | set(pred):
        pos = "1"
    r = run("score", "--task", "classify", "--gold", write("g", gold), *args, write("p", pred))
    check("accuracy", r["accuracy"], skm.accuracy_score(gold, pred))
    check("f1_macro", r["f1_macro"], skm.f1_score(gold, pred, average="macro", zero_division=0))
    check("f1_micro", r["f1_micro"], skm.f1_score(gold, pred, average="micro", zero_division=0))
    check("mcc", r["mcc"], skm.matthews_corrcoef(gold, pred))
    if pos is not None:
        if r["pos_label"] != pos:
            failures += 1
            print(f"FAIL pos_label {r['pos_label']} want {pos}")
        kw = dict(labels=[pos], average="micro", zero_division=0)
        check("f1_pos", r["f1_pos"], skm.f1_score(gold, pred, **kw))
        check("precision_pos", r["precision_pos"], skm.precision_score(gold, pred, **kw))
        check("recall_pos", r["recall_pos"], skm.recall_score(gold, pred, **kw))

# ---- regression: SciPy -------------------------------------------------------
for case in range(40):
    n = rng.randint(2, 100)
    levels = rng.choice([3, 10, 1000])  # few levels: many ties
    x = [rng.randint(0, levels) / 4 for _ in range(n)]
    y = [xi * rng.uniform(-1, 2) + rng.gauss(0, 1) for xi in x]
    if case % 10 == 0:
        y = [2.5] * n  # constant: undefined
    r = run("score", "--task", "regress", "--gold", write("g", [repr(v) for v in x]),
            write("p", [repr(v) for v in y]))
    if len(set(x)) < 2 or len(set(y)) < 2:
        check("pearson of a constant", r["pearson"], None)
        check("spearman of a constant", r["spearman"], None)
        continue
    check("pearson", r["pearson"], scipy.stats.pearsonr(x, y)[0], 1e-9)
    check("spearman", r["spearman"], scipy.stats.spearmanr(x, y)[0], 1e-9)


# ---- tagging: seqeval's default (conlleval) chunks ---------------------------
def chunks(seq):
    flat = [t for s in seq for t in s + ["O"]]
    out, pt, ptype, begin = [], "O", "", 0
    for i, t in enumerate(flat + ["O"]):
        tag, typ = t[0], t[1:].split("-", maxsplit=1)[-1] or "_"
        end = (pt in "ES" or (pt in "BI" and tag in "BSO") or
               (pt != "O" and pt != "." and ptype != typ))
        start = (tag in "BS" or (pt in "ESO" and tag in "EI") or
                 (tag != "O" and tag != "." and ptype != typ))
        if end:
            out.append((ptype, begin, i - 1))
        if start:
            begin = i
        pt, ptype = tag, typ
    return set(out)


TAGS = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG", "B-MISC", "E-LOC", "S-PER"]
for case in range(40):
    gold, pred = [], []
    for _ in range(rng.randint(1, 12)):
        m = rng.randint(0, 15)
        g = [rng.choice(TAGS) for _ in range(m)]
        gold.append(g)
        pred.append([t if rng.random() < 0.7 else rng.choice(TAGS) for t in g])
    gc, pc = chunks(gold), chunks(pred)
    hit = len(gc & pc)
    P = hit / len(pc) if pc else 0
    R = hit / len(gc) if gc else 0
    F = 2 * P * R / (P + R) if P + R else 0
    flat_g = [t for s in gold for t in s]
    flat_p = [t for s in pred for t in s]
    r = run("score", "--task", "tag", "--tag-format", "lines",
            "--gold", write("g", [" ".join(s) for s in gold]),
            write("p", [" ".join(s) for s in pred]))
    check("tag precision", r["precision"], P)
    check("tag recall", r["recall"], R)
    check("tag f1", r["f1"], F)
    if flat_g:
        check("token accuracy", r["token_accuracy"],
              sum(a == b for a, b in zip(flat_g, flat_p)) / len(flat_g))


# ---- spans: the SQuAD v1.1 script ----------------------------------------------
def normalize_answer(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def squad_f1(p, g):
    pt, gt = normalize_answer(p).split(), normalize_answer(g).split()
    same = sum((Counter(pt) & Counter(gt)).values())
    if same == 0:
        return 0
    P, R = same / len(pt), same / len(gt)
    return 2 * P * R / (P + R)


WORDS = ["the", "The", "a", "An", "an", "cat", "Cat,", "théâtre", "«the»", "dog!", "x_the",
         "thé", "A-team", "ÉCOLE", "école", "the.", "1,000", "\u00a0", "and", "Straße", "_a"]
for case in range(30):
    items = []
    for _ in range(rng.randint(1, 10)):
        golds = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
                 for _ in range(rng.randint(1, 3))]
        pred = rng.choice(golds) if rng.random() < 0.3 else \
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))
        items.append((pred, golds))
    em = 100 * sum(max(normalize_answer(p) == normalize_answer(g) for g in gs)
                   for p, gs in items) / len(items)
    f1 = 100 * sum(max(squad_f1(p, g) for g in gs) for p, gs in items) / len(items)
    r = run("score", "--task", "span", "--gold", write("g", ["\t".join(gs) for _, gs in items]),
            write("p", [p for p, _ in items]))
    check("exact match", r["exact_match"], em)
    check("span f1", r["f1"], f1)

# ---- BLEU and chrF: sacrebleu's definitions --------------------------------------
RE13A = [(re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
         (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
         (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
         (re.compile(r"([0-9])(-)"), r"\1 \2 ")]


def tok13a(line, lc):
    if lc:
        line = line.lower()
    line = line.rstrip()
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        for a, b in (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">")):
            line = line.replace(a, b)
    line = f" {line} "
    for rx, rep in RE13A:
        line = rx.sub(rep, line)
    return line.split()


def ngrams(toks, n):
    return Counter(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1))


def bleu_stats(h, refs, lc):
    ht = tok13a(h, lc)
    rts = [tok13a(r, lc) for r in refs]
    closest = min(rts, key=lambda r: (abs(len(r) - len(ht)), len(r)))
    st = [len(ht), len(closest)]
    for n in range(1, 5):
        hc = ngrams(ht, n)
        mx = Counter()
        for rt in rts:
            for g, c in ngrams(rt, n).items():
                mx[g] = max(mx[g], c)
        st += [sum(min(c, mx[g]) for g, c in hc.items()), max(0, len(ht) - n + 1)]
    return st


def bleu(st, eff=False):
    sys_len, ref_len = st[0], st[1]
    correct, total = st[2::2], st[3::2]
    bp = 1.0 if sys_len >= ref_len else (math.exp(1 - ref_len / sys_len) if sys_len else 0.0)
    if not any(correct):
        return 0.0
    prec, smooth, order = [0.0] * 4, 1.0, 4
    for n in range(4):
        if total[n] == 0:
            break
        if eff:
            order = n + 1
        if correct[n] == 0:
            smooth *= 2
            prec[n] = 100 / (smooth * total[n])
        else:
            prec[n] = 100 * correct[n] / total[n]
    return bp * math.exp(sum(math.log(p) if p else -9999999999 for p in prec[:order]) / order)


def chr_grams(s, lc):
    s = "".join((s.lower() if lc else s).split())
    return [Counter(s[i:i + n] for i in range(len(s) - n + 1)) for n in range(1, 7)]


def chrf_f(st):
    p = r = 0.0
    eff = 0
    for n in range(6):
        h, rr, m = st[3 * n:3 * n + 3]
        if h > 0 and rr > 0:
            p += m / h
            r += m / rr
            eff += 1
    if not eff:
        return 0.0
    p, r = p / eff, r / eff
    return 100 * 5 * p * r / (4 * p + r) if p + r else 0.0


def chrf_stats(h, refs, lc):
    hg = chr_grams(h, lc)
    best, bf = None, -1
    for ref in refs:
        rg = chr_grams(ref, lc)
        st = []
        for a, b in zip(hg, rg):
            st += [sum(a.values()) if b else 0, sum(b.values()),
                   sum(min(c, b[g]) for g, c in a.items())]
        f = chrf_f(st)
        if f > bf:
            bf, best = f, st
    return best


VOCAB = ["the", "The", "house", "Haus", "ist", "groß", "Straße", "3.5", "1,000", "5-6", "x-7",
         "it's", "&amp;", "&quot;", "&lt;b&gt;", "(a)", "end.", "a,b", "--", "Ä", "ÖL", "é",
         "\u00a0", "\u3000", "\u2009", "?!", "$", "10%", "'quoted'", "<skipped>", "naïve", "日本"]
for case in range(40):
    nrefs = rng.choice([1, 1, 2, 3])
    lc = rng.random() < 0.3
    n = rng.randint(1, 8)
    refs = [[" ".join(rng.choice(VOCAB) for _ in range(rng.randint(0, 12))) for _ in range(n)]
            for _ in range(nrefs)]
    hyps = []
    for i in range(n):
        w = refs[0][i].split(" ")
        w = [x if rng.random() < 0.7 else rng.choice(VOCAB) for x in w if rng.random() < 0.9]
        hyps.append(" ".join(w))
    args = []
    for k in range(nrefs):
        args += ["--ref", write(f"r{k}", refs[k])]
    if lc:
        args.append("--lowercase")
    hp = write("h", hyps)
    stats = [bleu_stats(hyps[i], [r[i] for r in refs], lc) for i in range(n)]
    corpus = [sum(s[j] for s in stats) for j in range(10)]
    r = run("bleu", *args, "--sentence", hp)
    check("BLEU", r["bleu"], bleu(corpus), 1e-6)
    check("sys_len", r["sys_len"], corpus[0], 0)
    check("ref_len", r["ref_len"], corpus[1], 0)
    for i in range(n):
        check("sentence BLEU", r["sentences"][i]["bleu"], bleu(stats[i], eff=True), 1e-6)
    cst = [chrf_stats(hyps[i], [r[i] for r in refs], lc) for i in range(n)]
    c = run("chrf", *args, hp)
    check("chrF", c["chrf"], chrf_f([sum(s[j] for s in cst) for j in range(18)]), 1e-6)

if failures:
    print(f"{failures} failures")
    sys.exit(1)
print("tfm-eval score/bleu/chrf agree with scikit-learn, SciPy and the reference algorithms")
