"""The driver of scripts/bench/longctx (see there): makes the folder, runs
tfm-eval, PyTorch and (with --ggml) llama.cpp in child processes, prints
the lines and the table."""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD_TORCH = r"""
import json, sys, time, resource
import numpy as np, torch
from transformers import GPT2LMHeadModel
d, npy, threads, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
m = GPT2LMHeadModel.from_pretrained(d, attn_implementation="sdpa").eval()
ids = torch.from_numpy(np.load(npy).astype(np.int64))[None]
times = []
with torch.no_grad():
    for i in range(runs + 1):
        t0 = time.perf_counter()
        loss = m(ids, labels=ids).loss.item()
        if i:
            times.append(time.perf_counter() - t0)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": sorted(times)[len(times) // 2], "loss": loss, "rss": rss}))
"""

CHILD_RSS = r"""
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, file=sys.stderr)
sys.exit(r.returncode)
"""


def ggml_file(a, d):
    """The folder as llama.cpp's GGUF (f32): tfm's file of it
    (tfm-train --convert), then generate_ggml.py; None on failure."""
    here = os.path.dirname(os.path.abspath(__file__))
    st, gguf = os.path.join(a.work, "model.safetensors"), os.path.join(a.work, "model.gguf")
    train = os.path.join(os.path.dirname(a.eval), "tfm-train")
    for cmd in ([train, "--convert", "f32", d, "-o", st],
                [sys.executable, os.path.join(here, "generate_ggml.py"), st, gguf, "--vocab-prefix"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print(f"longctx: ggml skipped: {' '.join(cmd[:2])}: {r.stderr.strip()[-300:]}",
                  file=sys.stderr)
            return None
    return gguf


def rng_ids(npy):
    import numpy as np
    path = npy[:-4] + ".txt"
    with open(path, "w") as f:
        f.write(" ".join(map(str, np.load(npy).tolist())))
    return path


def ggml_run(a, gguf, T, ids):
    """(ms per token, peak MiB) of llama.cpp over the ids, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, NODE_PATH=a.ggml, UV_THREADPOOL_SIZE="1")
    r = subprocess.run(["node", os.path.join(here, "longctx_ggml.mjs"), gguf, "--ids", ids,
                        "--threads", str(a.threads), "--runs", str(a.runs)],
                       capture_output=True, text=True, env=env)
    out = dict(x.split("=", 1) for x in r.stdout.split() if x.startswith(("ms_per", "peak")))
    if r.returncode or "ms_per_token" not in out:
        print(f"longctx: llama.cpp at {T}: {r.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    for line in r.stdout.splitlines():
        if line.startswith(("ggml node-llama-cpp", "ggml cpu_backend")) and not ggml_run.said:
            print(line)
    ggml_run.said = True
    return float(out["ms_per_token"]), float(out["peak_mib"])


ggml_run.said = False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="1024 4096 16384 32768")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ggml", help="node-llama-cpp's node_modules: llama.cpp too")
    a = ap.parse_args()
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    lengths = [int(x) for x in a.lengths.split()]
    V = 512
    torch.manual_seed(1)
    m = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=max(lengths), n_embd=a.embd,
                                   n_layer=a.layers, n_head=a.heads))
    d = os.path.join(a.work, "model")
    m.save_pretrained(d)
    del m
    gguf = None
    if a.ggml:
        gguf = ggml_file(a, d)
    print(f"longctx: GPT-2 shape width {a.embd}, {a.layers} layers, {a.heads} heads, "
          f"vocabulary {V}; threads {a.threads}; median of {a.runs}")
    rows = []
    rng = np.random.default_rng(2)
    for T in lengths:
        npy = os.path.join(a.work, f"ids{T}.npy")
        np.save(npy, rng.integers(0, V, size=T).astype(np.int32))
        secs, rss, ce = [], 0.0, None
        for _ in range(a.runs):
            r = subprocess.run([sys.executable, "-c", CHILD_RSS, a.eval, "perplexity", "-m", d,
                                "--tokens", npy, "--no-bos", "--context", str(T), "--json", "-q",
                                "--threads", str(a.threads)], capture_output=True, text=True)
            if r.returncode:
                print(f"longctx: tfm-eval at {T}: {r.stderr.strip()}", file=sys.stderr)
                break
            o = json.loads(r.stdout)
            secs.append(o["seconds"])
            ce = o["cross_entropy"]
            rss = max(rss, float(r.stderr.strip().splitlines()[-1]))
        r = subprocess.run([sys.executable, "-c", CHILD_TORCH, d, npy, str(a.threads),
                            str(a.runs)], capture_output=True, text=True)
        pt = json.loads(r.stdout) if r.returncode == 0 else None
        if not pt:
            print(f"longctx: PyTorch at {T}: {r.stderr.strip()[-300:]}", file=sys.stderr)
        if secs:
            t = statistics.median(secs)
            print(f"tfm T={T} ms_per_token={1e3 * t / T:.4f} peak_rss_mib={rss:.0f} "
                  f"cross_entropy={ce:.6f}")
        if pt:
            print(f"torch T={T} ms_per_token={1e3 * pt['seconds'] / T:.4f} "
                  f"peak_rss_mib={pt['rss']:.0f} cross_entropy={pt['loss']:.6f}")
        gg = ggml_run(a, gguf, T, rng_ids(npy)) if gguf else None
        if gg:
            print(f"ggml T={T} ms_per_token={gg[0]:.4f} peak_rss_mib={gg[1]:.0f}")
            if secs:
                rows.append(("longctx", f"T={T}", "ms_per_token", 1e3 * t / T,
                             "llama.cpp flash attention", gg[0]))
                rows.append(("longctx", f"T={T}", "peak_rss_mib", rss,
                             "llama.cpp flash attention", gg[1]))
        if secs and pt:
            label = f"PyTorch {torch.__version__} sdpa (pip)"
            rows.append(("longctx", f"T={T}", "ms_per_token", 1e3 * t / T, label,
                         1e3 * pt["seconds"] / T))
            rows.append(("longctx", f"T={T}", "peak_rss_mib", rss, label, pt["rss"]))
    print("bench\tworkload\tmetric\ttfm\tpeer\tpeer_value\ttfm/peer")
    for b, w, k, v, p, pv in rows:
        print(f"{b}\t{w}\t{k}\t{v:.4f}\t{p}\t{pv:.4f}\t{v / pv:.3f}")


if __name__ == "__main__":
    main()
