# Cross-checks lib/io against numpy in both directions: numpy loads the .npy
# files tfm writes (streamed, whole, to a pipe), tfm reads what numpy saves
# (every dtype, version 1.0 and 2.0 headers, 0-d and empty arrays), and a
# safetensors file is parsed independently here (struct + json + numpy)
# from what tfm writes, and vice versa.
import io
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

probe = os.path.join(os.environ.get("TFM_BUILDDIR", "."), "tests", "io_probe")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def run(*args, binary=False):
    r = subprocess.run([probe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit("io_probe %s failed: %s" % (" ".join(args), r.stderr.decode()))
    return r.stdout if binary else r.stdout.decode()


def parse_values(lines, dtype):
    vals = []
    for s in lines:
        if s.startswith("h"):
            vals.append(int(s[1:]))
        elif dtype.kind == "f":
            vals.append(float(s))
        else:
            vals.append(int(s))
    return vals


def read_with_tfm(path):
    out = run("npy-read", path).splitlines()
    head = out[0].split()
    return head[0], [int(x) for x in head[2:]], out[1:]


with tempfile.TemporaryDirectory() as d:
    # tfm writes, numpy reads
    run("npy-write", d)
    a = np.load(os.path.join(d, "u16_stream.npy"))
    exp = np.array([(i * 13) & 0xFFFF for i in range(0, 70000, 7)], dtype="<u2")
    check(a.dtype == np.dtype("<u2") and a.shape == exp.shape and (a == exp).all(), "u16 stream")
    a = np.load(os.path.join(d, "f32_rows.npy"))
    exp = (np.arange(15, dtype=np.float32) * 0.25 - 1).reshape(3, 5)
    check(a.dtype == np.float32 and a.shape == (3, 5) and (a == exp).all(), "f32 rows")
    a = np.load(os.path.join(d, "i32_whole.npy"))
    exp = ((np.arange(12) - 6) * 100000).astype("<i4").reshape(4, 3)
    check(a.dtype == np.dtype("<i4") and (a == exp).all() and a.shape == (4, 3), "i32 whole")
    a = np.load(os.path.join(d, "u32_whole.npy"), mmap_mode="r")
    check(a.dtype == np.dtype("<u4") and list(a) == [0, 65536, 4294967295], "u32 whole (mmap)")
    for name in ("u16_stream", "f32_rows", "i32_whole", "u32_whole"):
        raw = open(os.path.join(d, name + ".npy"), "rb").read()
        hlen = struct.unpack("<H", raw[8:10])[0]
        check(raw[6:8] == b"\x01\x00" and (10 + hlen) % 64 == 0 and raw[9 + hlen] == 10,
              name + ": v1.0 header, data 64-aligned")
    a = np.load(io.BytesIO(run("npy-stdout", binary=True)))
    exp = (np.arange(1000, dtype=np.uint64) * 100003 % 2**32).astype("<u4")
    check(a.dtype == np.dtype("<u4") and (a == exp).all(), "stream to a pipe")

    # numpy writes, tfm reads
    rng = np.random.default_rng(7)
    cases = {
        "u1": rng.integers(0, 256, 17).astype("u1"),
        "u2": rng.integers(0, 65536, (3, 4)).astype("<u2"),
        "u4": rng.integers(0, 2**32, 9, dtype=np.uint64).astype("<u4"),
        "u8": np.array([0, 2**64 - 1, 12345], dtype="<u8"),
        "i1": np.array([-128, 0, 127], dtype="i1"),
        "i2": np.array([-32768, 5, 32767], dtype="<i2"),
        "i4": rng.integers(-2**31, 2**31, (2, 2, 2)).astype("<i4"),
        "i8": np.array([-2**63, 2**63 - 1], dtype="<i8"),
        "f2": np.array([1.0, -2.5, 65504], dtype="<f2"),
        "f4": rng.standard_normal((5, 3)).astype("<f4"),
        "f8": np.array([np.pi, -1e300, 5e-324]),
        "b1": np.array([True, False, True]),
        "scalar": np.array(42, dtype="<i8"),
        "empty": np.zeros((0, 3), dtype="<f4"),
        "fortran1d": np.asfortranarray(np.arange(4, dtype="<i4")),
    }
    for name, arr in cases.items():
        p = os.path.join(d, "np_%s.npy" % name)
        np.save(p, arr)
        descr, shape, lines = read_with_tfm(p)
        check(tuple(shape) == arr.shape, "%s: shape %s vs %s" % (name, shape, arr.shape))
        flat = arr.reshape(-1)
        if arr.dtype == np.float16:
            exp = list(flat.view("<u2").astype(int))
        elif arr.dtype == np.bool_:
            exp = list(flat.astype(int))
        elif arr.dtype.kind == "f":
            exp = [float(x) for x in flat]
        else:
            exp = [int(x) for x in flat]
        got = parse_values(lines, arr.dtype)
        check(got == exp, "%s: values differ" % name)
    p = os.path.join(d, "v2.npy")
    with open(p, "wb") as f:
        np.lib.format.write_array(f, np.arange(6, dtype="<u2").reshape(2, 3), version=(2, 0))
    descr, shape, lines = read_with_tfm(p)
    check(descr == "<u2" and shape == [2, 3] and lines == [str(i) for i in range(6)], "v2.0 header")

    # safetensors: tfm writes, parsed here independently
    p = os.path.join(d, "m.safetensors")
    run("st-write", p)
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    check((8 + n) % 8 == 0, "safetensors header padded to 8")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    check(meta == {"format": "tfm-gpt", "config": "model:\n  layers: 2\n  name: \"q\\t\"\n",
                   "unicode": "caf\u00e9 \U0001F600 \x01"}, "metadata: %r" % meta)
    buf = raw[8 + n:]
    np_dt = {"F32": "<f4", "I64": "<i8", "U8": "u1", "BF16": "<u2", "I32": "<i4"}
    spans = []
    for name, info in header.items():
        b, e = info["data_offsets"]
        spans.append((b, e))
        arr = np.frombuffer(buf[b:e], dtype=np_dt[info["dtype"]]).reshape(info["shape"])
        check(b % np.dtype(np_dt[info["dtype"]]).itemsize == 0, name + ": aligned offset")
        header[name] = arr
    spans.sort()
    pos = 0
    for b, e in spans:
        check(b == pos, "buffer covered without holes")
        pos = e
    check(pos == len(buf), "buffer covered to the end")
    check((header["h.0.attn.c_attn.weight"] == np.array([[1.5, -2, 3], [4, 5, 6.25]], "f4")).all(), "F32 tensor")
    check(header["step"].tolist() == [123456789012], "I64 tensor")
    check(header["u8"].tolist() == [0, 1, 2, 254, 255], "U8 tensor")
    check(header["bf"].tolist() == [0x3f80, 0xc000], "BF16 tensor")
    check(header["cube"].tolist() == [[[-1, 2], [3, -4]], [[5, 6], [7, 8]]], "I32 3-D tensor")
    check(header["none"].shape == (0, 7), "empty tensor")

    # safetensors written here (odd offsets, F16/F64/BOOL/I8), read by tfm
    tensors = [("b", "BOOL", [3], np.array([1, 0, 1], "u1").tobytes()),
               ("f", "F32", [2], np.array([0.5, -3], "<f4").tobytes()),  # at odd offset 3
               ("h", "F16", [2], np.array([1, -2], "<f2").tobytes()),
               ("d", "F64", [1], np.array([2.5]).tobytes()),
               ("c", "I8", [2], np.array([-5, 7], "i1").tobytes())]
    hdr, data = {"__metadata__": {"k": "v"}}, b""
    for name, dt, shape, blob in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    hb = json.dumps(hdr).encode()  # deliberately not padded
    p = os.path.join(d, "py.safetensors")
    open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data)
    out = run("st-read", p).splitlines()
    exp = ["meta k 1",
           "tensor b BOOL 1 3", "1", "0", "1",
           "tensor f F32 1 2", "0.5", "-3",
           "tensor h F16 1 2", "h15360", "h49152",
           "tensor d F64 1 1", "2.5",
           "tensor c I8 1 2", "-5", "7"]
    check(out == exp, "tfm reading a Python-written safetensors: %r" % out)

if failures:
    sys.exit("%d check(s) failed" % failures)
print("io_numpy: all checks passed")
