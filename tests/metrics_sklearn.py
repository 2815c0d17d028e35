#!/usr/bin/env python3
# tfm-eval score, bleu and chrf judged by the reference libraries on random
# cases: scikit-learn (accuracy, F1 binary/macro/micro/weighted, MCC), SciPy
# (Pearson, Spearman with ties), seqeval (entity precision, recall and F1 in
# its default mode, on IOB2 tags, stray and mixed tags, and IOBES), and
# sacrebleu (corpus and sentence BLEU with the 13a tokenizer, chrF2, both
# with and without lowercasing, one to three references, empty lines; and a
# real translation-like corpus: the German messages of Debian's gettext
# catalogues and KJV verses, perturbed as a system's output would be).  The
# SQuAD v1.1 scores, which no reference library here computes, against the
# official script's definitions written out here.  The golden files
# (testdata/metrics) are checked by lib/metrics/taskmetrics_test.c and
# tests/eval_metrics.sh.
import gettext
import glob
import json
import math
import os
import random
import re
import string
import subprocess
import sys
import tempfile
import warnings
from collections import Counter

import sacrebleu
import scipy.stats
import seqeval.metrics
import sklearn.metrics as skm

warnings.filterwarnings("ignore")  # scikit-learn's and seqeval's on one-label inputs
BUILD = os.environ.get("TFM_BUILDDIR", os.getcwd())
REAL = 500 if os.environ.get("TFM_SANITIZED") else 1000
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
    check("f1_weighted", r["f1_weighted"],
          skm.f1_score(gold, pred, average="weighted", zero_division=0))
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


