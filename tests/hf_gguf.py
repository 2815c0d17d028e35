#!/usr/bin/python3
"""GGUF files written by the gguf package (llama.cpp's own writer) from
random GPT-2 and Llama folders that transformers made, judged by tfm on
the folder and by transformers:
- GPT-2 (a byte-level BPE trained by HF tokenizers, tied head) and Llama
  (grouped-query attention 4/2, untied head; q and k permuted as
  convert_hf_to_gguf permutes them) in F32, F16 and BF16, each from the
  folder saved in that type: tfm-generate --greedy tokens and
  log-probabilities, tfm-eval perplexity and --token-logprobs equal those of
  tfm on the folder and of transformers to 1e-4; the GPT-2 file's tokenizer
  gives the folder's output for a text prompt, and tfm-tokenize -t FILE.gguf
  transformers' ids;
- Q8_0 (gguf.quants, llama.cpp's reference quantizer) from the F32 folder:
  tfm-generate's and tfm-eval's output equal, bit for bit, those of tfm on
  tfm-train --convert q8_0 of the folder;
- tfm-eval info of a GGUF file;
- broken files refused by every program with one exact message, exit 1: a
  truncated file, bad magic, another version, an unknown architecture, an
  architecture key tfm does not read, a tensor type tfm lacks (Q4_0) and
  an unknown type id.
"""
import json
import os
import shutil
import struct
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_lib import EMBED, EVAL, GEN, TOKENIZE, TOL, TRAIN, run  # noqa: E402
from hf_gpt2_lib import CORPUS, make_model, train_tokenizer  # noqa: E402

Q = gguf.GGMLQuantizationType
N = 40


def arr(t, typ):
    """A torch tensor as the (array, raw_dtype) gguf's add_tensor takes."""
    if typ == "bf16":  # the folder's bfloat16 bits as they are
        return t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint8), Q.BF16
    a = t.float().numpy()
    if typ == "f16":
        return a.astype(np.float16), None
    if typ == "q8_0":
        return gguf.quants.quantize(a, Q.Q8_0), Q.Q8_0
    return a.astype(np.float32), None


def tensor(w, name, t, typ):
    a, raw = arr(t, typ)
    if raw is None:
        w.add_tensor(name, a)
    else:
        w.add_tensor(name, a, raw_dtype=raw)  # its shape from the bytes


def matrix_type(typ, cols, table=False):
    """llama-quantize's choice: Q8_0 for matrices whose rows are blocks of 32
    (position_embd stays float32); F16/BF16 for every matrix."""
    if typ == "q8_0":
        return "q8_0" if cols % 32 == 0 and not table else "f32"
    return typ


