#!/usr/bin/python3
"""A T5 folder's tokenizer as transformers and sentencepiece write it,
judged by them, and a T5 folder fine-tuned from (lib/convert/t5.c).

A SentencePiece Unigram model is trained with the sentencepiece module
(pad 0, </s> 1, <unk> 2, as T5's spiece.model) and put beside a random
T5ForConditionalGeneration (written by save_pretrained, vocab_size above
the tokenizer's as t5-small's 32128 > 32100) in two folders:
  spm: spiece.model alone (T5Tokenizer's 100 <extra_id_N> sentinels, the
    last ids, without a tokenizer_config.json);
  fast: what T5Tokenizer.from_pretrained(spm).save_pretrained writes
    (tokenizer.json, tokenizer_config.json), and spiece.model.
Checked:
  - tfm-tokenize -t FOLDER --split-special gives transformers' ids
    (tokenizer(x, add_special_tokens=False)) on lines with sentinels, and
    sentencepiece's on plain lines (spm);
  - span infilling: tfm-generate --split-special "... <extra_id_0> ..."
    reads the sentinels as transformers' tokenizer does (source_tokens)
    and gives generate()'s greedy tokens for tokenizer(x).input_ids;
    without --split-special the sentinels are characters;
  - tfm-embed's mean of the encoder's output over a line's ids is
    get_encoder()'s (to 1e-4);
  - a T5EncoderModel folder (no decoder, no head) is tfm's encoder:
    tfm-embed's mean is its last_hidden_state's (to 1e-4);
  - a tokenizer_config.json whose eos_token is not tokenizer.json's is
    refused naming the file;
  - tfm-train's loss on pairs (first step, dropout 0) is transformers'
    (labels=) on the same ids, which are T5Tokenizer's;
  - tfm-train fine-tunes from the folder (train.init, data.tokenizer), a
    step at lr 0 saves a model whose logits are transformers' (hf_lib's
    check_train_init, with config.json's dropout_rate as every rate), and
    LoRA writes HF's module names (check_lora)."""
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import sentencepiece  # noqa: E402
import transformers  # noqa: E402
from transformers import (T5Config, T5EncoderModel, T5ForConditionalGeneration,  # noqa: E402
                          T5Tokenizer)

SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
from hf_lib import (EMBED, EVAL, GEN, PROBE, TOKENIZE, TOL, TRAIN, check_lora,  # noqa: E402
                    check_train_init, hf_check_pair_loss, hf_generate, probe_encdec, run)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
PIECES, V = 100, 208  # 100 pieces + 100 sentinels = 200 tokens
RATE = 0.15
RATES = dict(dropout=RATE, attn_dropout=RATE, emb_dropout=RATE, ffn_dropout=RATE,
             final_dropout=RATE)
WORDS = ("the of and to in a that is was he for it with as his on be at by they lord god "
         "unto shall thou thy said which them me upon were into people king house").split()


def corpus(rng, n):
    return [" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(4, 12)))
            .capitalize() + "." for _ in range(n)]


def make_model(seed):
    torch.manual_seed(seed)
    m = T5ForConditionalGeneration(T5Config(
        vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
        feed_forward_proj="gated-gelu", decoder_start_token_id=0, dropout_rate=RATE)).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "layer_norm" in n:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.dim() == 2 and "shared" not in n and "relative" not in n:
                p.normal_(0, p.shape[1] ** -0.5)
            else:
                p.normal_(0, 1)
        m.lm_head.weight[1] *= 2.5  # </s> likelier, so that searches stop
    return m


def ids_of(r):
    return [[int(i) for i in x.split()] for x in r.stdout.splitlines()] if r.returncode == 0 \
        else r.stderr.strip()


