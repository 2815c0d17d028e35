#!/usr/bin/python3
"""Write a tfm GPT-2-style model file (safetensors, HF GPT-2 names) as a
GGUF v3 file that llama.cpp (ggml) loads as architecture "gpt2", for the
ggml baseline of scripts/bench/generate.

  generate_ggml.py MODEL.safetensors OUT.gguf [--tokenizer testdata/gpt2]

The weights are copied unchanged as f32.  GGUF lists a tensor's dimensions
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
encoder.json in id order, the merges of vocab.bpe) is there because llama.cpp
refuses a model without a vocabulary; the benchmark feeds token ids."""
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
GGML_F32 = 0


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

    def add_tensor(self, name, arr):
        self.tensors.append((name, arr))

    def write(self, path):
        infos, offset, layout = [], 0, []
        for name, arr in self.tensors:
            nbytes = arr.size * 4
            dims = list(reversed(arr.shape))  # innermost first
            infos.append(self._str(name) + struct.pack("<I", len(dims)) +
                         struct.pack("<%dQ" % len(dims), *dims) +
                         struct.pack("<IQ", GGML_F32, offset))
            layout.append(offset)
            offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for rec in self.kv:
                f.write(rec)
            for rec in infos:
                f.write(rec)
            f.write(b"\0" * (-f.tell() % ALIGN))
            start = f.tell()
            for (name, arr), off in zip(self.tensors, layout):
                f.write(b"\0" * (start + off - f.tell()))
                np.ascontiguousarray(arr, dtype="<f4").tofile(f)
            f.write(b"\0" * (-(f.tell() - start) % ALIGN))
        os.replace(tmp, path)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--tokenizer", default=os.path.join(here, "..", "..", "testdata", "gpt2"),
                    help="directory with encoder.json and vocab.bpe")
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
    if len(enc) != V:
        sys.exit("generate_ggml.py: the tokenizer has %d tokens, the model %d" % (len(enc), V))
    tokens = [None] * V
    for s, i in enc.items():
        tokens[i] = s
    if any(s is None for s in tokens):
        sys.exit("generate_ggml.py: encoder.json's ids are not 0..%d" % (V - 1))
    with open(os.path.join(a.tokenizer, "vocab.bpe"), encoding="utf-8") as f:
        merges = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
    eot = enc.get("<|endoftext|>", V - 1)
    ttype = [1] * V          # 1 = normal
    ttype[eot] = 3           # 3 = control

    w = Writer()
    w.add("general.architecture", STR, "gpt2")
    w.add("general.name", STR, "tfm random GPT-2 (%s)" % os.path.basename(a.model))
    w.add("general.file_type", U32, 0)  # all f32
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

    w.add_tensor("token_embd.weight", t["wte.weight"])
    w.add_tensor("position_embd.weight", t["wpe.weight"])
    for i in range(L):
        h, b = "h.%d." % i, "blk.%d." % i
        w.add_tensor(b + "attn_norm.weight", t[h + "ln_1.weight"])
        w.add_tensor(b + "attn_norm.bias", t[h + "ln_1.bias"])
        w.add_tensor(b + "attn_qkv.weight", t[h + "attn.c_attn.weight"].T)
        w.add_tensor(b + "attn_qkv.bias", t[h + "attn.c_attn.bias"])
        w.add_tensor(b + "attn_output.weight", t[h + "attn.c_proj.weight"].T)
        w.add_tensor(b + "attn_output.bias", t[h + "attn.c_proj.bias"])
        w.add_tensor(b + "ffn_norm.weight", t[h + "ln_2.weight"])
        w.add_tensor(b + "ffn_norm.bias", t[h + "ln_2.bias"])
        w.add_tensor(b + "ffn_up.weight", t[h + "mlp.c_fc.weight"].T)
        w.add_tensor(b + "ffn_up.bias", t[h + "mlp.c_fc.bias"])
        w.add_tensor(b + "ffn_down.weight", t[h + "mlp.c_proj.weight"].T)
        w.add_tensor(b + "ffn_down.bias", t[h + "mlp.c_proj.bias"])
    w.add_tensor("output_norm.weight", t["ln_f.weight"])
    w.add_tensor("output_norm.bias", t["ln_f.bias"])
    if "lm_head.weight" in t:  # [V, C], already [out, in]
        w.add_tensor("output.weight", t["lm_head.weight"])
    w.write(a.out)
    print("generate_ggml.py: wrote %s (%d tensors, %d layers, width %d, vocabulary %d, %.0f MB)"
          % (a.out, len(w.tensors), L, C, V, os.path.getsize(a.out) / 1e6))


if __name__ == "__main__":
    main()