def gpt2_gguf(path, m, tok, typ, extra=None):
    sd = {k: v for k, v in m.state_dict().items()}
    cfg = m.config
    C, L = cfg.n_embd, cfg.n_layer
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_context_length(cfg.n_positions)
    w.add_embedding_length(C)
    w.add_block_count(L)
    w.add_feed_forward_length(4 * C)
    w.add_head_count(cfg.n_head)
    w.add_layer_norm_eps(cfg.layer_norm_epsilon)
    for k, v in (extra or {}).items():
        w.add_uint32(k, v)
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([3 if s == "<|endoftext|>" else 1 for s in tokens])
    w.add_token_merges(tok.merges_list)
    w.add_eos_token_id(vocab["<|endoftext|>"])
    p = "transformer."
    tensor(w, "token_embd.weight", sd[p + "wte.weight"], matrix_type(typ, C))
    tensor(w, "position_embd.weight", sd[p + "wpe.weight"], matrix_type(typ, C, True))
    for i in range(L):
        h = f"{p}h.{i}."
        for src, dst in (("ln_1", "attn_norm"), ("ln_2", "ffn_norm")):
            tensor(w, f"blk.{i}.{dst}.weight", sd[h + src + ".weight"], "f32")
            tensor(w, f"blk.{i}.{dst}.bias", sd[h + src + ".bias"], "f32")
        for src, dst in (("attn.c_attn", "attn_qkv"), ("attn.c_proj", "attn_output"),
                         ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")):
            wt = sd[h + src + ".weight"].t()  # Conv1D [in, out] -> [out, in]
            tensor(w, f"blk.{i}.{dst}.weight", wt, matrix_type(typ, wt.shape[1]))
            tensor(w, f"blk.{i}.{dst}.bias", sd[h + src + ".bias"], "f32")
    tensor(w, "output_norm.weight", sd[p + "ln_f.weight"], "f32")
    tensor(w, "output_norm.bias", sd[p + "ln_f.bias"], "f32")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def permute(wt, n_head, n_head_kv):
    """convert_hf_to_gguf's LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (wt.reshape(n_head, 2, wt.shape[0] // n_head // 2, *wt.shape[1:])
            .swapaxes(1, 2).reshape(wt.shape))


def llama_gguf(path, m, typ):
    sd = m.state_dict()
    cfg = m.config
    C, L, NH, NKV = cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, \
        cfg.num_key_value_heads
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(C)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_rope_dimension_count(C // NH)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(5000.0)
    w.add_tokenizer_model("llama")  # SentencePiece: not read, ids only
    w.add_token_list([f"<t{i}>" for i in range(cfg.vocab_size)])
    w.add_eos_token_id(2)
    tensor(w, "token_embd.weight", sd["model.embed_tokens.weight"], matrix_type(typ, C))
    tensor(w, "output_norm.weight", sd["model.norm.weight"], "f32")
    tensor(w, "output.weight", sd["lm_head.weight"], matrix_type(typ, C))
    for i in range(L):
        h = f"model.layers.{i}."
        tensor(w, f"blk.{i}.attn_norm.weight", sd[h + "input_layernorm.weight"], "f32")
        tensor(w, f"blk.{i}.ffn_norm.weight", sd[h + "post_attention_layernorm.weight"], "f32")
        for src, dst, perm in (("self_attn.q_proj", "attn_q", NH), ("self_attn.k_proj", "attn_k", NKV),
                               ("self_attn.v_proj", "attn_v", 0),
                               ("self_attn.o_proj", "attn_output", 0),
                               ("mlp.gate_proj", "ffn_gate", 0), ("mlp.up_proj", "ffn_up", 0),
                               ("mlp.down_proj", "ffn_down", 0)):
            wt = sd[h + src + ".weight"]
            if perm:
                wt = permute(wt, NH, perm)
            tensor(w, f"blk.{i}.{dst}.weight", wt, matrix_type(typ, wt.shape[1]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def outputs(model, ids, npy, bad, what):
    """(tfm-generate --json line, tfm-eval perplexity JSON, --token-logprobs
    text) of model, or None."""
    prompt = " ".join(map(str, ids[:6]))
    g = run([GEN, "-q", "-m", model, "--ids", "--greedy", "--ignore-eos", "-n", "12", "--json",
             prompt])
    p = run([EVAL, "perplexity", "-q", "-m", model, "--tokens", npy, "--no-bos", "--json"])
    t = run([EVAL, "perplexity", "-q", "-m", model, "--tokens", npy, "--no-bos", "--context",
             str(N), "--token-logprobs", "-"])
    for name, r in (("tfm-generate", g), ("tfm-eval perplexity", p), ("--token-logprobs", t)):
        if r.returncode:
            bad.append(f"{what}: {name}: {r.stderr.strip()}")
            return None
    return same_part(g.stdout.splitlines()[0]), same_part(p.stdout.strip()), t.stdout


def same_part(line):
    """A JSON line without what differs between runs of one model (timings)
    or between files (the path)."""
    o = json.loads(line)
    for k in ("timings", "model", "seconds", "tokens_per_second"):
        o.pop(k, None)
    return json.dumps(o)


def logprobs(text):
    rows = [x.split("\t") for x in text.splitlines() if x and x[0].isdigit()]
    return np.array([float(x[2]) for x in rows if len(x) == 3])


def close(what, got, want, bad):
    """got, want: outputs(); every number to TOL, the ids equal."""
    g, w = json.loads(got[0]), json.loads(want[0])
    errs = []
    if g["ids"] != w["ids"]:
        bad.append(f"{what}: tfm-generate ids {g['ids']}, want {w['ids']}")
        return
    errs.append(np.abs(np.array(g["logprobs"]) - np.array(w["logprobs"])).max())
    pg, pw = json.loads(got[1])["perplexity"], json.loads(want[1])["perplexity"]
    errs.append(abs(pg - pw) / pw)
    a, b = logprobs(got[2]), logprobs(want[2])
    errs.append(np.abs(a - b).max() if a.shape == b.shape and a.size else float("inf"))
    print(f"  {what}: largest difference {max(errs):.2e}")
    if not max(errs) <= TOL:
        bad.append(f"{what}: differences {errs}")


def reference(m, ids):
    """transformers' greedy tokens and their log-probabilities, perplexity."""
    prompt = ids[:6]
    with torch.no_grad():
        out = m(torch.tensor([ids]), labels=torch.tensor([ids]))
        g = m.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12,
                       min_new_tokens=12, output_scores=True, return_dict_in_generate=True,
                       eos_token_id=None, pad_token_id=0)
    want_ids = g.sequences[0, len(prompt):].tolist()
    want_lp = [s[0].log_softmax(-1)[t].item() for s, t in zip(g.scores, want_ids)]
    lp = out.logits[0].log_softmax(-1)
    tl = "".join(f"{t}\t{ids[t]}\t{lp[t - 1, ids[t]].item()}\n" for t in range(1, N))
    return (json.dumps({"ids": want_ids, "logprobs": want_lp}),
            json.dumps({"perplexity": float(np.exp(out.loss.item()))}), tl)