def check_folder(name, d, tok, sp, lines):
    bad = []
    plain = lines[:5] + ["  The lord   said unto  them. "]  # whitespace runs collapse
    spans = [ln.replace(" ", f" <extra_id_{k}> ", 1) for k, ln in enumerate(lines[6:10])]
    spans.append("Thank you <extra_id_0> me to your party <extra_id_1> week.")
    r = run([TOKENIZE, "encode", "-q", "--split-special", "-t", d],
            input="\n".join(plain + spans) + "\n")
    got = ids_of(r)
    want = [tok(x, add_special_tokens=False).input_ids for x in plain + spans]
    print(f"  {name}: tfm-tokenize --split-special equals transformers' ids on "
          f"{sum(a == b for a, b in zip(got, want)) if isinstance(got, list) else 0} of "
          f"{len(want)} lines ({len(spans)} with sentinels)")
    if got != want:
        bad.append(f"tfm-tokenize: {got} want {want}")
    if sp is not None:
        r = run([TOKENIZE, "encode", "-q", "-t", d], input="\n".join(plain) + "\n")
        if ids_of(r) != [sp.encode(x) for x in plain]:
            bad.append(f"tfm-tokenize vs sentencepiece: {ids_of(r)} want "
                       f"{[sp.encode(x) for x in plain]}")
    # span infilling from text: tfm's source is the tokenizer's ids + </s>
    ref = T5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    r = run([GEN, "-m", d, "--greedy", "--split-special", "--json", "-n", "12", "-q"],
            input="\n".join(spans) + "\n")
    outs = [json.loads(x) for x in r.stdout.splitlines()] if r.returncode == 0 else []
    if len(outs) != len(spans):
        return bad + [f"tfm-generate --split-special: {r.stderr.strip()}"]
    for o, x in zip(outs, spans):
        src = tok(x).input_ids
        seq, _, _ = hf_generate(ref, src, 12)
        got = [t for t in o["ids"] if t != 1]
        if o["source_tokens"] != len(src) or got != seq:
            bad.append(f"infilling {x!r}: tfm {o['source_tokens']} source tokens -> {o['ids']}, "
                       f"transformers {len(src)} -> {seq}")
    print(f"  {name}: span infilling: tfm-generate --split-special gives generate()'s greedy "
          f"tokens on {len(spans)} prompts with <extra_id_N>")
    r = run([GEN, "-m", d, "--greedy", "--json", "-n", "4", "-q"], input=spans[-1] + "\n")
    if r.returncode != 0 or json.loads(r.stdout)["source_tokens"] == len(tok(spans[-1]).input_ids):
        bad.append(f"without --split-special the sentinels are read too: {r.stdout} {r.stderr}")
    r = run([EMBED, "-m", d, "--pool", "mean", "--layers", "last", "-f", "tsv"],
            input="\n".join(plain[:3]) + "\n")
    if r.returncode != 0:
        return bad + [f"tfm-embed: {r.stderr.strip()}"]
    got = np.array([[float(v) for v in ln.split()] for ln in r.stdout.splitlines()])
    with torch.no_grad():
        want = np.stack([ref.get_encoder()(input_ids=torch.tensor(
            [tok(x, add_special_tokens=False).input_ids])).last_hidden_state[0].mean(0).numpy()
            for x in plain[:3]])
    err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    print(f"  {name}: tfm-embed: mean of the encoder's output, max |tfm - transformers| = "
          f"{err:.2e}")
    if not err <= TOL:
        bad.append(f"tfm-embed differs by {err:.3g}")
    return bad


def check_encoder_model(top, tok, lines):
    """T5EncoderModel's folder (no decoder, no head) is tfm's encoder:
    tfm-embed --pool none and mean against its last_hidden_state."""
    d = os.path.join(top, "encoder")
    torch.manual_seed(4)
    m = T5EncoderModel(T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=40, num_layers=3,
                                num_heads=4, feed_forward_proj="gated-gelu",
                                relative_attention_num_buckets=8,
                                relative_attention_max_distance=16)).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "layer_norm" in n else
                    torch.randn_like(p) * (p.shape[1] ** -0.5 if p.dim() == 2 and
                                           "shared" not in n and "relative" not in n else 1))
    m.save_pretrained(d)
    tok.save_pretrained(d)
    ref = T5EncoderModel.from_pretrained(d, dtype=torch.float32).eval()
    bad, worst = [], 0.0
    r = run([EMBED, "-m", d, "--pool", "mean", "-f", "tsv"], input="\n".join(lines) + "\n")
    if r.returncode != 0:
        return [f"T5EncoderModel: tfm-embed: {r.stderr.strip()}"]
    got = np.array([[float(v) for v in ln.split()] for ln in r.stdout.splitlines()])
    with torch.no_grad():
        want = np.stack([ref(input_ids=torch.tensor([tok(x, add_special_tokens=False)
                                                     .input_ids])).last_hidden_state[0]
                         .mean(0).numpy() for x in lines])
    worst = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    r = run([EVAL, "info", "-m", d])
    if r.returncode != 0 or "model_kind\tencoder\n" not in r.stdout or \
            "kind\tt5-huggingface\n" not in r.stdout:
        bad.append(f"T5EncoderModel: tfm-eval info: {r.stdout}{r.stderr}")
    print(f"  T5EncoderModel: tfm-embed mean of last_hidden_state over {len(lines)} lines, "
          f"max |tfm - transformers| = {worst:.2e}")
    if not worst <= TOL:
        bad.append(f"T5EncoderModel: tfm-embed differs by {worst:.3g}")
    return bad