# ---- tagging: seqeval's default mode (conlleval's chunks) -----------------------
IOB2 = ["B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
MIXED = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG", "B-MISC", "E-LOC", "S-PER"]
IOBES = ["B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "E-LOC", "S-LOC", "S-ORG"]


def iob2_sentence(m):
    """valid IOB2: an entity is B-X I-X..."""
    out = []
    while len(out) < m:
        if rng.random() < 0.5:
            out.append("O")
            continue
        t = rng.choice(["PER", "LOC", "ORG"])
        out += ["B-" + t] + ["I-" + t] * rng.randint(0, 2)
    return out[:m]


def iobes_sentence(m):
    """valid IOBES: S-X alone, B-X I-X... E-X"""
    out = []
    while len(out) < m:
        r = rng.random()
        t = rng.choice(["PER", "LOC", "ORG"])
        if r < 0.4:
            out.append("O")
        elif r < 0.6:
            out.append("S-" + t)
        else:
            out += ["B-" + t] + ["I-" + t] * rng.randint(0, 2) + ["E-" + t]
    return out[:m]


def noisy(tags, pool):
    return [t if rng.random() < 0.75 else rng.choice(pool + ["O"]) for t in tags]


n_tag = {"IOB2": 0, "mixed": 0, "IOBES": 0}
for case in range(60):
    kind = ["IOB2", "mixed", "IOBES"][case % 3]
    gold, pred = [], []
    for _ in range(rng.randint(1, 12)):
        m = rng.randint(0, 15)
        if kind == "IOB2":
            g = iob2_sentence(m)
            p = iob2_sentence(m) if rng.random() < 0.2 else noisy(g, IOB2)
        elif kind == "IOBES":
            g = iobes_sentence(m)
            p = noisy(g, IOBES)
        else:
            g = [rng.choice(MIXED) for _ in range(m)]
            p = noisy(g, MIXED)
        gold.append(g)
        pred.append(p)
    r = run("score", "--task", "tag", "--tag-format", "lines",
            "--gold", write("g", [" ".join(x) for x in gold]),
            write("p", [" ".join(x) for x in pred]))
    check(f"{kind} tag precision", r["precision"], seqeval.metrics.precision_score(gold, pred))
    check(f"{kind} tag recall", r["recall"], seqeval.metrics.recall_score(gold, pred))
    check(f"{kind} tag f1", r["f1"], seqeval.metrics.f1_score(gold, pred))
    if any(gold):
        check(f"{kind} token accuracy", r["token_accuracy"],
              seqeval.metrics.accuracy_score(gold, pred))
    n_tag[kind] += 1
    # the same in CoNLL (token, tag; a blank line between sentences)
    if case % 6 == 0 and all(gold):
        conll = [l for g in gold for l in [f"w{i} {t}" for i, t in enumerate(g)] + [""]]
        r2 = run("score", "--task", "tag", "--gold", write("gc", conll),
                 write("p", [" ".join(x) for x in pred]))
        check(f"{kind} CoNLL tag f1", r2["f1"], seqeval.metrics.f1_score(gold, pred))


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

# ---- BLEU and chrF: sacrebleu ----------------------------------------------------
def judge_bleu(what, hyps, refs, lc):
    """tfm-eval bleu and chrf (corpus, --sentence) against sacrebleu."""
    args = []
    for k, ref in enumerate(refs):
        args += ["--ref", write(f"r{k}", ref)]
    if lc:
        args.append("--lowercase")
    hp = write("h", hyps)
    bleu = sacrebleu.metrics.BLEU(lowercase=lc)
    want = bleu.corpus_score(hyps, refs)
    r = run("bleu", *args, "--sentence", hp)
    check(f"{what} BLEU", r["bleu"], want.score, 1e-6)
    for k in range(4):
        check(f"{what} precision {k + 1}", r["precisions"][k], want.precisions[k], 1e-6)
    check(f"{what} bp", r["bp"], want.bp, 1e-9)
    check(f"{what} sys_len", r["sys_len"], want.sys_len, 0)
    check(f"{what} ref_len", r["ref_len"], want.ref_len, 0)
    if r["signature"] != bleu.get_signature().format():
        check(f"{what} signature {r['signature']}", 0, 1)
    sb = sacrebleu.metrics.BLEU(lowercase=lc, effective_order=True)
    for i, h in enumerate(hyps):
        check(f"{what} sentence BLEU {i}", r["sentences"][i]["bleu"],
              sb.sentence_score(h, [ref[i] for ref in refs]).score, 1e-6)
    chrf = sacrebleu.metrics.CHRF(lowercase=lc)
    c = run("chrf", *args, "--sentence", hp)
    check(f"{what} chrF", c["chrf"], chrf.corpus_score(hyps, refs).score, 1e-6)
    if c["signature"] != chrf.get_signature().format():
        check(f"{what} chrF signature {c['signature']}", 0, 1)
    for i, h in enumerate(hyps):
        check(f"{what} sentence chrF {i}", c["sentences"][i]["chrf"],
              chrf.sentence_score(h, [ref[i] for ref in refs]).score, 1e-6)
    return 2 + 2 * len(hyps)


VOCAB = ["the", "The", "house", "Haus", "ist", "groß", "Straße", "3.5", "1,000", "5-6", "x-7",
         "it's", "&amp;", "&quot;", "&lt;b&gt;", "(a)", "end.", "a,b", "--", "Ä", "ÖL", "é",
         "\u00a0", "\u3000", "\u2009", "?!", "$", "10%", "'quoted'", "<skipped>", "naïve", "日本",
         "İ", "ǅ", "ΣΑΣ", "“x”", "a.b.c", "1.5.", "-", "{}", "~", "ﬁ"]
n_bleu = 0
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
        hyps.append(" ".join(w) if rng.random() < 0.9 else "")
    n_bleu += judge_bleu("random", hyps, refs, lc)


def perturb(line):
    """a system's output: words dropped, replaced and swapped"""
    w = line.split()
    w = [x for x in w if rng.random() > 0.1]
    for i in range(len(w)):
        if rng.random() < 0.15:
            w[i] = rng.choice(VOCAB + w)
    for i in range(len(w) - 1):
        if rng.random() < 0.1:
            w[i], w[i + 1] = w[i + 1], w[i]
    return " ".join(w)


# a real corpus: Debian's German messages (and KJV verses)
german = []
for mo in sorted(glob.glob("/usr/share/locale/de/LC_MESSAGES/*.mo"))[:30]:
    try:
        with open(mo, "rb") as f:
            cat = gettext.GNUTranslations(f)._catalog
    except (OSError, UnicodeDecodeError):
        continue
    german += [v for k, v in cat.items() if isinstance(k, str) and k and isinstance(v, str)
               and "\n" not in v and "\r" not in v and 10 < len(v) < 200]
    if len(german) > 3000:
        break
try:
    kjv = subprocess.run(["bible", "-l", "79", "Gen1:1-Gen50:26"], capture_output=True,
                         timeout=60).stdout.decode("utf-8", "replace").split("\n")
except OSError:
    kjv = []
corpora = [("German messages", german[:REAL]), ("KJV verses", [l for l in kjv if l][:REAL])]
n_real = []
for what, refs in corpora:
    if len(refs) < 100:
        print(f"{what}: not installed here (skipped)")
        continue
    hyps = [perturb(l) for l in refs]
    refs2 = [perturb(l) for l in refs]
    hyps[::50] = [""] * len(hyps[::50])  # empty output lines
    judge_bleu(what, hyps, [refs], False)
    judge_bleu(what + " lowercased, two references", hyps, [refs, refs2], True)
    n_real.append(f"{what} ({len(refs)} lines)")

if failures:
    print(f"{failures} failures")
    sys.exit(1)
print(f"tfm-eval agrees with scikit-learn (60 label cases), SciPy (40 regression cases), "
      f"seqeval ({n_tag['IOB2']} IOB2, {n_tag['mixed']} stray-tag, {n_tag['IOBES']} IOBES "
      f"cases), the SQuAD script (30) and sacrebleu ({n_bleu} random BLEU/chrF scores, "
      f"and {', '.join(n_real) or 'no real corpus'})")
