#!/usr/bin/python3
"""HuggingFace T5 folders written by transformers itself load as tfm
encoder-decoders (lib/convert/t5.c), judged by transformers.

Small random T5ForConditionalGeneration models are made with transformers
(T5Config, save_pretrained; weights re-drawn wider than HF's init so that
greedy and beam choices are clear-cut, end-of-text made likelier so that
searches stop) and written in F32, F16 and BF16, single and sharded
(max_shard_size), in these shapes:
  v1.0 (t5-small's): relu, the head tied to shared.weight and reading the
    hidden states times d_model^-0.5;
  v1.1: gated-gelu, an untied lm_head.weight, no scaling, 8 buckets with
    max distance 16 (logarithmic and clamped buckets reached), more
    decoder than encoder blocks; its config.json as transformers 4 wrote
    it (tie_word_embeddings false, no scale_decoder_outputs);
  flan-t5-small's heads: num_heads x d_kv != d_model, gated-gelu, untied,
    config.json as transformers 5 writes it (tie_word_embeddings true,
    scale_decoder_outputs false, both lm_head.weight and shared.weight);
  gated-silu with layer_norm_epsilon 1e-3, exact gelu: the other
    feed_forward_proj values tfm claims; the gelu one's generation_config.json
    with decoder_start_token_id 3 and eos_token_id 2 (generate reads those).
The reference is the folder loaded back by from_pretrained(dtype=float32)
(the half-precision weights widened, as tfm reads them).  Checked, each to
1e-4:
  - teacher-forced logits of a padded batch (tests/io_probe model-logits:
    tfm_model_load and the training forward) against model(input_ids,
    attention_mask, decoder_input_ids).logits;
  - tfm-generate --greedy --ids --json (the cached decode step) against
    generate(do_sample=False, num_beams=1, max_new_tokens=N): the tokens
    and each token's log-probability; the source as HF's tokenizer gives
    it (tfm appends </s>);
  - tfm-generate --beam 4 --lenpen 1 against generate(num_beams=4,
    length_penalty=1.0, early_stopping="never", max_new_tokens=N): the best
    hypothesis and its score (HF's sequences_scores);
  - the T5Config keys: every value above changes the logits as HF's, and
    keys tfm cannot honour are refused naming the key;
  - bad input: a missing and a truncated shard (one message naming the
    file, exit 1, nothing on stdout, tfm-embed -o writes no file); a
    tensor missing or misshapen; a block more than config.json says."""
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import T5Config, T5ForConditionalGeneration  # noqa: E402

SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
from hf_lib import (EMBED, GEN, PROBE, hf_check_bad_shards, hf_check_logits,  # noqa: E402
                    hf_check_search, probe_encdec, refusals, run)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
V = 64
WORST = {"logits": 0.0}
BASE = dict(vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
            decoder_start_token_id=0, dropout_rate=0.0)
CASES = [
    dict(name="v1.0 F32", kw=dict(feed_forward_proj="relu"), untie=False, dtype=torch.float32),
    dict(name="v1.1 F32 sharded, transformers-4 config.json",
         kw=dict(feed_forward_proj="gated-gelu", num_decoder_layers=3,
                 relative_attention_num_buckets=8, relative_attention_max_distance=16),
         untie=True, dtype=torch.float32, shard="20KB", v4=True),
    dict(name="flan-t5 heads F16", kw=dict(feed_forward_proj="gated-gelu", num_heads=3, d_kv=16,
                                           num_layers=3, num_decoder_layers=2),
         untie=True, dtype=torch.float16),
    dict(name="v1.0 BF16 sharded", kw=dict(feed_forward_proj="relu"), untie=False,
         dtype=torch.bfloat16, shard="30KB"),
    dict(name="gated-silu eps 1e-3", kw=dict(feed_forward_proj="gated-silu",
                                             layer_norm_epsilon=1e-3), untie=False,
         dtype=torch.float32),
    dict(name="gelu, generation_config.json start 3 eos 2", kw=dict(feed_forward_proj="gelu"),
         untie=True, dtype=torch.float32, gen=dict(decoder_start_token_id=3, eos_token_id=2)),
]


def make_model(kw, untie, seed, gen=None):
    """T5ForConditionalGeneration with clear-cut random weights; gen: the
    generation_config's ids (save_pretrained writes them to
    generation_config.json, which generate reads)."""
    torch.manual_seed(seed)
    m = T5ForConditionalGeneration(T5Config(**dict(BASE, **kw))).eval()
    for k, v in (gen or {}).items():
        setattr(m.generation_config, k, v)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "layer_norm" in n:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.dim() == 2 and "shared" not in n and "relative" not in n:
                p.normal_(0, p.shape[1] ** -0.5)
            else:
                p.normal_(0, 1)
        if untie:  # transformers 5 ties always: an lm_head of its own is untied
            m.lm_head.weight = torch.nn.Parameter(torch.randn(V, m.config.d_model) *
                                                  m.config.d_model ** -0.5)
        # end-of-text (1) likelier, so that searches stop at it
        m.lm_head.weight[m.generation_config.eos_token_id] *= 2.5
    return m


def save(m, d, dtype, shard=None, v4=False):
    m.to(dtype).save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
    m.float()
    if v4:  # config.json as transformers 4 wrote v1.1's
        cj = os.path.join(d, "config.json")
        with open(cj) as f:
            c = json.load(f)
        c.pop("scale_decoder_outputs")
        c["tie_word_embeddings"] = False
        c["torch_dtype"] = c.pop("dtype")
        with open(cj, "w") as f:
            json.dump(c, f, indent=2)


