#!/usr/bin/python3
"""Write a tfm GPT-2-style model file (safetensors, HF GPT-2 names) as a
GGUF v3 file that llama.cpp (ggml) loads as architecture "gpt2", for the
ggml baseline of scripts/bench/generate.

  generate_ggml.py MODEL.safetensors OUT.gguf [--type f32|f16|bf16|q8_0]
                   [--compare TFM.safetensors] [--tokenizer testdata/gpt2]

MODEL holds f32 weights.  --type f32 (the default) copies them unchanged;
the others store the matrices as llama.cpp would from that f32 source:
  q8_0: as llama-quantize's Q8_0 (quantize_row_q8_0_ref in ggml-quants.c):
        each row cut into blocks of 32, d = amax/127 (float32), the values
        round(x * (1/d)) rounded half away from zero (C's roundf), d stored
        as float16 (round to nearest even); token_embd and the block
        matrices are Q8_0, position_embd stays f32 (llama-quantize leaves
        positional embeddings alone), vectors stay f32.
  f16, bf16: every 2-D tensor (position_embd too, as convert_hf_to_gguf
        --outtype writes it) rounded to nearest even; vectors stay f32.
--compare names tfm's file of the same type (tfm-train --convert): the
script prints how many stored values (8-bit values and scales, or 16-bit
values) differ between the two, so a benchmark knows whether both systems
decode the same weights.

GGUF lists a tensor's dimensions
innermost first (ggml's ne[0] is the contiguous one), so a row-major numpy
array of shape [rows, cols] is written with dims (cols, rows).  llama.cpp
wants the linear weights as [out, in] rows (ne = {in, out}); tfm keeps GPT-2's
Conv1D layout [in, out], so those four matrices per layer are transposed:

  wte.weight                -> token_embd.weight      (also the tied output)
  wpe.weight                -> position_embd.weight
  h.N.ln_1.{weight,bias}    -> blk.N.attn_norm.*
  h.N.attn.c_attn.*         -> blk.N.attn_qkv.*       (weight transposed)
  h.N.attn.c_proj.*         -> blk.N.attn_output.*    (weight transposed)
  h.N.ln_2.*                -> blk.N.ffn_norm.*
  h.N.mlp.c_fc.*            -> blk.N.ffn_up.*         (weight transposed)
  h.N.mlp.c_proj.*          -> blk.N.ffn_down.*       (weight transposed)
  ln_f.*                    -> output_norm.*
  lm_head.weight            -> output.weight          (untied models only)

The tokenizer metadata (GPT-2 byte-level BPE: the 50257 tokens of
encoder.json in id order, the merges of vocab.bpe; with --vocab-prefix a
smaller model's first V - 1 of them and their merges, <|endoftext|> last)
is there because llama.cpp refuses a model without a vocabulary; the
benchmarks feed token ids."""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

ALIGN = 32
# GGUF metadata value types
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9
# ggml tensor types and llama.cpp's file types (llama_ftype) for them
GGML_TYPE = {"f32": 0, "f16": 1, "q8_0": 8, "bf16": 30}
FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}
QK8_0 = 32