def family(top, name, make, write, V, bad):
    rng = np.random.default_rng(5)
    ids = rng.integers(3, V, size=N).tolist()
    npy = os.path.join(top, name + ".npy")
    np.save(npy, np.array(ids, np.int32))
    m32 = make()
    for typ, dt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        d = os.path.join(top, f"{name}-{typ}")
        m = make().to(dt)
        m.save_pretrained(d)
        extra = write.get("tok")
        if extra:
            extra.save_pretrained(d)
        ref = type(m).from_pretrained(d, dtype=torch.float32,
                                      attn_implementation="eager").eval()
        f = os.path.join(top, f"{name}-{typ}.gguf")
        write["fn"](f, ref, typ)
        got = outputs(f, ids, npy, bad, f"{name} {typ} GGUF")
        want = outputs(d, ids, npy, bad, f"{name} {typ} folder")
        if got and want:
            close(f"{name} {typ}: GGUF against the folder in tfm", got, want, bad)
            close(f"{name} {typ}: GGUF against transformers", got, reference(ref, ids), bad)
    # Q8_0 from the F32 folder, against tfm's own q8_0 conversion of it
    d = os.path.join(top, f"{name}-f32")
    q8 = os.path.join(top, f"{name}-q8_0.safetensors")
    r = run([TRAIN, "--convert", "q8_0", d, "-o", q8])
    if r.returncode:
        bad.append(f"{name}: tfm-train --convert q8_0: {r.stderr.strip()}")
        return
    f = os.path.join(top, f"{name}-q8_0.gguf")
    write["fn"](f, m32, "q8_0")
    got = outputs(f, ids, npy, bad, f"{name} q8_0 GGUF")
    want = outputs(q8, ids, npy, bad, f"{name} tfm q8_0")
    if got and want:
        same = got == want
        print(f"  {name} q8_0: GGUF against tfm's q8_0 file: "
              f"{'the same output' if same else 'DIFFERENT'}")
        if not same:
            bad.append(f"{name} q8_0: GGUF {got}, tfm's q8_0 {want}")
    r = run([EVAL, "info", "--json", "-m", f])
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    print(f"  {name} q8_0: tfm-eval info: {r.stdout.strip()[:200]}")
    if info.get("weights") != "q8_0" or info.get("kind") != f"{name}-gguf":
        bad.append(f"{name}: tfm-eval info of the q8_0 GGUF: {r.stdout.strip()} "
                   f"{r.stderr.strip()}")


def gpt2_case(top, bad):
    raw, tok = train_tokenizer(top)
    with open(os.path.join(raw, "merges.txt"), encoding="utf-8") as f:
        tok.merges_list = [x.rstrip("\n") for x in f if x.strip() and not x.startswith("#")]
    V = len(tok)

    def make():
        return make_model(V, 3)

    family(top, "gpt2", make, {"fn": lambda f, m, t: gpt2_gguf(f, m, tok, t), "tok": tok},
           V, bad)
    # a key of the architecture's that tfm does not read (for refusals())
    gpt2_gguf(os.path.join(top, "extra.gguf"), make(), tok, "f32",
              {"gpt2.attention.sliding_window": 8})
    # the file's tokenizer: a text prompt gives the folder's output
    text = "The quick brown fox, once upon a time."
    out = []
    for model in (os.path.join(top, "gpt2-f32.gguf"), os.path.join(top, "gpt2-f32")):
        r = run([GEN, "-q", "-m", model, "--greedy", "--ignore-eos", "-n", "8", "--json", text])
        out.append(same_part(r.stdout) if r.returncode == 0 else r.stderr.strip())
    print(f"  gpt2: a text prompt through the GGUF file's tokenizer: {out[0][:70]!r}...")
    if out[0] != out[1] or not out[0].startswith("{"):
        bad.append(f"gpt2 GGUF tokenizer: {out[0]!r}, the folder's {out[1]!r}")
    # tfm-tokenize -t FILE.gguf: transformers' ids of a text
    with open(CORPUS, encoding="utf-8") as f:
        corpus = [x for x in f.read().splitlines() if x][:50]
    r = run([TOKENIZE, "encode", "-t", os.path.join(top, "gpt2-f32.gguf")],
            input="\n".join(corpus) + "\n")
    got = [list(map(int, x.split())) for x in r.stdout.splitlines()]
    want = [tok(x)["input_ids"] for x in corpus]
    print(f"  gpt2: tfm-tokenize -t FILE.gguf on {len(corpus)} lines: "
          f"{'transformers ids' if got == want else 'DIFFERENT'}")
    if got != want:
        bad.append(f"tfm-tokenize -t gguf: {r.stderr.strip()} {got[:2]}, want {want[:2]}")


