#!/usr/bin/python3
"""Long contexts through the inference forward, judged by transformers.

A GPT2LMHeadModel folder of 4,096 positions (width 64, 2 layers, 4 heads,
random weights) made and saved by transformers; 4,096 random ids:
- tfm-eval perplexity --context 4096 (one window, tiled attention: past
  1,024 keys no T x T scores are held) = exp of model(ids, labels=ids)'s
  loss to 1e-4, and --context 3000 --stride 1000 = transformers' sliding
  window over the same ids;
- tfm-eval's peak memory stays below what one layer's T x T attention
  probabilities alone would take (4 heads x 4096^2 floats = 256 MiB), and
  below what the [T, V] logits of the window would;
- tfm-embed --pool none of a 3,000-token text = the last hidden state
  (output_hidden_states) to 1e-4.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tokenizers  # noqa: F401  (the skip of tests/run-python)
import torch
import transformers  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_lib import EMBED, EVAL, TOL, run  # noqa: E402
from hf_gpt2_lib import make_model, train_tokenizer  # noqa: E402

T = 4096
SANITIZED = bool(os.environ.get("TFM_SANITIZED"))


def peak_rss_mib(cmd):
    """(completed process, the child's peak resident set in MiB), the
    child run alone so that RUSAGE_CHILDREN is its own."""
    code = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stdout.write(r.stdout)\nsys.stderr.write(r.stderr)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(r.returncode)\n")
    r = subprocess.run([sys.executable, "-c", code] + cmd, capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    return r, int(lines[-1]) / 1024.0


def main():
    bad = []
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as top:
        raw, tok = train_tokenizer(top)
        V = len(tok)
        m = make_model(V, 7, dims=dict(n_positions=T, n_embd=64, n_layer=2, n_head=4))
        # weights well away from their start, but scores of moderate size
        # over 4,096 keys (the library's random scale makes them peaky)
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.endswith("c_attn.weight"):
                    p.mul_(0.3)
        d = os.path.join(top, "long")
        m.save_pretrained(d)
        tok.save_pretrained(d)
        m = m.float().eval()
        rng = np.random.default_rng(3)
        ids = rng.integers(1, V, size=T).tolist()
        npy = os.path.join(top, "ids.npy")
        np.save(npy, np.array(ids, np.int32))

        with torch.no_grad():
            ref = float(np.exp(m(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()))
        cmd = [EVAL, "perplexity", "-m", d, "--tokens", npy, "--no-bos", "--context", str(T),
               "--json", "-q"]
        r, rss = peak_rss_mib(cmd)
        if r.returncode != 0:
            bad.append(f"tfm-eval perplexity --context {T}: {r.stderr.strip()}")
        else:
            o = json.loads(r.stdout)
            rel = abs(o["perplexity"] - ref) / ref
            print(f"  tfm-eval perplexity --context {T}: {o['perplexity']:.6f}, transformers "
                  f"{ref:.6f} (relative {rel:.1e}); peak RSS {rss:.0f} MiB")
            if not rel <= TOL or o["tokens"] != T - 1:
                bad.append(f"perplexity {o['perplexity']} over {o['tokens']} tokens, "
                           f"transformers {ref} over {T - 1}")
            # T x T probabilities of one layer: 4 heads of 4096^2 floats
            probs = 4 * T * T * 4 / 2**20
            logits = T * V * 4 / 2**20
            if not SANITIZED and rss >= min(probs, 64 + logits):
                bad.append(f"tfm-eval perplexity at {T} tokens peaked at {rss:.0f} MiB: "
                           f"the attention of one layer alone is {probs:.0f} MiB")

        # transformers' sliding window (its perplexity guide)
        N, S = 3000, 1000
        w = ids[:N + S * ((len(ids) - N) // S)]
        np.save(npy, np.array(w, np.int32))
        nll, count, prev = 0.0, 0, 0
        for begin in range(0, len(w), S):
            end = min(begin + N, len(w))
            trg = end - prev
            lab = torch.tensor([w[begin:end]])
            lab[:, :-trg] = -100
            with torch.no_grad():
                loss = m(torch.tensor([w[begin:end]]), labels=lab).loss.item()
            k = int((lab[:, 1:] != -100).sum())
            nll += loss * k
            count += k
            prev = end
            if end == len(w):
                break
        ref = float(np.exp(nll / count))
        r = run([EVAL, "perplexity", "-m", d, "--tokens", npy, "--no-bos", "--context", str(N),
                 "--stride", str(S), "--json", "-q"])
        if r.returncode != 0:
            bad.append(f"tfm-eval perplexity --context {N} --stride {S}: {r.stderr.strip()}")
        else:
            o = json.loads(r.stdout)
            rel = abs(o["perplexity"] - ref) / ref
            print(f"  --context {N} --stride {S}: {o['perplexity']:.6f}, transformers' sliding "
                  f"window {ref:.6f} (relative {rel:.1e})")
            if not rel <= TOL:
                bad.append(f"sliding window: {o['perplexity']}, transformers {ref}")

        # hidden states of a long text through tfm-embed
        corpus = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata",
                              "gpt2", "corpus.txt")
        text = open(corpus, encoding="utf-8").read().replace("\n", " ")
        tids = tok(text).input_ids
        while len(tids) < 3000:
            text = text + " " + text
            tids = tok(text).input_ids
        cut = tok.decode(tids[:3000])
        tids = tok(cut).input_ids
        out = os.path.join(top, "h.npy")
        r = run([EMBED, "-q", "-m", d, "--pool", "none", "-o", out], input=cut + "\n")
        if r.returncode != 0:
            bad.append(f"tfm-embed --pool none of {len(tids)} tokens: {r.stderr.strip()}")
        else:
            got = np.load(out)
            with torch.no_grad():
                want = m(torch.tensor([tids]), output_hidden_states=True).hidden_states[-1][0]
            want = want.numpy()
            if got.shape != want.shape:
                bad.append(f"tfm-embed: shape {got.shape}, transformers {want.shape}")
            else:
                err = float(np.abs(got - want).max())
                print(f"  tfm-embed --pool none, {len(tids)} tokens: largest difference "
                      f"{err:.1e}")
                if not err <= TOL:
                    bad.append(f"tfm-embed hidden states differ by {err}")
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
