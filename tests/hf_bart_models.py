#!/usr/bin/python3
"""HuggingFace BART folders written by transformers itself load as tfm
encoder-decoders (lib/convert/bart.c), judged by transformers.

Small random BartForConditionalGeneration models are made with
transformers (BartConfig, save_pretrained; weights re-drawn wider than
HF's init so that greedy and beam choices are clear-cut, </s> made
likelier) in F32, F16 and BF16, single and sharded (max_shard_size):
  bart-base's: gelu, scale_embedding false, forced_eos_token_id 2
    (BartConfig's default), no forced_bos;
  bart-large's generation: forced_bos_token_id 0 (<s> forced after the
    start token, kept out of tfm's output as HF's decoded text skips it);
  scale_embedding true, relu, 3 encoder and 1 decoder layers.
A BartModel folder (no head: tied, no final_logits_bias) too.  The
reference is the folder loaded back by from_pretrained(dtype=float32).
Checked, each to 1e-4:
  - teacher-forced logits of a padded batch (tests/io_probe model-logits)
    against model(input_ids, attention_mask, decoder_input_ids).logits;
  - tfm-generate --greedy (tokens, log-probabilities) and --beam 4
    --lenpen 1 (best hypothesis, score) against generate(do_sample=False,
    num_beams=1 or 4, length_penalty=1.0, early_stopping="never",
    max_new_tokens=N), the forced tokens from the folder's config on both
    sides; sources "0 ..." as BartTokenizer begins them, tfm appending
    </s>;
  - BartTokenizer's folder (vocab.json + merges.txt, as save_pretrained
    writes them, with tokenizer.json beside as BartTokenizerFast's):
    tfm-tokenize --split-special's ids are transformers' (without
    <s> ... </s>; <mask> and </s> in the text are those tokens), and
    tfm-embed's mean of the encoder's output over a line is the mean of
    model.get_encoder()'s last_hidden_state over those ids (tfm-embed adds
    no <s> ... </s>, which BartTokenizer's default would);
  - tfm-train's loss on pairs (first step, dropout 0) is transformers'
    loss on the same ids, and its sources are BartTokenizer's; its targets
    lack the <s> BartTokenizer's labels begin with unless forced_bos;
  - BartConfig keys tfm cannot honour refused naming the key;
  - a missing and a truncated shard: one message naming the shard, exit 1,
    nothing written."""
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
from transformers import (BartConfig, BartForConditionalGeneration, BartModel,  # noqa: E402
                          BartTokenizer)

SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
from hf_lib import (EMBED, GEN, PROBE, TOKENIZE, TOL, TRAIN, hf_check_bad_shards,  # noqa: E402
                    hf_check_logits, hf_check_pair_loss, hf_check_search, probe_encdec,
                    refusals, run)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
BOS, PAD, EOS = 0, 1, 2
V = 72
TV = 300  # with a byte-level BPE: 256 bytes, the specials, merges
BASE = dict(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
            decoder_ffn_dim=48, max_position_embeddings=40, dropout=0.0)
CASES = [
    dict(name="bart-base F32", kw={}, dtype=torch.float32),
    dict(name="forced_bos F16 sharded", kw={}, forced_bos=BOS, dtype=torch.float16,
         shard="20KB"),
    dict(name="scaled relu 3+1 BF16", kw=dict(scale_embedding=True, activation_function="relu",
                                              encoder_layers=3, decoder_layers=1,
                                              encoder_attention_heads=2,
                                              decoder_attention_heads=2),
         dtype=torch.bfloat16),
]


