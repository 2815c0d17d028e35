# tfm-embed on a q8_0 file (model/forward.h's 8-bit products) against an
# independent computation here (struct + json + numpy, float64): each
# block, from tfm's own hidden states of the layer below (so that every
# block starts from the same float32 numbers), recomputed with its 8-bit
# products as tensor/q8.h defines them -- each input row quantized to 8
# bits per block of 32 (d = max|x|/127 in float32, x·(1/d) rounded half
# to even), exact integer block sums, times the two scales -- and float64
# everywhere else.  --q8-gemm on forces the 8-bit products (else they
# run where timing finds them faster), off the float32 ones over the
# widened weights, which a second recomputation (float32 activations)
# must match instead; unset, the run must be close to both.  Models: an encoder (post-LN), a decoder (pre-LN,
# causal) and an encoder-decoder's encoder, from tests/mkmodel, width 64
# (blocks of 32 along every matrix's input).
#
# The 8-bit numbers are discontinuous: where tfm's float32 and the
# float64 here put an activation on either side of a rounding step, one
# value moves by one step (rare: about 1e-4 of the values).  So the
# typical (median) difference must be float32's rounding, the largest
# within such a step, and the recomputation without 8-bit activations
# must be clearly farther (the check tells the two products apart).
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

B = os.environ.get("TFM_BUILDDIR", ".")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def run(*args, env=None, stdin=None):
    r = subprocess.run([os.path.join(B, args[0]), *args[1:]], input=stdin, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit("%s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr.decode()))
    return r


NP = {"F32": "<f4", "F16": "<f2", "I8": "i1"}


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for name, t in h.items():
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(b[8 + n + lo:8 + n + hi], dtype=NP[t["dtype"]]) \
            .reshape(t["shape"])
    return out


def matrix(t, name):
    """(int values [out, in], float scales [out, in/32]) of an 8-bit matrix"""
    assert t[name].dtype == np.int8, name
    return t[name].astype(np.float64), t[name + ".q8_scale"].astype(np.float64)


def quantize(x):
    """tfm_q8_quantize in float32: (values, scales) per block of 32"""
    R, K = x.shape
    xb = x.astype(np.float32).reshape(R, K // 32, 32)
    d = (np.abs(xb).max(axis=2) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.rint((xb * inv[:, :, None]).astype(np.float32)).astype(np.float64)
    return q, d.astype(np.float64)


def linear(x, W, b, q8):
    """x [R, K] · W + b, W = (values, scales) [out, in]"""
    Wq, Wd = W
    N, K = Wq.shape
    if not q8:  # float32 activations times the widened weights
        w = (Wq.reshape(N, K // 32, 32) * Wd[:, :, None]).reshape(N, K)
        return x.astype(np.float32).astype(np.float64) @ w.T + b
    q, d = quantize(x)
    s = np.einsum("rbi,nbi->rnb", q.reshape(len(x), K // 32, 32), Wq.reshape(N, K // 32, 32))
    return (s * d[:, None, :] * Wd[None, :, :]).sum(axis=2) + b


def ln(x, w, b):
    m = x.mean(axis=1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def block(t, p, x, lens, causal, pre, q8, C, NH):
    """one block over the packed rows x [Σ lens, C]"""
    W = lambda n: matrix(t, p + n + ".weight")
    bias = lambda n: t[p + n + ".bias"].astype(np.float64)
    a_in = ln(x, t[p + "ln_1.weight"], bias("ln_1")) if pre else x
    qkv = linear(a_in, W("attn.c_attn"), bias("attn.c_attn"), q8)
    HS = C // NH
    att = np.zeros((len(x), C))
    off = 0
    for T in lens:
        for h in range(NH):
            qh, kh, vh = (qkv[off:off + T, j * C + h * HS:j * C + (h + 1) * HS] for j in range(3))
            sc = qh @ kh.T / np.sqrt(HS)
            if causal:
                sc = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, sc)
            e = np.exp(sc - sc.max(axis=1, keepdims=True))
            att[off:off + T, h * HS:(h + 1) * HS] = (e / e.sum(axis=1, keepdims=True)) @ vh
        off += T
    x = x + linear(att, W("attn.c_proj"), bias("attn.c_proj"), q8)
    if not pre:
        x = ln(x, t[p + "ln_1.weight"], bias("ln_1"))
    m_in = ln(x, t[p + "ln_2.weight"], bias("ln_2")) if pre else x
    hid = gelu(linear(m_in, W("mlp.c_fc"), bias("mlp.c_fc"), q8))
    x = x + linear(hid, W("mlp.c_proj"), bias("mlp.c_proj"), q8)
    if not pre:
        x = ln(x, t[p + "ln_2.weight"], bias("ln_2"))
    return x


CASES = [
    ("encoder, post-LN", ["model.kind=encoder", "model.norm=post"], "", False, False, 2),
    ("decoder, pre-LN", [], "", True, True, 2),
    ("encoder-decoder's encoder", ["model.kind=encoder-decoder", "model.n_enc_layer=2"],
     "enc.", False, True, 2),
]
C, NH = 64, 2
LINES = ["hello world", "a", "the cat sat on the mat", "abc def ghi jkl mno pqr stu vwx",
         "one more line of text for the model to read, a longer one"]

with tempfile.TemporaryDirectory() as d:
    P = lambda f: os.path.join(d, f)
    text = "".join(l + "\n" for l in LINES)
    open(P("corpus.txt"), "w").write(text)
    for name, sets, pre_name, causal, pre, L in CASES:
        args = ["tests/mkmodel", P("m.st"), "--text", P("corpus.txt"), "--layers", str(L),
                "--heads", str(NH), "--embd", str(C), "--context", "64", "--scale", "2"]
        for kv in sets:
            args += ["--set", kv]
        run(*args)
        run("tfm-train", "--convert", "q8_0", P("m.st"), "-o", P("q.st"))
        t = read_st(P("q.st"))
        check(t[pre_name + "h.0.mlp.c_fc.weight"].dtype == np.int8, "%s: 8-bit file" % name)
        tops = {}
        for mode in ("on", "off", "auto"):
            if mode == "auto":  # each shape either way, as timing finds: runs, and is close
                run("tfm-embed", "-q", "-m", P("q.st"), "--pool", "none", "-o", P("h.npy"),
                    stdin=text.encode())
                top = np.load(P("h.npy")).astype(np.float64)
                for m in ("on", "off"):
                    dev = np.median(np.abs(top - tops[m])) / np.abs(tops[m]).max()
                    check(dev < 1e-2, "%s: timed choice's top layer %g from %s's" % (name, dev, m))
                continue
            hs = []
            for l in range(L + 1):
                run("tfm-embed", "-q", "-m", P("q.st"), "--pool", "none", "--layers", str(l),
                    "--q8-gemm", mode, "-o", P("h.npy"), stdin=text.encode())
                hs.append(np.load(P("h.npy")).astype(np.float64))
            tops[mode] = hs[L]
            offs = np.load(P("h.offsets.npy"))
            lens = [int(b - a) for a, b in zip(offs[:-1], offs[1:])]
            for l in range(L):
                p = "%sh.%d." % (pre_name, l)
                got = hs[l + 1]
                want = {}
                for q8 in (True, False):
                    y = block(t, p, hs[l], lens, causal, pre, q8, C, NH)
                    if pre and l == L - 1:
                        y = ln(y, t[pre_name + "ln_f.weight"], t[pre_name + "ln_f.bias"])
                    want[q8] = y
                same, other = want[mode == "on"], want[mode != "on"]
                scale = np.abs(same).max()
                err = np.abs(got - same)
                med, worst = np.median(err) / scale, err.max() / scale
                med_other = np.median(np.abs(got - other)) / scale
                print("# %s, --q8-gemm %s, block %d: median %.2g, largest %.2g of max|x|; "
                      "the other product's median %.2g" % (name, mode, l, med, worst, med_other))
                check(med < 1e-6, "%s %s block %d: median difference %g" % (name, mode, l, med))
                check(worst < 2e-2, "%s %s block %d: largest difference %g" % (name, mode, l,
                                                                              worst))
                check(med_other > 30 * med, "%s %s block %d: the 8-bit and float32 products "
                      "are not told apart (%g, %g)" % (name, mode, l, med, med_other))

print("q8_embed: %d failures" % failures)
sys.exit(1 if failures else 0)
