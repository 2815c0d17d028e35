#!/usr/bin/python3
"""The peer of scripts/bench/ct2: CTranslate2 decoding a GPT-2 folder that
transformers writes, converted by CTranslate2's own TransformersConverter.
Run by the references' python (scripts/references --path).

  ct2_ref.py write DIR [--layers 12 --embd 768 --heads 12] [--seed 1]
        a GPT2LMHeadModel(GPT2Config(...)) with transformers' random
        initialisation (seeded), save_pretrained(DIR) in float32, and the
        GPT-2 tokenizer from testdata/gpt2 (encoder.json, vocab.bpe) saved
        beside it (CTranslate2's converter reads the vocabulary from it)
  ct2_ref.py convert DIR OUT
        ctranslate2.converters.TransformersConverter(DIR).convert(OUT):
        float32 weights; int8 is chosen when loading (compute_type)
  ct2_ref.py generate CT2DIR HFDIR --prompt "ID ..." --new N --beam B
        --compute-type float32|int8 --threads T --runs R
        one JSON line: tok_per_s (median over R runs of new tokens / the
        generate_batch call, prompt included), ids (the new tokens), and
        the compute type CTranslate2 reports

  ct2_ref.py seq2seq-convert MODEL.safetensors OUT
        a tfm encoder-decoder file (scripts/bench/seq2seq's: post-LN,
        sinusoidal positions, embeddings times sqrt(C), fused c_attn and
        c_kv, ReLU, one tied embedding) as CTranslate2's own Transformer
        (ctranslate2.specs.TransformerSpec.from_config, the model
        OpenNMT's converters write): it is no HuggingFace architecture
        (tfm's sinusoids interleave sin and cos, and the decoder starts
        from <s>, which Marian's conversion does not), so TransformersConverter
        does not apply; the same weights, transposed to [out, in]
  ct2_ref.py translate CT2DIR --mode greedy|beam --compute-type float32|int8
        --threads T [--beam 4 --lenpen 0.6] [--max-len-b 10] [--batch 100]
        < sources (token ids a line, as tfm-generate --ids reads them)
        one hypothesis a line as ids on stdout (cut at source tokens + 1 +
        max-len-b, tfm-generate's --max-len-a 1 --max-len-b limit), then
        one JSON line on stderr: sentences_per_s (translate_batch alone)

generate: ctranslate2.Generator(CT2DIR, device="cpu", compute_type=...,
intra_threads=T, inter_threads=1); generate_batch([prompt tokens],
beam_size=B, sampling_topk=1, length_penalty=0, max_length=N,
min_length=N (the end-of-text token cannot end it early, as tfm-generate
--ignore-eos), include_prompt_in_result=False (the prompt is one forward
pass, as tfm's prefill)); one warm-up call first.
translate: ctranslate2.Translator(CT2DIR, compute_type, intra_threads=T);
translate_batch(sources + ["</s>"] as tokens, max_batch_size=--batch
(greedy; 1 for beam: one source at a time, as scripts/bench/seq2seq's
reference), beam_size, length_penalty (plain: score / length^A),
max_decoding_length = the longest source + 1 + max-len-b)."""
import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def write(a):
    import torch
    import transformers
    torch.manual_seed(a.seed)
    cfg = transformers.GPT2Config(n_layer=a.layers, n_embd=a.embd, n_head=a.heads)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    m.save_pretrained(a.dir, safe_serialization=True)
    g = os.path.join(TOP, "testdata", "gpt2")
    shutil.copy(os.path.join(g, "encoder.json"), os.path.join(a.dir, "vocab.json"))
    shutil.copy(os.path.join(g, "vocab.bpe"), os.path.join(a.dir, "merges.txt"))
    tok = transformers.GPT2TokenizerFast.from_pretrained(a.dir)
    if len(tok) != cfg.vocab_size:
        sys.exit(f"ct2_ref.py: the tokenizer in {a.dir} has {len(tok)} tokens, not {cfg.vocab_size}")
    tok.save_pretrained(a.dir)


def convert(a):
    import ctranslate2
    ctranslate2.converters.TransformersConverter(a.dir).convert(a.out, force=True)


