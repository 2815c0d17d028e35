#!/usr/bin/python3
"""The baselines of scripts/bench/embed: a HuggingFace-layout BERT with
random weights, its workloads, and PyTorch's timing of HF BertModel's math
(float32, eval; batches padded to their longest input with an attention
mask, as HF's tokenizer(padding=True) does), and its ONNX export.

  embed_ref.py write DIR L C H F V P    checkpoint folder (config.json,
                                        model.safetensors, vocab.txt)
  embed_ref.py workloads DIR SEED       w1.txt (32 x 128 tokens), w2.txt (one
                                        128-token line), w3.txt (64 lines of 8
                                        to 128 tokens), with [CLS] and [SEP]
  embed_ref.py torch DIR FILE REPEATS   one JSON line: median ms, peak RSS
  embed_ref.py export DIR OUT.onnx      torch.onnx.export of the same module
  embed_ref.py quantize IN.onnx OUT.onnx   the 8-bit graph onnxruntime's
                                        quantize_dynamic writes by default
  embed_ref.py cosine N A.f32 B.f32     min and mean cosine of N vectors
                                        (raw float32 rows) against N

A line's words are "w<i>", token id 5 + i in vocab.txt (WordPiece keeps
them whole), so every system sees the same ids."""
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests"))


def write(d, L, C, H, F_, V, P):
    import hf_bert
    s = dict(prefix="bert.", gamma=False, C=C, NH=H, L=L, F=F_, P=P, S=2, V=V, eps=1e-12,
             act="gelu", heads=False, folder=True, vocab=False)
    rng = np.random.default_rng(1)
    t = hf_bert.random_checkpoint(s, rng)
    os.makedirs(d, exist_ok=True)
    hf_bert.write_safetensors(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_bert.hf_config(s), f, indent=2)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("".join(w + "\n" for w in words))


def workloads(d, seed):
    rng = np.random.default_rng(seed)
    line = lambda n: " ".join(f"w{i}" for i in rng.integers(0, 900, n - 2))  # + [CLS], [SEP]
    with open(os.path.join(d, "w1.txt"), "w") as f:
        f.write("".join(line(128) + "\n" for _ in range(32)))
    with open(os.path.join(d, "w2.txt"), "w") as f:
        f.write(line(128) + "\n")
    with open(os.path.join(d, "w3.txt"), "w") as f:
        f.write("".join(line(int(n)) + "\n" for n in rng.integers(8, 129, 64)))


def ids_of(path):
    with open(path) as f:
        return [[2] + [5 + int(w[1:]) for w in l.split()] + [3] for l in f.read().splitlines()]


def padded(seqs):
    T = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), T), np.int64)
    mask = np.zeros((len(seqs), T), np.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = 1
    return ids, mask


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    dt = {"F32": np.float32, "I64": np.int64}
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dt[v["dtype"]])
            .reshape(v["shape"]) for k, v in header.items() if k != "__metadata__"}