def llama_case(top, bad):
    V = 97
    keys = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 5000.0})

    def make():
        torch.manual_seed(11)
        m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**keys))
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "norm" in n:
                    p.copy_(1 + 0.2 * torch.randn_like(p))
                else:
                    p.normal_(0, 0.2)
        return m.eval()

    family(top, "llama", make, {"fn": llama_gguf}, V, bad)


def refusals(top, bad):
    good = os.path.join(top, "gpt2-f32.gguf")
    data = open(good, "rb").read()

    def edited(name, b):
        p = os.path.join(top, name)
        with open(p, "wb") as f:
            f.write(b)
        return p

    def small(name, arch, typ):
        p = os.path.join(top, name)
        w = gguf.GGUFWriter(p, arch)
        a = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
        if typ == "q4_0":
            q = gguf.quants.quantize(a, Q.Q4_0)
            w.add_tensor("token_embd.weight", q, raw_dtype=Q.Q4_0)
        else:
            w.add_tensor("token_embd.weight", a)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return p

    unknown = bytearray(open(small("f32.gguf", "gpt2", "f32"), "rb").read())
    at = unknown.index(b"token_embd.weight") + len(b"token_embd.weight") + 4 + 2 * 8
    unknown[at:at + 4] = struct.pack("<I", 99)
    cases = [
        ("truncated", edited("trunc.gguf", data[:len(data) // 2]),
         "trunc.gguf: truncated GGUF file: tensor 'blk.0.attn_output.weight' (4096 bytes at "
         "offset 72576 of the data from byte 9632) runs past its end (85456 bytes)"),
        ("truncated metadata", edited("trunc2.gguf", data[:1000]),
         "trunc2.gguf: truncated GGUF file: tokenizer.ggml.tokens at byte 434 runs past its "
         "end (1000 bytes)"),
        ("bad magic", edited("magic.gguf", b"GGUG" + data[4:]),
         "magic.gguf: not a GGUF file (its first bytes are not \"GGUF\")"),
        ("version", edited("v9.gguf", data[:4] + struct.pack("<I", 9) + data[8:]),
         "v9.gguf: GGUF version 9: tfm reads versions 2 and 3"),
        ("architecture", small("mamba.gguf", "mamba", "f32"),
         "mamba.gguf: architecture 'mamba' is not one tfm reads: it reads GGUF's gpt2 and "
         "llama"),
        ("type Q4_0", small("q4.gguf", "gpt2", "q4_0"),
         "q4.gguf: tensor 'token_embd.weight' is of type Q4_0: tfm reads F32, F16, BF16 and "
         "Q8_0 tensors"),
        ("unknown key", os.path.join(top, "extra.gguf"),
         "extra.gguf: metadata 'gpt2.attention.sliding_window' is not one tfm reads in a GGUF "
         "gpt2 model (it may change the model)"),
        ("type 99", edited("t99.gguf", bytes(unknown)),
         "t99.gguf: tensor 'token_embd.weight' has unknown type 99 (ggml's types are 0..39; "
         "tfm reads F32, F16, BF16 and Q8_0)"),
    ]
    for what, path, want in cases:
        for prog, cmd in (("tfm-generate", [GEN, "-m", path, "--ids", "1 2"]),
                          ("tfm-eval", [EVAL, "info", "-m", path]),
                          ("tfm-embed", [EMBED, "-m", path])):
            r = run(cmd, input="a b\n")
            msg = r.stderr.strip()
            ok = msg == f"{prog}: {os.path.join(top, want)}" and r.returncode == 1
            if not ok:
                bad.append(f"{what} ({prog}): exit {r.returncode}: {msg!r}, want {want!r}")
        print(f"  refused ({what}): {msg}")


def main():
    bad = []
    top = tempfile.mkdtemp(prefix="tfm-gguf-")
    try:
        gpt2_case(top, bad)
        llama_case(top, bad)
        refusals(top, bad)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