def generate(a):
    import ctranslate2
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(a.hfdir)
    ids = [int(x) for x in a.prompt.split()]
    start = tok.convert_ids_to_tokens(ids)
    g = ctranslate2.Generator(a.ct2dir, device="cpu", compute_type=a.compute_type,
                              intra_threads=a.threads, inter_threads=1)

    def run(n):
        r = g.generate_batch([start], beam_size=a.beam, sampling_topk=1, length_penalty=0,
                             max_length=n, min_length=n, include_prompt_in_result=False)
        return r[0].sequences_ids[0]
    run(min(4, a.new))
    rates, out = [], None
    for _ in range(a.runs):
        t0 = time.perf_counter()
        out = run(a.new)
        rates.append(len(out) / (time.perf_counter() - t0))
    if len(out) != a.new:
        sys.exit(f"ct2_ref.py: CTranslate2 gave {len(out)} tokens, not {a.new}")
    print(json.dumps(dict(tok_per_s=round(statistics.median(rates), 2), ids=out,
                          compute_type=g.compute_type, ctranslate2=ctranslate2.__version__)))


def read_tfm(path):
    import numpy as np
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {})
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    t = {}
    for k, e in header.items():
        if e["dtype"] != "F32":
            sys.exit(f"ct2_ref.py: {path}: tensor {k} is {e['dtype']}, not F32")
        b, end = e["data_offsets"]
        t[k] = np.frombuffer(data[b:end], dtype=np.float32).reshape(e["shape"]).copy()
    text = meta.get("config", "")
    m = re.search(r"^model:\n((?:[ \t]+.*\n?)*)", text, re.M)
    cfg = dict(re.findall(r"^\s+(\w+):\s*(.*?)\s*$", m.group(1), re.M)) if m else {}
    tok = json.loads(meta["tokenizer"])
    vocab = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
    vocab.update(tok.get("model", {}).get("vocab", {}) or {})
    return t, cfg, vocab


def seq2seq_convert(a):
    import ctranslate2
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec
    t, cfg, vocab = read_tfm(a.model)
    want = dict(kind="encoder-decoder", norm="post", positions="sinusoidal", activation="relu",
                emb_scale="true")
    for k, v in want.items():
        if cfg.get(k, "") != v:
            sys.exit(f"ct2_ref.py: {a.model}: model.{k} is {cfg.get(k)!r}: this converter "
                     f"handles {k} {v} only")
    if cfg.get("emb_norm", "false") != "false" or "lm_head.weight" in t or "enc.wte.weight" in t:
        sys.exit(f"ct2_ref.py: {a.model}: an embedding norm or untied embeddings: not handled")
    C, H = t["wte.weight"].shape[1], int(cfg["n_head"])
    L = int(cfg["n_layer"])
    Le = int(cfg.get("n_enc_layer", 0) or 0) or L
    spec = transformer_spec.TransformerSpec.from_config(
        (Le, L), H, pre_norm=False, activation=common_spec.Activation.RELU)
    T = int(cfg.get("block_size", 512))
    pos = np.arange(T, dtype=np.float64)[:, None]
    ang = pos / 10000.0 ** (np.arange(0, C, 2, dtype=np.float64) / C)
    pe = np.zeros((T, C))
    pe[:, 0::2], pe[:, 1::2] = np.sin(ang), np.cos(ang)  # tfm's interleaved table
    pe = pe.astype(np.float32)

    def lin(sp, name, parts=1):
        sp.weight = np.ascontiguousarray(t[name + ".weight"].T)  # tfm [in, out] -> [out, in]
        sp.bias = t[name + ".bias"]

    def ln(sp, name):
        sp.gamma, sp.beta = t[name + ".weight"], t[name + ".bias"]

    def ffn(sp, p):
        lin(sp.linear_0, p + "mlp.c_fc")
        lin(sp.linear_1, p + "mlp.c_proj")
        ln(sp.layer_norm, p + "ln_2")

    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = t["wte.weight"]
    dec.embeddings.weight = t["wte.weight"]
    enc.scale_embeddings = dec.scale_embeddings = True
    enc.position_encodings.encodings = pe
    dec.position_encodings.encodings = pe
    for i, l in enumerate(enc.layer):
        p = "enc.h.%d." % i
        lin(l.self_attention.linear[0], p + "attn.c_attn")
        lin(l.self_attention.linear[1], p + "attn.c_proj")
        ln(l.self_attention.layer_norm, p + "ln_1")
        ffn(l.ffn, p)
    for i, l in enumerate(dec.layer):
        p = "h.%d." % i
        lin(l.self_attention.linear[0], p + "attn.c_attn")
        lin(l.self_attention.linear[1], p + "attn.c_proj")
        ln(l.self_attention.layer_norm, p + "ln_1")
        lin(l.attention.linear[0], p + "xattn.c_q")
        lin(l.attention.linear[1], p + "xattn.c_kv")
        lin(l.attention.linear[2], p + "xattn.c_proj")
        ln(l.attention.layer_norm, p + "ln_x")
        ffn(l.ffn, p)
    dec.projection.weight = t["wte.weight"]
    words = [w for w, _ in sorted(vocab.items(), key=lambda x: x[1])]
    if [vocab[w] for w in words] != list(range(len(words))) or len(words) != t["wte.weight"].shape[0]:
        sys.exit(f"ct2_ref.py: {a.model}: the tokenizer's ids are not 0..{t['wte.weight'].shape[0] - 1}")
    spec.register_source_vocabulary(words)
    spec.register_target_vocabulary(words)
    spec.config.bos_token, spec.config.eos_token = "<s>", "</s>"
    spec.config.decoder_start_token = "<s>"
    spec.config.unk_token = "<pad>"  # the vocabulary has none; never asked for
    spec.config.layer_norm_epsilon = float(cfg.get("ln_eps", "1e-5"))
    spec.validate()
    spec.optimize(quantization=None)
    os.makedirs(a.out, exist_ok=True)
    spec.save(a.out)


