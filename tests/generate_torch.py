#!/usr/bin/python3
"""tfm-generate against PyTorch: greedy decoding of the same model file with
the KV cache of scripts/bench/generate_ref.py (an independent PyTorch
implementation, float32).  The generated ids must be identical and every
reported log-probability within 1e-3 of PyTorch's log-softmax; also with
beam search the best hypothesis's score is checked against PyTorch's
log-probabilities of the same tokens."""
import json
import os
import subprocess
import sys
import tempfile

import torch

BUILD = os.environ.get("TFM_BUILDDIR", ".")
SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "scripts", "bench"))
import generate_ref  # noqa: E402

MK = os.path.join(BUILD, "tests", "mkmodel")
GEN = os.path.join(BUILD, "tfm-generate")


def run(*args):
    out = subprocess.run([GEN, "-q", "--threads", "2", *args], check=True,
                         capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines()]


def logprobs(m, prompt, ids):
    """Log-probability of each of ids after prompt, from the full forward."""
    out = []
    seq = list(prompt)
    for t in ids:
        logits = m.forward(torch.tensor(seq), 0, [None] * m.L)
        out.append(float(torch.log_softmax(logits, -1)[t]))
        seq.append(t)
    return out


def main():
    torch.set_num_threads(2)
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        for shape in (["--layers", "2", "--heads", "4", "--embd", "64", "--vocab", "97"],
                      ["--layers", "1", "--heads", "2", "--embd", "192", "--vocab", "300"]):
            path = os.path.join(d, "m.st")
            subprocess.run([MK, path, *shape, "--context", "48", "--scale", "4", "--seed", "3"],
                           check=True)
            t, conf = generate_ref.load(path)
            m = generate_ref.GPT(t, conf)
            prompt = [5, 17, 42, 8, 23, 61, 3, 9, 14, 27, 33, 50]
            with torch.no_grad():
                want = m.greedy(prompt, 30)
                r = run("-m", path, "--ids", "--greedy", "--ignore-eos", "-n", "30", "--json",
                        " ".join(map(str, prompt)))[0]
                if r["ids"] != want:
                    print("FAIL %s: ids\n tfm   %s\n torch %s" % (shape, r["ids"], want))
                    fails += 1
                lp = logprobs(m, prompt, r["ids"])
                err = max(abs(a - b) for a, b in zip(lp, r["logprobs"]))
                print("%s: greedy ids equal, max |logprob diff| %.2e" % (shape, err))
                if err > 1e-3:
                    print("FAIL: log-probabilities differ by %g" % err)
                    fails += 1
                b = run("-m", path, "--ids", "--beam", "4", "--lenpen", "0", "--ignore-eos",
                        "-n", "8", "--json", " ".join(map(str, prompt)))[0]
                s = sum(logprobs(m, prompt, b["ids"]))
                g = sum(logprobs(m, prompt, want[:8]))
                print("beam score %.4f, torch %.4f, greedy %.4f" % (b["score"], s, g))
                if abs(b["score"] - s) > 1e-3 * 8 or s < g - 1e-4:
                    print("FAIL: beam score")
                    fails += 1
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