def check_contradiction(d):
    """tokenizer_config.json naming an eos_token tokenizer.json lacks."""
    tc = os.path.join(d, "tokenizer_config.json")
    with open(tc) as f:
        c0 = f.read()
    c = json.loads(c0)
    c["eos_token"] = "<eos>"
    with open(tc, "w") as f:
        json.dump(c, f)
    r = run([GEN, "-m", d, "--greedy", "-n", "2", "-q"], input="the lord\n")
    r2 = run([TOKENIZE, "encode", "-q", "-t", d], input="the lord\n")
    with open(tc, "w") as f:
        f.write(c0)
    bad = []
    for prog, rr in (("tfm-generate", r), ("tfm-tokenize", r2)):
        msg = rr.stderr.strip()
        if rr.returncode != 1 or not msg.startswith(prog + ": ") or tc not in msg or \
                "<eos>" not in msg or rr.stdout:
            bad.append(f"contradicting tokenizer_config.json ({prog}): exit {rr.returncode}: "
                       f"{msg!r} {rr.stdout!r}")
    print(f"  tokenizer_config.json's eos_token '<eos>' not in tokenizer.json: {r.stderr.strip()}")
    return bad


def main():
    for p in (PROBE, GEN, EMBED, TOKENIZE, TRAIN):
        if not os.path.exists(p):
            print(f"missing {p}")
            return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(41)
    top = tempfile.mkdtemp(prefix="hf_t5_tokenizer.")
    bad = []
    try:
        model = os.path.join(top, "spiece.model")
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(corpus(rng, 1500)), model_prefix=model[:-6],
            vocab_size=PIECES, model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
            num_threads=1, minloglevel=2)
        sp = sentencepiece.SentencePieceProcessor(model_file=model)
        spm, fast = os.path.join(top, "spm"), os.path.join(top, "fast")
        m = make_model(3)
        for d in (spm, fast):
            m.save_pretrained(d)
        shutil.copy(model, os.path.join(spm, "spiece.model"))
        tok = T5Tokenizer.from_pretrained(spm)  # converts spiece.model, 100 sentinels
        tok.save_pretrained(fast)
        shutil.copy(model, os.path.join(fast, "spiece.model"))
        if len(tok) != PIECES + 100 or tok.convert_tokens_to_ids("<extra_id_0>") != PIECES + 99:
            bad.append(f"T5Tokenizer: {len(tok)} tokens, <extra_id_0> "
                       f"{tok.convert_tokens_to_ids('<extra_id_0>')}")
        lines = corpus(rng, 10)
        bad += [f"spm: {b}" for b in check_folder("spiece.model", spm, tok, sp, lines)]
        tok2 = T5Tokenizer.from_pretrained(fast)
        bad += [f"fast: {b}" for b in check_folder("tokenizer.json", fast, tok2, None, lines)]
        bad += check_contradiction(fast)
        bad += check_encoder_model(top, tok2, lines[:4])
        ref = T5ForConditionalGeneration.from_pretrained(fast, dtype=torch.float32).eval()

        def logits(src, sl, tgt):
            mask = torch.tensor([[1] * k + [0] * (src.shape[1] - k) for k in sl])
            with torch.no_grad():
                return ref(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits

        pairs = corpus(rng, 10)
        bad += hf_check_pair_loss(top, fast, ref, tok2, list(zip(pairs[:5], pairs[5:])))
        bad += check_train_init(top, fast, WORDS, V, logits, rng, RATES,
                                dict(RATES, dropout=0.05, attn_dropout=0.05, emb_dropout=0.05))
        from safetensors.numpy import load_file
        bad += check_lora(top, fast, V, load_file(os.path.join(fast, "model.safetensors")), rng)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
