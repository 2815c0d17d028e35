#!/usr/bin/python3
"""ONNX Runtime baseline of scripts/bench/embed from Python (the pip
onnxruntime of the references' venv, scripts/references --path): the same
as embed_ort.js (npm onnxruntime-node), the same session options, ids,
padding, pooling and JSON line.

  embed_ort.py MODEL.onnx LINES REPEATS THREADS [VECS]   -> one JSON line

The PyTorch export of the same BERT (embed_ref.py export, or its 8-bit
graph: embed_ref.py quantize); "w<i>" -> 5 + i, [CLS] 2, [SEP] 3; the batch
padded to its longest line with an attention mask; intra-op threads
THREADS, one inter-op thread, sequential, graph optimisation 'all'; mean
pooling over the real tokens; median ms of REPEATS runs after one warm-up.
VECS: the last run's pooled vectors as raw float32 [lines, width]."""
import json
import resource
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    model, path, repeats, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    vecs = sys.argv[5] if len(sys.argv) > 5 else None
    with open(path) as f:
        seqs = [[2] + [5 + int(w[1:]) for w in l.split()] + [3] for l in f.read().splitlines()]
    B, T = len(seqs), max(len(s) for s in seqs)
    ids = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), np.int64)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = s
        mask[b, :len(s)] = 1
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    feeds = dict(input_ids=ids, attention_mask=mask, token_type_ids=np.zeros_like(ids))
    ms, v = [], None
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        out = sess.run(["last_hidden_state"], feeds)[0]
        v = (out * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)  # mean pooling
        if r:
            ms.append((time.perf_counter() - t0) * 1e3)
    if vecs:
        v.astype(np.float32).tofile(vecs)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(dict(ms=float(np.median(ms)), padded_tokens=B * T,
                          peak_rss_mb=round(rss, 1), check=float(v[0, 0]))))


if __name__ == "__main__":
    main()