def check_case(s, top, rng, seed):
    d = os.path.join(top, s["name"].replace(" ", "_").replace(",", ""))
    m = make_model(s["kw"], s["untie"], seed, s.get("gen"))
    save(m, d, s["dtype"], s.get("shard"), s.get("v4", False))
    if s.get("shard") and not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        return ["save_pretrained wrote no shards"]
    ref = T5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    bad = []
    B, S, T = 3, 22, 20
    src = rng.integers(4, V, (B, S))  # no end-of-text (1 or 2) inside a source
    src_len = [S, 13, 4]
    tgt = np.concatenate([np.zeros((B, 1), np.int64), rng.integers(2, V, (B, T - 1))], 1)
    bad, err = hf_check_logits(s["name"], d, ref, src, src_len, tgt)
    WORST["logits"] = max(WORST["logits"], err or 0)
    lines = [" ".join(map(str, src[b, :src_len[b] - 1])) for b in range(B)]
    eos = ref.generation_config.eos_token_id  # T5Tokenizer's </s> ends a source
    srcs = [src[b, :src_len[b] - 1].tolist() + [eos] for b in range(B)]
    return bad + hf_check_search(s["name"], d, ref, lines, srcs, 16)


def check_bad_shards(top):
    d = os.path.join(top, "shards")
    save(make_model({"feed_forward_proj": "relu"}, False, 5), d, torch.float32, "20KB")
    return hf_check_bad_shards(d, [5, 6, 1])


def expect(what, d, pieces, mutate_cfg=None, mutate_t=None):
    """The folder d, config.json or tensors changed, is refused (exit 1) by
    io_probe and tfm-generate with a message holding every piece."""
    from safetensors.numpy import load_file, save_file
    cj, st = os.path.join(d, "config.json"), os.path.join(d, "model.safetensors")
    with open(cj) as f:
        cfg0 = f.read()
    t0 = load_file(st)
    cfg = json.loads(cfg0)
    if mutate_cfg:
        mutate_cfg(cfg)
    with open(cj, "w") as f:
        json.dump(cfg, f, indent=2)
    if mutate_t:
        t = dict(t0)
        mutate_t(t)
        save_file(t, st, {"format": "pt"})
    r, _ = probe_encdec(d, np.array([[5, 6, 1]]), [3], np.zeros((1, 2), np.int64))
    r2 = run([GEN, "-m", d, "--ids", "--greedy", "-n", "2"], input="5 6\n")
    with open(cj, "w") as f:
        f.write(cfg0)
    if mutate_t:
        save_file(t0, st, {"format": "pt"})
    return refusals(what, pieces, (("io_probe", r), ("tfm-generate", r2)))


def check_errors(top):
    d = os.path.join(top, "bad")
    save(make_model({"feed_forward_proj": "gated-gelu", "num_decoder_layers": 3}, True, 6), d,
         torch.float32)
    cj, st = os.path.join(d, "config.json"), os.path.join(d, "model.safetensors")

    def setv(k, v):
        return lambda c: c.__setitem__(k, v)

    bad = []
    bad += expect("missing d_model", d, [cj, "d_model is missing"], lambda c: c.pop("d_model"))
    bad += expect("absurd num_heads", d, [cj, "num_heads must be between 1 and 1024"],
                  setv("num_heads", 0))
    bad += expect("unknown feed_forward_proj", d,
                  [cj, "feed_forward_proj 'gated-swish' is not supported"],
                  setv("feed_forward_proj", "gated-swish"))
    bad += expect("dense_act_fn", d, [cj, "dense_act_fn 'relu' differs"],
                  setv("dense_act_fn", "relu"))
    bad += expect("umt5", d, [cj, "model_type 'umt5' is not supported"],
                  setv("model_type", "umt5"))
    bad += expect("unknown key", d, [cj, "'relative_attention_bias_every_layer'"],
                  setv("relative_attention_bias_every_layer", True))
    bad += expect("is_decoder", d, [cj, "is_decoder"], setv("is_decoder", True))
    w = "decoder.block.2.layer.2.DenseReluDense.wi_1.weight"
    bad += expect("missing tensor", d, [st, f"no tensor '{w}'", "F32 [48, 32]"],
                  mutate_t=lambda x: x.pop(w))
    w2 = "encoder.block.1.layer.0.SelfAttention.k.weight"
    bad += expect("misshapen tensor", d, [st, f"tensor '{w2}' is F32 [32, 31]", "F32 [32, 32]"],
                  mutate_t=lambda x: x.__setitem__(w2, np.ascontiguousarray(x[w2][:, :31])))
    bad += expect("a block more", d, [st, "has a block 2", "config.json says 2"],
                  setv("num_decoder_layers", 2))
    return bad


def main():
    for p in (PROBE, GEN, EMBED):
        if not os.path.exists(p):
            print(f"missing {p}")
            return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(29)
    top = tempfile.mkdtemp(prefix="hf_t5.")
    bad = []
    try:
        for i, s in enumerate(CASES):
            bad += [f"{s['name']}: {b}" for b in check_case(s, top, rng, 100 + i)]
        bad += check_bad_shards(top)
        bad += check_errors(top)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