def translate(a):
    import ctranslate2
    tr = ctranslate2.Translator(a.ct2dir, device="cpu", compute_type=a.compute_type,
                                intra_threads=a.threads, inter_threads=1)
    with open(os.path.join(a.ct2dir, "shared_vocabulary.json")) as f:
        words = json.load(f)
    ids = {w: i for i, w in enumerate(words)}
    src = [[int(x) for x in l.split()] for l in sys.stdin.read().splitlines()]
    toks = [[words[i] for i in s] + ["</s>"] for s in src]
    beam = a.beam if a.mode == "beam" else 1
    kw = dict(beam_size=beam, length_penalty=a.lenpen if beam > 1 else 0,
              max_decoding_length=max(len(s) for s in toks) + a.max_len_b,
              max_batch_size=a.batch if beam == 1 else 1)
    tr.translate_batch(toks[:2], **kw)  # warm-up
    t0 = time.perf_counter()
    res = tr.translate_batch(toks, **kw)
    secs = time.perf_counter() - t0
    out = []
    for s, r in zip(toks, res):
        hyp = [ids[w] for w in r.hypotheses[0]][:len(s) + a.max_len_b]
        out.append(" ".join(map(str, hyp)))
    sys.stdout.write("".join(l + "\n" for l in out))
    print(json.dumps(dict(sentences_per_s=round(len(src) / secs, 2), sentences=len(src),
                          seconds=round(secs, 3), compute_type=tr.compute_type)), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("--layers", type=int, default=12)
    w.add_argument("--embd", type=int, default=768)
    w.add_argument("--heads", type=int, default=12)
    w.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("convert")
    c.add_argument("dir")
    c.add_argument("out")
    g = sub.add_parser("generate")
    g.add_argument("ct2dir")
    g.add_argument("hfdir")
    g.add_argument("--prompt", required=True)
    g.add_argument("--new", type=int, default=256)
    g.add_argument("--beam", type=int, default=1)
    g.add_argument("--compute-type", default="float32", choices=["float32", "int8"])
    g.add_argument("--threads", type=int, default=2)
    g.add_argument("--runs", type=int, default=3)
    c = sub.add_parser("seq2seq-convert")
    c.add_argument("model")
    c.add_argument("out")
    r = sub.add_parser("translate")
    r.add_argument("ct2dir")
    r.add_argument("--mode", choices=["greedy", "beam"], required=True)
    r.add_argument("--compute-type", default="float32", choices=["float32", "int8"])
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--beam", type=int, default=4)
    r.add_argument("--lenpen", type=float, default=0.6)
    r.add_argument("--max-len-b", type=int, default=10)
    r.add_argument("--batch", type=int, default=100)
    a = ap.parse_args()
    {"write": write, "convert": convert, "generate": generate, "seq2seq-convert": seq2seq_convert,
     "translate": translate}[a.cmd](a)


if __name__ == "__main__":
    main()