class Bert(torch.nn.Module):
    """HF BertModel's forward (last_hidden_state), eval mode."""

    def __init__(self, d):
        super().__init__()
        cfg = json.load(open(os.path.join(d, "config.json")))
        self.C, self.H, self.L = cfg["hidden_size"], cfg["num_attention_heads"], \
            cfg["num_hidden_layers"]
        self.eps = cfg["layer_norm_eps"]
        t = read_safetensors(os.path.join(d, "model.safetensors"))
        self.p = torch.nn.ParameterDict()
        for k, v in t.items():
            if v.dtype == np.float32:
                self.p[k.replace(".", "__")] = torch.nn.Parameter(torch.from_numpy(v.copy()),
                                                                  requires_grad=False)

    def w(self, n):
        return self.p[n.replace(".", "__")]

    def forward(self, ids, mask, seg):
        C, H = self.C, self.H
        B, T = ids.shape
        HS = C // H
        ln = lambda x, n: F.layer_norm(x, (C,), self.w(n + ".weight"), self.w(n + ".bias"),
                                       self.eps)
        lin = lambda x, n: F.linear(x, self.w(n + ".weight"), self.w(n + ".bias"))
        e = "bert.embeddings."
        pos = torch.arange(T)
        x = (F.embedding(ids, self.w(e + "word_embeddings.weight"))
             + F.embedding(pos, self.w(e + "position_embeddings.weight"))[None]
             + F.embedding(seg, self.w(e + "token_type_embeddings.weight")))
        x = ln(x, e + "LayerNorm")
        ext = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        heads = lambda z: z.view(B, T, H, HS).permute(0, 2, 1, 3)
        for i in range(self.L):
            p = f"bert.encoder.layer.{i}."
            q, k, v = (heads(lin(x, p + "attention.self." + n)) for n in ("query", "key", "value"))
            sc = q @ k.transpose(-1, -2) / float(np.sqrt(HS)) + ext
            ctx = (sc.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(B, T, C)
            x = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = F.gelu(lin(x, p + "intermediate.dense"))
            x = ln(lin(h, p + "output.dense") + x, p + "output.LayerNorm")
        return x


def bench_torch(d, path, repeats):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    m = Bert(d).eval()
    ids, mask = padded(ids_of(path))
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
    seg = torch.zeros_like(ids)
    ms = []
    with torch.inference_mode():
        for r in range(repeats + 1):
            t0 = time.perf_counter()
            out = m(ids, mask, seg)
            # mean pooling over the real tokens, as tfm-embed's default
            v = (out * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            if r:
                ms.append((time.perf_counter() - t0) * 1e3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(dict(ms=float(np.median(ms)), padded_tokens=int(ids.numel()),
                          peak_rss_mb=round(rss, 1), check=float(v[0, 0]))))


def export(d, out):
    m = Bert(d).eval()
    ids, mask = padded(ids_of(os.path.join(d, "w3.txt"))[:2])
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
    torch.onnx.export(m, (ids, mask, torch.zeros_like(ids)), out,
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state"],
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in
                                    ("input_ids", "attention_mask", "token_type_ids",
                                     "last_hidden_state")},
                      opset_version=14)


def quantize(src, dst):
    """onnxruntime.quantization.quantize_dynamic(src, dst) with its defaults
    (QOperator format, weight_type QInt8, per_channel False, reduce_range
    False, MatMulConstBOnly), written here with the onnx package because that
    tool is not packaged: each MatMul whose B is a float initializer becomes
      DynamicQuantizeLinear(A) -> A_q (uint8), A_scale, A_zero_point
      MatMulInteger(A_q, B_q, A_zero_point, B_zero_point) -> int32
      Cast(float) * (A_scale * B_scale)
    with B_q int8, symmetric over the whole tensor (scale max|B| / 127, zero
    point 0, round half to even), as its default weight quantization.  One
    DynamicQuantizeLinear per activation, shared by its MatMuls (q, k, v).
    ONNX Runtime's optimizer fuses the pattern into com.microsoft's
    MatMulIntegerToFloat / DynamicQuantizeMatMul.  quantize_dynamic would
    also store the Gather tables (embeddings) in 8 bits; here they stay f32:
    lookups, not products.  Attention's products (no constant B) stay f32,
    as there."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    m = onnx.load(src)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    uses = {}
    for n in g.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    nodes, quantized_acts, new_inits, dropped = [], set(), [], set()
    for n in g.node:
        b = inits.get(n.input[1]) if n.op_type == "MatMul" else None
        if b is None or b.data_type != TensorProto.FLOAT:
            nodes.append(n)
            continue
        a, y = n.input[0], n.output[0]
        if a not in quantized_acts:
            quantized_acts.add(a)
            nodes.append(helper.make_node("DynamicQuantizeLinear", [a],
                                          [a + "_quantized", a + "_scale", a + "_zero_point"],
                                          a + "_QuantizeLinear"))
        w = numpy_helper.to_array(b)
        scale = np.float32(max(abs(float(w.min())), abs(float(w.max())), 0.0) * 2 / 254) or \
            np.float32(1)
        q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        new_inits += [numpy_helper.from_array(q, b.name + "_quantized"),
                      numpy_helper.from_array(np.array(scale, np.float32), b.name + "_scale"),
                      numpy_helper.from_array(np.array(0, np.int8), b.name + "_zero_point")]
        uses[b.name] -= 1
        if uses[b.name] == 0:
            dropped.add(b.name)
        name = n.name or y
        nodes += [helper.make_node("MatMulInteger",
                                   [a + "_quantized", b.name + "_quantized", a + "_zero_point",
                                    b.name + "_zero_point"], [y + "_quantized"], name + "_quant"),
                  helper.make_node("Cast", [y + "_quantized"], [y + "_cast"], name + "_cast",
                                   to=TensorProto.FLOAT),
                  helper.make_node("Mul", [a + "_scale", b.name + "_scale"], [y + "_scales"],
                                   name + "_scales_mul"),
                  helper.make_node("Mul", [y + "_cast", y + "_scales"], [y],
                                   name + "_output_scale_mul")]
    if not quantized_acts:
        sys.exit(f"embed_ref.py: {src}: no MatMul with a constant float B")
    kept = [t for t in g.initializer if t.name not in dropped]
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    onnx.checker.check_model(m)
    onnx.save(m, dst)


def cosine(n, a, b):
    x, y = (np.fromfile(f, np.float32).astype(np.float64) for f in (a, b))
    if x.size != y.size or x.size % n:
        sys.exit(f"embed_ref.py: {a} and {b} do not hold {n} vectors of one width")
    x, y = x.reshape(n, -1), y.reshape(n, -1)
    c = (x * y).sum(1) / np.sqrt((x * x).sum(1) * (y * y).sum(1))
    print(f"{c.min():.6f} {c.mean():.6f}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2], *(int(x) for x in sys.argv[3:9]))
    elif cmd == "workloads":
        workloads(sys.argv[2], int(sys.argv[3]))
    elif cmd == "torch":
        bench_torch(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "export":
        export(sys.argv[2], sys.argv[3])
    elif cmd == "quantize":
        quantize(sys.argv[2], sys.argv[3])
    elif cmd == "cosine":
        cosine(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"embed_ref.py: unknown command {cmd}")