def make_model(kw, seed, cls=BartForConditionalGeneration, forced_bos=None):
    torch.manual_seed(seed)
    m = cls(BartConfig(**dict(BASE, **kw))).eval()
    if forced_bos is not None:  # transformers 5 keeps it in generation_config.json only
        m.generation_config.forced_bos_token_id = forced_bos
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "layer_norm" in n or "layernorm" in n:
                p.copy_((1 if n.endswith("weight") else 0) + 0.2 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.normal_(0, 0.2)
            elif "embed" in n or "shared" in n:
                p.normal_(0, 0.7)
            else:
                p.normal_(0, p.shape[1] ** -0.5)
        emb = m.get_input_embeddings().weight
        emb[EOS] *= 1.5  # </s> likelier, so that searches stop at it
    return m


def save(m, d, dtype, shard=None):
    m.to(dtype).save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
    m.float()


def check_case(s, top, rng, seed):
    d = os.path.join(top, s["name"].replace(" ", "_"))
    save(make_model(s["kw"], seed, forced_bos=s.get("forced_bos")), d, s["dtype"], s.get("shard"))
    if s.get("shard") and not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        return ["save_pretrained wrote no shards"]
    ref = BartForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    B, S, T = 3, 22, 20
    src = rng.integers(4, V - 1, (B, S))
    src[:, 0] = BOS
    src_len = [S, 13, 4]
    for b in range(B):
        src[b, src_len[b] - 1] = EOS
    tgt = np.concatenate([np.full((B, 1), EOS), rng.integers(3, V, (B, T - 1))], 1)
    bad, _ = hf_check_logits(s["name"], d, ref, src, src_len, tgt)
    lines = [" ".join(map(str, src[b, :src_len[b] - 1])) for b in range(B)]
    srcs = [src[b, :src_len[b]].tolist() for b in range(B)]
    skip = 1 if s.get("forced_bos") is not None else 0
    return bad + hf_check_search(s["name"], d, ref, lines, srcs, 12, skip=skip)


def check_bartmodel(top, rng):
    """BartModel's folder: no "model." prefix, no head; tfm's head is the
    embedding without a bias, as BartForConditionalGeneration.from_pretrained
    makes it."""
    d = os.path.join(top, "bartmodel")
    save(make_model({}, 7, BartModel), d, torch.float32)
    ref = BartForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    src, tgt = rng.integers(3, V, (2, 9)), rng.integers(0, V, (2, 7))
    bad, _ = hf_check_logits("BartModel", d, ref, src, [9, 5], tgt)
    return bad


def words(n, rng):
    w = ("the of and to in a that is was he for it with as his on be at by they lord god "
         "unto shall").split()
    return [" ".join(w[i] for i in rng.integers(0, len(w), 8)) for _ in range(n)]


def write_bpe(d, corpus):
    """A byte-level BPE as BartTokenizer saves it: vocab.json + merges.txt
    (<s> 0, <pad> 1, </s> 2, <unk> 3, <mask> last), learned here by the
    tokenizers library."""
    from tokenizers import ByteLevelBPETokenizer
    t = ByteLevelBPETokenizer()
    t.train_from_iterator(corpus, vocab_size=TV - 1, min_frequency=1,
                          special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False)
    os.makedirs(d, exist_ok=True)
    t.save_model(d)
    with open(os.path.join(d, "vocab.json")) as f:
        vocab = json.load(f)
    vocab["<mask>"] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    tok = BartTokenizer(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt"))
    tok.save_pretrained(d)
    return BartTokenizer.from_pretrained(d)


def check_tokenizer(top, rng):
    d = os.path.join(top, "tok")
    corpus = words(300, rng)
    tok = write_bpe(d, corpus)
    if len(tok) > TV:
        return [f"the tokenizer has {len(tok)} tokens, the model {TV}"]
    save(make_model({"vocab_size": TV}, 8), d, torch.float32)
    ref = BartForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    bad = []
    lines = words(6, rng) + ["the lord<mask> shall be</s> with them"]
    r = run([TOKENIZE, "encode", "-q", "--split-special", "-t", d], input="\n".join(lines) + "\n")
    want = [tok(x, add_special_tokens=False).input_ids for x in lines]
    got = [[int(i) for i in x.split()] for x in r.stdout.splitlines()] if r.returncode == 0 else []
    print(f"  BartTokenizer folder ({sorted(os.listdir(d))[:6]}...): tfm-tokenize's ids equal "
          f"transformers' on {sum(a == b for a, b in zip(got, want))} of {len(lines)} lines")
    if got != want:
        bad.append(f"tfm-tokenize: {r.stderr.strip()} {got} want {want}")
    r = run([EMBED, "-m", d, "--pool", "mean", "--layers", "last", "-f", "tsv"],
            input="\n".join(lines[:3]) + "\n")
    if r.returncode != 0:
        return bad + [f"tfm-embed: {r.stderr.strip()}"]
    got = np.array([[float(x) for x in ln.split()] for ln in r.stdout.splitlines()])
    enc = ref.get_encoder()
    with torch.no_grad():
        want = np.stack([enc(input_ids=torch.tensor([tok(x, add_special_tokens=False)
                                                     .input_ids])).last_hidden_state[0]
                         .mean(0).numpy() for x in lines[:3]])
    err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    print(f"  tfm-embed: mean of the encoder's output over the line's ids, max |tfm - "
          f"transformers| = {err:.2e}")
    if not err <= TOL:
        bad.append(f"tfm-embed differs by {err:.3g} (shapes {got.shape} {want.shape})")
    pairs = words(10, rng)
    # no forced_bos here: tfm's targets lack the <s> BartTokenizer's labels
    # begin with (the loss is compared on tfm's ids)
    return bad + hf_check_pair_loss(top, d, ref, tok, list(zip(pairs[:5], pairs[5:])), 1)


def check_refusals(top):
    d = os.path.join(top, "bad")
    save(make_model({}, 9), d, torch.float32)
    cj = os.path.join(d, "config.json")
    with open(cj) as f:
        cfg0 = json.load(f)
    bad = []
    for key, val, piece in (("normalize_before", True, "normalize_before true"),
                            ("add_final_layer_norm", True, "add_final_layer_norm true"),
                            ("activation_function", "swish", "activation_function 'swish'"),
                            ("encoder_layerdrop", 0.1, "encoder_layerdrop"),
                            ("decoder_ffn_dim", 40, "decoder_ffn_dim 40 differs"),
                            ("model_type", "mbart", "model_type 'mbart'"),
                            ("layernorm_variant", "pre", "'layernorm_variant'"),
                            ("add_cross_attention", True, "add_cross_attention")):
        with open(cj, "w") as f:
            json.dump(dict(cfg0, **{key: val}), f, indent=2)
        r, _ = probe_encdec(d, np.array([[0, 5, 2]]), [3], np.full((1, 2), 2))
        r2 = run([GEN, "-m", d, "--ids", "--greedy", "-n", "2"], input="0 5 6\n")
        bad += refusals(f"{key} {val}", [cj, piece], (("io_probe", r), ("tfm-generate", r2)))
    with open(cj, "w") as f:
        json.dump(cfg0, f, indent=2)
    print(f"  config.json keys tfm cannot honour: refused, naming the key ({len(bad)} bad)")
    return bad


def main():
    for p in (PROBE, GEN, EMBED, TOKENIZE, TRAIN):
        if not os.path.exists(p):
            print(f"missing {p}")
            return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(31)
    top = tempfile.mkdtemp(prefix="hf_bart_models.")
    bad = []
    try:
        for i, s in enumerate(CASES):
            bad += [f"{s['name']}: {b}" for b in check_case(s, top, rng, 200 + i)]
        bad += check_bartmodel(top, rng)
        bad += check_tokenizer(top, rng)
        bad += check_refusals(top)
        d = os.path.join(top, "forced_bos_F16_sharded")
        bad += hf_check_bad_shards(d, [0, 5, 6, 2])
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