def q8_0(rows):
    """llama.cpp's quantize_row_q8_0_ref over each row of rows [N, K]:
    (q int8 [N, K], d float16 [N, K/32])."""
    N, K = rows.shape
    if K % QK8_0:
        sys.exit("generate_ggml.py: rows %d wide are not a multiple of %d" % (K, QK8_0))
    q = np.empty((N, K), dtype=np.int8)
    d16 = np.empty((N, K // QK8_0), dtype=np.float16)
    for r in range(0, N, 2048):  # in slices: the float64 temporaries stay small
        blk = np.asarray(rows[r:r + 2048], dtype=np.float32).reshape(-1, K // QK8_0, QK8_0)
        d = np.abs(blk).max(axis=2) / np.float32(127)          # float32, as in C
        with np.errstate(divide="ignore"):
            inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        x = (blk * inv[:, :, None]).astype(np.float32).astype(np.float64)
        q[r:r + 2048] = np.trunc(x + np.copysign(0.5, x)).reshape(-1, K)  # roundf: ties away from 0
        d16[r:r + 2048] = d                                    # to nearest even
    return q, d16


def bf16(a):
    """ggml_compute_fp32_to_bf16: round to nearest even (quiet NaN kept)."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    h = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    h[nan] = ((u[nan] >> 16) | 64).astype("<u2")
    return h


def nbytes(arr, typ):
    n = arr.size
    return n * 4 if typ == "f32" else n * 2 if typ in ("f16", "bf16") else n // QK8_0 * 34


def encode(arr, typ):
    """The bytes ggml stores for the rows of arr as typ."""
    if typ == "f32":
        return np.ascontiguousarray(arr, dtype="<f4").tobytes()
    if typ == "f16":
        return np.ascontiguousarray(arr, dtype="<f4").astype("<f2").tobytes()
    if typ == "bf16":
        return bf16(arr).tobytes()
    q, d = q8_0(arr)                                       # block_q8_0: d, then 32 qs
    N, nb = d.shape
    rec = np.empty((N, nb), dtype=[("d", "<f2"), ("qs", "i1", (QK8_0,))])
    rec["d"] = d
    rec["qs"] = q.reshape(N, nb, QK8_0)
    return rec.tobytes()


def load_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {}) or {}
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            sys.exit("generate_ggml.py: %s is %s, only F32 is handled" % (name, t["dtype"]))
        b, e = t["data_offsets"]
        tensors[name] = np.frombuffer(data[b:e], dtype=np.float32).reshape(t["shape"])
    return tensors, meta.get("config", "")


def cfg_key(cfg, key, default):
    m = re.search(r"^\s*%s:\s*(\S+)" % key, cfg, re.M)
    return m.group(1) if m else default


class Writer:
    """GGUF v3: header, metadata key/values, tensor infos, padding, data."""

    def __init__(self):
        self.kv = []       # encoded key/value records
        self.tensors = []  # (name, array)

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def add(self, key, vtype, value):
        rec = self._str(key) + struct.pack("<I", vtype)
        if vtype == U32:
            rec += struct.pack("<I", value)
        elif vtype == I32:
            rec += struct.pack("<i", value)
        elif vtype == F32:
            rec += struct.pack("<f", value)
        elif vtype == BOOL:
            rec += struct.pack("<B", 1 if value else 0)
        elif vtype == STR:
            rec += self._str(value)
        else:
            raise ValueError(vtype)
        self.kv.append(rec)

    def add_array(self, key, etype, values):
        rec = self._str(key) + struct.pack("<IIQ", ARR, etype, len(values))
        if etype == STR:
            rec += b"".join(self._str(v) for v in values)
        elif etype == I32:
            rec += np.asarray(values, dtype="<i4").tobytes()
        else:
            raise ValueError(etype)
        self.kv.append(rec)

    def add_tensor(self, name, arr, typ="f32"):
        self.tensors.append((name, arr, typ))

    def write(self, path):
        infos, offset, layout = [], 0, []
        for name, arr, typ in self.tensors:
            dims = list(reversed(arr.shape))  # innermost first
            infos.append(self._str(name) + struct.pack("<I", len(dims)) +
                         struct.pack("<%dQ" % len(dims), *dims) +
                         struct.pack("<IQ", GGML_TYPE[typ], offset))
            layout.append(offset)
            offset += (nbytes(arr, typ) + ALIGN - 1) // ALIGN * ALIGN
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for rec in self.kv:
                f.write(rec)
            for rec in infos:
                f.write(rec)
            f.write(b"\0" * (-f.tell() % ALIGN))
            start = f.tell()
            for (name, arr, typ), off in zip(self.tensors, layout):
                f.write(b"\0" * (start + off - f.tell()))
                raw = encode(arr, typ)
                assert len(raw) == nbytes(arr, typ)
                f.write(raw)
            f.write(b"\0" * (-(f.tell() - start) % ALIGN))
        os.replace(tmp, path)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--tokenizer", default=os.path.join(here, "..", "..", "testdata", "gpt2"),
                    help="directory with encoder.json and vocab.bpe")
    ap.add_argument("--type", default="f32", choices=sorted(GGML_TYPE),
                    help="how the matrices are stored (default f32)")
    ap.add_argument("--vocab-prefix", action="store_true",
                    help="a model of fewer tokens than the tokenizer: its first V - 1 "
                         "tokens (256 bytes, then merges in order) and <|endoftext|> last")
    ap.add_argument("--compare", metavar="TFM.safetensors",
                    help="count the stored values that differ from tfm's file of this type")
    a = ap.parse_args()

    t, cfg = load_safetensors(a.model)
    if cfg_key(cfg, "norm", "pre") != "pre":
        sys.exit("generate_ggml.py: llama.cpp's gpt2 is pre-LN; this model is not")
    if cfg_key(cfg, "bias", "true") not in ("true", "1"):
        sys.exit("generate_ggml.py: llama.cpp's gpt2 has linear biases; this model has none")
    act = cfg_key(cfg, "activation", "gelu")
    if act not in ("gelu", "gelu_tanh"):
        sys.exit("generate_ggml.py: llama.cpp's gpt2 uses GELU (tanh); this model uses %s" % act)
    V, C = t["wte.weight"].shape
    ctx = t["wpe.weight"].shape[0]
    L = 0
    while "h.%d.ln_1.weight" % L in t:
        L += 1
    n_head = int(cfg_key(cfg, "n_head", max(1, C // 64)))
    eps = float(cfg_key(cfg, "ln_eps", "1e-5"))
    n_ff = t["h.0.mlp.c_fc.weight"].shape[1]

    with open(os.path.join(a.tokenizer, "encoder.json"), encoding="utf-8") as f:
        enc = json.load(f)
    if a.vocab_prefix and 257 <= V < len(enc):
        eos = "<|endoftext|>"
        enc = {s: i for s, i in enc.items() if i < V - 1 and s != eos}
        enc[eos] = V - 1
    if len(enc) != V:
        sys.exit("generate_ggml.py: the tokenizer has %d tokens, the model %d" % (len(enc), V))
    tokens = [None] * V
    for s, i in enc.items():
        tokens[i] = s
    if any(s is None for s in tokens):
        sys.exit("generate_ggml.py: encoder.json's ids are not 0..%d" % (V - 1))
    with open(os.path.join(a.tokenizer, "vocab.bpe"), encoding="utf-8") as f:
        merges = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
    if a.vocab_prefix:  # merge k makes token 256 + k
        merges = merges[:V - 1 - 256]
    eot = enc.get("<|endoftext|>", V - 1)
    ttype = [1] * V          # 1 = normal
    ttype[eot] = 3           # 3 = control

    w = Writer()
    w.add("general.architecture", STR, "gpt2")
    w.add("general.name", STR, "tfm random GPT-2 (%s)" % os.path.basename(a.model))
    w.add("general.alignment", U32, ALIGN)
    w.add("gpt2.context_length", U32, ctx)
    w.add("gpt2.embedding_length", U32, C)
    w.add("gpt2.feed_forward_length", U32, n_ff)
    w.add("gpt2.block_count", U32, L)
    w.add("gpt2.attention.head_count", U32, n_head)
    w.add("gpt2.attention.layer_norm_epsilon", F32, eps)
    w.add("tokenizer.ggml.model", STR, "gpt2")
    w.add("tokenizer.ggml.pre", STR, "gpt-2")
    w.add_array("tokenizer.ggml.tokens", STR, tokens)
    w.add_array("tokenizer.ggml.token_type", I32, ttype)
    w.add_array("tokenizer.ggml.merges", STR, merges)
    w.add("tokenizer.ggml.bos_token_id", U32, eot)
    w.add("tokenizer.ggml.eos_token_id", U32, eot)
    w.add("tokenizer.ggml.add_bos_token", BOOL, False)

    # (GGUF name, tfm name, transposed): tfm's Conv1D [in, out] -> [out, in]
    m = [("token_embd.weight", "wte.weight", False),
         ("position_embd.weight", "wpe.weight", False)]
    for i in range(L):
        h, b = "h.%d." % i, "blk.%d." % i
        for g, n, tr in (("attn_norm.weight", "ln_1.weight", False),
                         ("attn_norm.bias", "ln_1.bias", False),
                         ("attn_qkv.weight", "attn.c_attn.weight", True),
                         ("attn_qkv.bias", "attn.c_attn.bias", False),
                         ("attn_output.weight", "attn.c_proj.weight", True),
                         ("attn_output.bias", "attn.c_proj.bias", False),
                         ("ffn_norm.weight", "ln_2.weight", False),
                         ("ffn_norm.bias", "ln_2.bias", False),
                         ("ffn_up.weight", "mlp.c_fc.weight", True),
                         ("ffn_up.bias", "mlp.c_fc.bias", False),
                         ("ffn_down.weight", "mlp.c_proj.weight", True),
                         ("ffn_down.bias", "mlp.c_proj.bias", False)):
            m.append((b + g, h + n, tr))
    m += [("output_norm.weight", "ln_f.weight", False), ("output_norm.bias", "ln_f.bias", False)]
    if "lm_head.weight" in t:  # [V, C], already [out, in]
        m.append(("output.weight", "lm_head.weight", False))

    def tensor_type(gname, arr):
        if arr.ndim < 2 or a.type == "f32":
            return "f32"
        if a.type == "q8_0" and gname == "position_embd.weight":
            return "f32"
        return a.type

    w.add("general.file_type", U32, FILE_TYPE[a.type])
    for g, n, tr in m:
        arr = t[n].T if tr else t[n]
        w.add_tensor(g, arr, tensor_type(g, arr))
    w.write(a.out)
    print("generate_ggml.py: wrote %s (%d tensors, %d layers, width %d, vocabulary %d, %.0f MB)"
          % (a.out, len(w.tensors), L, C, V, os.path.getsize(a.out) / 1e6))
    if a.compare:
        compare(a.compare, [(n, t[n], tr, tensor_type(g, t[n])) for g, n, tr in m])


def compare(path, tensors):
    """Prints how many of the values stored for tensors [(tfm name, array
    in tfm's layout, transposed in GGUF, GGUF type)] differ from those of
    tfm's file path (which stores 8-bit matrices as the GGUF rows, others
    in tfm's layout)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    dt = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I8": "i1"}

    def get(name):
        h = header.get(name)
        if h is None or h["dtype"] not in dt:
            return None, None
        b, e = h["data_offsets"]
        return h["dtype"], np.frombuffer(data[b:e], dtype=dt[h["dtype"]]).reshape(h["shape"])

    diff = total = 0
    for name, arr, tr, gt in tensors:
        sdt, stored = get(name)
        if gt == "q8_0":
            q, d = q8_0(arr.T if tr else arr)
            if sdt != "I8":
                print("generate_ggml.py: %s: %s stores %s, not 8-bit: not compared" % (path, name, sdt))
                return
            _, s = get(name + ".q8_scale")
            diff += int((stored != q).sum()) + int((s.view("<u2") != d.view("<u2")).sum())
            total += q.size + d.size
        elif gt == "bf16":
            if sdt != "BF16":
                print("generate_ggml.py: %s: %s stores %s, not BF16: not compared" % (path, name, sdt))
                return
            diff += int((stored != bf16(arr)).sum())
            total += stored.size
        elif gt == "f32" and sdt == "F32":
            diff += int((stored.view("<u4") != arr.view("<u4")).sum())
            total += stored.size
        else:
            print("generate_ggml.py: %s: %s stores %s, the GGUF file %s: not compared"
                  % (path, name, sdt, gt))
            return
    print("generate_ggml.py: stored values differing from %s: %d of %d"
          % (os.path.basename(path), diff, total))


if __name__ == "__main__":
    main()
