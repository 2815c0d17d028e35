#!/usr/bin/python3
"""LoRA adapters judged by the real PEFT library, both ways.

Base models are written by transformers (from_config(...).save_pretrained):
GPT2LMHeadModel, BertModel, T5ForConditionalGeneration, tiny and random.

(1) PEFT -> tfm: get_peft_model(base, LoraConfig(...)) with lora_B made
non-zero, save_pretrained (F32; F16 tensors as a half-precision PEFT model
saves them).  The judge is PeftModel.from_pretrained(base, dir) (and its
merge_and_unload()): tfm-eval --adapter's log-probabilities and tfm-generate
--adapter's greedy tokens and log-probabilities (GPT-2; use_rslora,
fan_in_fan_out false and true, modules_to_save, layers_to_transform),
tfm-embed --adapter's hidden states (BERT), tests/io_probe model-logits
with the adapter (T5, teacher-forced) and tfm-generate --adapter's greedy
translation (T5), and tfm-train --merge-adapter's file, to 1e-4.  Settings
tfm cannot honour (bias, lora_bias, use_dora, trainable_token_indices, a
key tfm does not know) are refused naming the key in adapter_config.json.

(2) tfm -> PEFT: tfm-train's LoRA adapter on the same folders loads with
PeftModel.from_pretrained (no missing or unexpected keys, no warning) and
gives the logits (hidden states) tfm gives with --adapter (BERT's classify
run: its merged model), to 1e-4; the classifier comes in as
modules_to_save.  On a native tfm model, which no transformers class
loads, the adapter keeps tfm's module names: PEFT loads it on a PyTorch
module tree with those names (tfm's decoder written out here) and gives
tfm-eval --adapter's log-probabilities.

(3) One and two LoRA steps of tfm-train (AdamW with eps 1e-8; Adam with
L2 decay and eps 1, nearly plain gradient descent) equal PEFT + PyTorch's
from tfm's initial adapter loaded into PEFT, on the same batches: the
losses, and the updated A and B to 1e-5 relative.

(4) An adapter made for another base (a different width; a module the base
does not have) is one message naming the adapter file and what was
expected, exit 1, nothing written."""
import contextlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import (BertConfig, BertModel, BertTokenizerFast, GPT2Config, GPT2LMHeadModel,
                          T5Config, T5ForConditionalGeneration)

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_lib import EMBED, EVAL, GEN, PROBE, TRAIN  # noqa: E402

TOL = 1e-4
torch.set_num_threads(1)
bad = []
worst = {}


def run(cmd, ok=True, **kw):
    r = subprocess.run([str(a) for a in cmd], capture_output=True, text=True, **kw)
    if ok and r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(map(str, cmd))}: exit {r.returncode}\n{r.stderr}")
    return r


def compare(what, got, want, tol=TOL):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        bad.append(f"{what}: shape {got.shape}, want {want.shape}")
        return
    err = float(np.abs(got - want).max())
    scale = max(1.0, float(np.abs(want).max()))
    worst[what] = err / scale
    print(f"  {what}: max |tfm - peft| = {err:.2e} (scale {scale:.3g})")
    if not err <= tol * scale:
        bad.append(f"{what}: max |tfm - peft| = {err:.3g} > {tol:g}·{scale:.3g}")


@contextlib.contextmanager
def quiet_hf():
    """PEFT's and transformers' warnings and log lines, collected."""
    caught = io.StringIO()
    h = logging.StreamHandler(caught)
    loggers = [logging.getLogger(n) for n in ("peft", "transformers")]
    for lg in loggers:
        lg.addHandler(h)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        yield caught, w
    for lg in loggers:
        lg.removeHandler(h)


# ---- the bases, as transformers writes them ------------------------------

def gpt2_base(d, V=48, C=32):
    torch.manual_seed(1)
    cfg = GPT2Config(n_embd=C, n_layer=2, n_head=2, n_positions=32, vocab_size=V,
                     bos_token_id=V - 1, eos_token_id=V - 1, initializer_range=0.3)
    GPT2LMHeadModel(cfg).eval().save_pretrained(d)
    return d


def bert_base(d, C=32):
    torch.manual_seed(2)
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "big", "red"]
    os.makedirs(d, exist_ok=True)
    vocab = os.path.join(d, "vocab.txt")
    with open(vocab, "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    cfg = BertConfig(vocab_size=5 + len(words), hidden_size=C, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=48, max_position_embeddings=32,
                     initializer_range=0.2)
    BertModel(cfg).eval().save_pretrained(d)
    BertTokenizerFast(vocab_file=vocab, do_lower_case=True).save_pretrained(d)
    return d


def t5_base(d, V=40, C=32):
    torch.manual_seed(3)
    cfg = T5Config(vocab_size=V, d_model=C, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2,
                   num_heads=4, relative_attention_num_buckets=8,
                   relative_attention_max_distance=16, feed_forward_proj="relu",
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                   initializer_factor=1.5)
    T5ForConditionalGeneration(cfg).eval().save_pretrained(d)
    return d


# ---- PEFT's adapters -------------------------------------------------------

def peft_adapter(cls, base, d, dtype="F32", seed=0, want_judge=True, **kw):
    """get_peft_model + non-zero lora_B (and modules_to_save moved), saved;
    returns the judge: PeftModel.from_pretrained on a fresh base."""
    torch.manual_seed(seed)
    m = cls.from_pretrained(base).eval()
    kw.setdefault("lora_dropout", 0.0)
    with quiet_hf():
        pm = get_peft_model(m, LoraConfig(**kw))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3)
            elif "modules_to_save" in n:
                p.add_(torch.randn_like(p) * 0.3)
    with quiet_hf():
        pm.save_pretrained(d)
    if dtype == "F16":
        f = os.path.join(d, "adapter_model.safetensors")
        save_file({k: v.half() for k, v in load_file(f).items()}, f, {"format": "pt"})
    return judge(cls, base, d) if want_judge else None


def judge(cls, base, d):
    with quiet_hf() as (log, w):
        pm = PeftModel.from_pretrained(cls.from_pretrained(base), d).eval()
    said = log.getvalue() + "".join(str(x.message) for x in w
                                    if "missing" in str(x.message).lower()
                                    or "unexpected" in str(x.message).lower())
    return pm, said


def write_ids(path, ids):
    np.save(path, np.array(ids, np.uint16))
    return path


def tfm_logprobs(model, adapter, npy, n):
    # --no-bos: each token given only those before it, as PEFT's model is fed
    cmd = [EVAL, "perplexity", "-q", "--threads", "1", "-m", model, "--tokens", npy,
           "--context", n, "--no-bos", "--token-logprobs", "-"]
    if adapter:
        cmd += ["--adapter", adapter]
    rows = [ln.split("\t") for ln in run(cmd).stdout.splitlines() if ln[:1].isdigit()]
    # tokens 1..n-1 given those before (a model with a BOS scores token 0 too)
    lp = {int(r[0]): float(r[2]) for r in rows if len(r) == 3}
    if sorted(lp)[-(n - 1):] != list(range(1, n)):
        bad.append(f"tfm-eval scored positions {sorted(lp)} of {n} tokens")
    return np.array([lp.get(i, np.nan) for i in range(1, n)])


def peft_logprobs(pm, ids):
    with torch.no_grad():
        lp = pm(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
    return np.array([lp[t - 1, ids[t]].item() for t in range(1, len(ids))])


def tfm_greedy(model, adapter, prompt, n, *extra):
    cmd = [GEN, "-q", "--threads", "1", "-m", model, "--ids", "--greedy", "--ignore-eos",
           "-n", n, "--json", *extra, " ".join(map(str, prompt))]
    if adapter:
        cmd += ["--adapter", adapter]
    o = json.loads(run(cmd).stdout.splitlines()[0])
    return o["ids"], o["logprobs"]


def peft_greedy(pm, prompt, n):
    """Greedy decoding on PEFT's model, the whole sequence each step (no end
    of text: tfm-generate runs with --ignore-eos)."""
    seq, lps = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            lp = pm(input_ids=torch.tensor([seq])).logits[0, -1].log_softmax(-1)
            seq.append(int(lp.argmax()))
            lps.append(lp[seq[-1]].item())
    return seq[len(prompt):], lps


def check_gpt2_from_peft(top):
    print("PEFT -> tfm, GPT-2 (GPT2LMHeadModel, Conv1D):")
    base = gpt2_base(os.path.join(top, "gpt2"))
    rng = np.random.default_rng(5)
    ids = [int(x) for x in rng.integers(0, 47, 24)]
    npy = write_ids(os.path.join(top, "g.npy"), ids)
    plain = tfm_logprobs(base, None, npy, len(ids))
    with torch.no_grad():
        hf = GPT2LMHeadModel.from_pretrained(base).eval()
    compare("GPT-2 base, no adapter: tfm-eval vs transformers", plain, peft_logprobs(hf, ids))
    cases = [
        ("r 4, c_attn c_proj c_fc, F32", "F32",
         dict(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj", "c_fc"])),
        ("r 4, F16, use_rslora, fan_in_fan_out", "F16",
         dict(r=4, lora_alpha=6, target_modules=["c_attn", "c_proj", "c_fc"],
              use_rslora=True, fan_in_fan_out=True)),
        ("r 2, c_attn, layers_to_transform [1], modules_to_save ln_f", "F32",
         dict(r=2, lora_alpha=5, target_modules=["c_attn"], layers_to_transform=[1],
              modules_to_save=["ln_f"])),
    ]
    for i, (what, dt, kw) in enumerate(cases):
        ad = os.path.join(top, f"gpt2-ad{i}")
        pm, said = peft_adapter(GPT2LMHeadModel, base, ad, dt, seed=i, **kw)
        if said:
            bad.append(f"GPT-2 {what}: PEFT itself warned loading its adapter: {said}")
        want = peft_logprobs(pm, ids)
        got = tfm_logprobs(base, ad, npy, len(ids))
        compare(f"GPT-2 {what}: tfm-eval --adapter log-probs", got, want)
        if not np.abs(want - plain).max() > 1e-2:
            bad.append(f"GPT-2 {what}: the adapter hardly moves the log-probs")
        prompt = ids[:5]
        g_ids, g_lps = tfm_greedy(base, ad, prompt, 10)
        p_ids, p_lps = peft_greedy(pm, prompt, 10)
        if g_ids != p_ids:
            bad.append(f"GPT-2 {what}: greedy tokens tfm {g_ids} peft {p_ids}")
        else:
            compare(f"GPT-2 {what}: tfm-generate --adapter greedy log-probs", g_lps, p_lps)
        merged = os.path.join(top, f"gpt2-merged{i}.safetensors")
        run([TRAIN, "--merge-adapter", ad, base, "-o", merged])
        with torch.no_grad():
            mu = pm.merge_and_unload()
        compare(f"GPT-2 {what}: tfm-train --merge-adapter vs merge_and_unload",
                tfm_logprobs(merged, None, npy, len(ids)), peft_logprobs(mu, ids))


def tfm_hidden(model, adapter, lines, top):
    """tfm-embed --pool none: the last layer's vector of every token."""
    txt, out = os.path.join(top, "lines.txt"), os.path.join(top, "h.npy")
    with open(txt, "w") as f:
        f.write("\n".join(lines) + "\n")
    cmd = [EMBED, "-q", "--threads", "1", "-m", model, "--pool", "none", "-o", out, txt]
    if adapter:
        cmd += ["--adapter", adapter]
    run(cmd)
    return np.load(out)


def peft_hidden(pm, tok, lines):
    with torch.no_grad():
        return np.concatenate([pm(**tok(ln, return_tensors="pt")).last_hidden_state[0].numpy()
                               for ln in lines])


BERT_LINES = ["the cat sat on a mat", "a big red dog ran far away", "cat dog"]


def check_bert_from_peft(top):
    print("PEFT -> tfm, BERT (BertModel, nn.Linear):")
    base = bert_base(os.path.join(top, "bert"))
    tok = BertTokenizerFast.from_pretrained(base)
    plain = tfm_hidden(base, None, BERT_LINES, top)
    compare("BERT base, no adapter: tfm-embed vs transformers", plain,
            peft_hidden(BertModel.from_pretrained(base).eval(), tok, BERT_LINES))
    for i, (what, dt, kw) in enumerate([
            ("r 4, query key value dense, F32", "F32",
             dict(r=4, lora_alpha=8, target_modules=["query", "key", "value", "dense"])),
            ("r 8, F16, use_rslora, fan_in_fan_out (PEFT: false for nn.Linear)", "F16",
             dict(r=8, lora_alpha=4, target_modules=["query", "value", "dense"],
                  use_rslora=True, fan_in_fan_out=True))]):
        ad = os.path.join(top, f"bert-ad{i}")
        pm, said = peft_adapter(BertModel, base, ad, dt, seed=10 + i, **kw)
        if said:
            bad.append(f"BERT {what}: PEFT itself warned loading its adapter: {said}")
        want = peft_hidden(pm, tok, BERT_LINES)
        compare(f"BERT {what}: tfm-embed --adapter hidden states",
                tfm_hidden(base, ad, BERT_LINES, top), want)
        if not np.abs(want - plain).max() > 1e-2:
            bad.append(f"BERT {what}: the adapter hardly moves the hidden states")
        merged = os.path.join(top, f"bert-merged{i}.safetensors")
        run([TRAIN, "--merge-adapter", ad, base, "-o", merged])
        with torch.no_grad():
            mu = pm.merge_and_unload()
        compare(f"BERT {what}: tfm-train --merge-adapter vs merge_and_unload",
                tfm_hidden(merged, None, BERT_LINES, top), peft_hidden(mu, tok, BERT_LINES))


def t5_batch(rng, V):
    src = rng.integers(2, V, (2, 9))
    src_len = [9, 6]
    tgt = np.concatenate([np.zeros((2, 1), np.int64), rng.integers(2, V, (2, 6))], 1)
    return src, src_len, tgt


def tfm_t5_logits(top, model, adapter, src, src_len, tgt):
    bf, of = os.path.join(top, "t5batch.bin"), os.path.join(top, "t5logits.bin")
    with open(bf, "wb") as f:
        np.array([src.shape[0], tgt.shape[1], src.shape[1]], np.int32).tofile(f)
        tgt.astype(np.int32).tofile(f)
        src.astype(np.int32).tofile(f)
        np.array(src_len, np.int32).tofile(f)
    run([PROBE, "model-logits", model, bf, of] + ([adapter] if adapter else []))
    return np.fromfile(of, np.float32).reshape(tgt.shape[0], tgt.shape[1], -1)


def peft_t5_logits(pm, src, src_len, tgt):
    mask = torch.tensor((np.arange(src.shape[1])[None] < np.array(src_len)[:, None]).astype(int))
    with torch.no_grad():
        return pm(input_ids=torch.tensor(src), attention_mask=mask,
                  decoder_input_ids=torch.tensor(tgt)).logits.numpy()


def peft_t5_greedy(pm, src, n):
    """Greedy decoding of one source on PEFT's model (decoder start 0)."""
    x, seq, lps = torch.tensor([src]), [0], []
    with torch.no_grad():
        for _ in range(n):
            lp = pm(input_ids=x, decoder_input_ids=torch.tensor([seq])).logits[0, -1]
            lp = lp.log_softmax(-1)
            seq.append(int(lp.argmax()))
            lps.append(lp[seq[-1]].item())
    return seq[1:], lps


def check_t5_from_peft(top):
    print("PEFT -> tfm, T5 (T5ForConditionalGeneration):")
    base = t5_base(os.path.join(top, "t5"))
    V = 40
    rng = np.random.default_rng(9)
    src, src_len, tgt = t5_batch(rng, V)
    valid = lambda a: a  # every decoder position is scored
    hf = T5ForConditionalGeneration.from_pretrained(base).eval()
    plain = tfm_t5_logits(top, base, None, src, src_len, tgt)
    compare("T5 base, no adapter: logits vs transformers", plain,
            peft_t5_logits(hf, src, src_len, tgt))
    for i, (what, dt, kw) in enumerate([
            ("r 4, q k v o wi wo, F32", "F32",
             dict(r=4, lora_alpha=8, target_modules=["q", "k", "v", "o", "wi", "wo"])),
            ("r 2, F16, use_rslora", "F16",
             dict(r=2, lora_alpha=3, target_modules=["q", "v", "wo"], use_rslora=True))]):
        ad = os.path.join(top, f"t5-ad{i}")
        pm, said = peft_adapter(T5ForConditionalGeneration, base, ad, dt, seed=20 + i, **kw)
        if said:
            bad.append(f"T5 {what}: PEFT itself warned loading its adapter: {said}")
        want = peft_t5_logits(pm, src, src_len, tgt)
        compare(f"T5 {what}: tfm_model_load_adapter teacher-forced logits",
                valid(tfm_t5_logits(top, base, ad, src, src_len, tgt)), valid(want))
        if not np.abs(want - plain).max() > 1e-2:
            bad.append(f"T5 {what}: the adapter hardly moves the logits")
        # tfm-generate appends the end of text (1) to a source of ids
        s = [int(x) for x in src[0]]
        g = json.loads(run([GEN, "-q", "--threads", "1", "-m", base, "--adapter", ad, "--ids",
                            "--greedy", "--ignore-eos", "-n", 6, "--json",
                            " ".join(map(str, s))]).stdout.splitlines()[0])
        p_ids, p_lps = peft_t5_greedy(pm, s + [1], 6)
        if g["ids"] != p_ids:
            bad.append(f"T5 {what}: greedy tokens tfm {g['ids']} peft {p_ids}")
        else:
            compare(f"T5 {what}: tfm-generate --adapter greedy log-probs", g["logprobs"], p_lps)
        merged = os.path.join(top, f"t5-merged{i}.safetensors")
        run([TRAIN, "--merge-adapter", ad, base, "-o", merged])
        with torch.no_grad():
            mu = pm.merge_and_unload()
        compare(f"T5 {what}: tfm-train --merge-adapter vs merge_and_unload",
                tfm_t5_logits(top, merged, None, src, src_len, tgt),
                peft_t5_logits(mu, src, src_len, tgt))


def t5_tokenizer(d):
    """A tokenizer.json for the T5 folder (Unigram over whole words, </s>
    after each text), so that tfm-train reads pairs of words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    words = ["<pad>", "</s>", "<unk>"] + ["\u2581w%d" % i for i in range(37)]
    t = Tokenizer(models.Unigram([(w, 0.0 if i < 3 else -1.0) for i, w in enumerate(words)],
                                 unk_id=2))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    t.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    t.post_processor = processors.TemplateProcessing(single="$A </s>",
                                                     special_tokens=[("</s>", 1)])
    t.add_special_tokens(["<pad>", "</s>", "<unk>"])
    t.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>",
                   "pad_token": "<pad>", "unk_token": "<unk>"}, f)


def loads_cleanly(what, cls, base, d, **kw):
    """PeftModel.from_pretrained of tfm's adapter: no warning at all (missing
    or unexpected keys, target modules not found), a complete config."""
    with quiet_hf():
        m = cls.from_pretrained(base, **kw)  # a head the base lacks is new here
    with quiet_hf() as (log, w):
        pm = PeftModel.from_pretrained(m, d).eval()
    # (transformers' own deprecation inside PEFT is not about the adapter)
    said = [ln for ln in log.getvalue().splitlines() if ln.strip()] + \
        [str(x.message) for x in w if "is_gradient_checkpointing" not in str(x.message)]
    if said:
        bad.append(f"{what}: PeftModel.from_pretrained said: {said}")
    c = json.load(open(os.path.join(d, "adapter_config.json")))
    for k in ("base_model_name_or_path", "peft_type", "task_type", "r", "lora_alpha",
              "target_modules", "lora_dropout", "bias", "fan_in_fan_out", "modules_to_save"):
        if k not in c:
            bad.append(f"{what}: adapter_config.json has no {k}")
    n = sum(1 for m in pm.modules() if hasattr(m, "lora_A") and "default" in m.lora_A)
    print(f"  {what}: PeftModel.from_pretrained loads it, {n} LoRA modules, target_modules "
          f"{c.get('target_modules')}, task_type {c.get('task_type')}")
    return pm


def tfm_lora(out, base, *sets):
    cmd = [TRAIN, "-q", "--threads", "1", "-o", out, "--set", f"train.init={base}",
           "--set", "train.eval_interval=0", "--set", "optim.lr=3e-2"]
    for x in sets:
        cmd += ["--set", x]
    run(cmd)
    return out


def check_tfm_to_peft(top):
    print("tfm -> PEFT:")
    # GPT-2: q, v inside c_attn (one adapter of rank 2r), c_proj, c_fc
    base = os.path.join(top, "gpt2")
    rng = np.random.default_rng(11)
    data = write_ids(os.path.join(top, "train.npy"), (np.arange(3000) * 5 +
                                                      rng.integers(0, 3, 3000)) % 47)
    out = tfm_lora(os.path.join(top, "gpt2-lora"), base, f"data.train={data}",
                   "train.lora.r=4", "train.lora.alpha=8", "train.lora.targets=q, v, o, fc",
                   "train.batch_size=4", "model.block_size=16", "train.max_steps=4")
    pm = loads_cleanly("GPT-2 folder, tfm-train's adapter", GPT2LMHeadModel, base, out)
    ids = [int(x) for x in rng.integers(0, 47, 20)]
    npy = write_ids(os.path.join(top, "g2.npy"), ids)
    want = peft_logprobs(pm, ids)
    compare("GPT-2 folder, tfm-train's adapter: tfm-eval --adapter vs PEFT log-probs",
            tfm_logprobs(base, out, npy, len(ids)), want)
    hf = GPT2LMHeadModel.from_pretrained(base).eval()
    if not np.abs(want - peft_logprobs(hf, ids)).max() > 1e-3:
        bad.append("GPT-2 folder: tfm-train's adapter does not move PEFT's log-probs")
    # BERT, classification: the adapter and its classifier (modules_to_save)
    base = os.path.join(top, "bert")
    cls_data = os.path.join(top, "cls.tsv")
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "big", "red"]
    with open(cls_data, "w") as f:
        for i in range(120):
            a = rng.integers(0, len(words), 5)
            f.write("%d\t%s\n" % (int(a[0] < 6), " ".join(words[x] for x in a)))
    out = tfm_lora(os.path.join(top, "bert-lora"), base, f"data.text={cls_data}",
                   "train.task=classify", "model.pooler=true", "train.lora.r=2",
                   "train.lora.targets=q, k, v, o, fc, proj", "train.batch_size=4",
                   "train.max_steps=4")
    from transformers import BertForSequenceClassification
    pm = loads_cleanly("BERT folder, tfm-train's classify adapter",
                       BertForSequenceClassification, base, out, num_labels=2)
    saved = load_file(os.path.join(out, "adapter_model.safetensors"))
    got = pm.base_model.model.classifier.modules_to_save["default"].weight.detach()
    compare("BERT folder, tfm-train's adapter: PEFT's classifier (modules_to_save)",
            got.numpy(), saved["base_model.model.classifier.weight"].numpy(), 0)
    tok = BertTokenizerFast.from_pretrained(base)
    compare("BERT folder, tfm-train's adapter: tfm-embed (the run's model) vs PEFT hidden states",
            tfm_hidden(os.path.join(out, "model.safetensors"), None, BERT_LINES, top),
            peft_hidden(pm.base_model.model.bert, tok, BERT_LINES))
    # T5: q, k, v, o (self- and cross-attention), wi, wo
    base = os.path.join(top, "t5")
    t5_tokenizer(base)
    pairs = os.path.join(top, "pairs.tsv")
    with open(pairs, "w") as f:
        for i in range(40):
            a = ["w%d" % x for x in rng.integers(0, 37, 5)]
            f.write(" ".join(a) + "\t" + " ".join(reversed(a)) + "\n")
    out = tfm_lora(os.path.join(top, "t5-lora"), base, f"data.text={pairs}",
                   f"data.tokenizer={base}", "train.lora.r=2",
                   "train.lora.targets=q, k, v, o, fc, proj", "train.batch_size=4",
                   "train.max_steps=3")
    pm = loads_cleanly("T5 folder, tfm-train's adapter", T5ForConditionalGeneration, base, out)
    src, src_len, tgt = t5_batch(rng, 40)
    compare("T5 folder, tfm-train's adapter: logits with the adapter vs PEFT",
            tfm_t5_logits(top, base, out, src, src_len, tgt),
            peft_t5_logits(pm, src, src_len, tgt))


def line_col(path, key, at_key=False):
    """Where key's value (or the key) starts in a JSON file: file:line:col."""
    with open(path) as f:
        for n, ln in enumerate(f, 1):
            i = ln.find('"%s":' % key)
            if i >= 0:
                return f"{path}:{n}:{i + 1 if at_key else i + len(key) + 5}"
    return path


def refused(what, cmd, pieces, out=None):
    r = run(cmd, ok=False)
    prog = os.path.basename(str(cmd[0]))
    msg = r.stderr.strip()
    if r.returncode != 1 or not msg.startswith(prog + ": ") or "\n" in msg or \
            not all(p in msg for p in pieces):
        bad.append(f"{what}: exit {r.returncode}: {msg!r}, want one line with {pieces}")
    elif out and os.path.exists(out):
        bad.append(f"{what}: {out} was written")
    else:
        print(f"  {what}: refused: {msg}")


def check_gpt2_refusals(top):
    """What tfm cannot honour, refused naming the key of adapter_config.json."""
    print("PEFT settings tfm does not honour:")
    base = os.path.join(top, "gpt2")
    npy = os.path.join(top, "g.npy")
    tg = dict(r=2, lora_alpha=4, target_modules=["c_attn"])
    cases = [("bias 'all'", dict(bias="all"), "bias"),
             ("bias 'lora_only'", dict(bias="lora_only"), "bias"),
             ("lora_bias", dict(lora_bias=True), "lora_bias"),
             ("use_dora", dict(use_dora=True), "use_dora"),
             ("trainable_token_indices", dict(trainable_token_indices=[3, 5]),
              "trainable_token_indices"),
             ("rank_pattern", dict(rank_pattern={"h.1.attn.c_attn": 4}), "rank_pattern"),
             ("alpha_pattern", dict(alpha_pattern={"h.1.attn.c_attn": 3}), "alpha_pattern")]
    for i, (what, kw, key) in enumerate(cases):
        ad = os.path.join(top, f"gpt2-no{i}")
        peft_adapter(GPT2LMHeadModel, base, ad, want_judge=False, **tg, **kw)
        cfg = os.path.join(ad, "adapter_config.json")
        pos = line_col(cfg, key)
        out = os.path.join(top, f"no{i}.safetensors")
        refused(f"GPT-2 adapter with {what}, tfm-eval", [EVAL, "perplexity", "-q", "-m", base,
                "--tokens", npy, "--adapter", ad], [pos, key])
        if i == 0:
            refused(f"GPT-2 adapter with {what}, tfm-train --merge-adapter",
                    [TRAIN, "--merge-adapter", ad, base, "-o", out], [pos, key], out)
    # a key this tfm does not know (a newer PEFT's) may change the adapter
    ad = os.path.join(top, "gpt2-future")
    shutil.copytree(os.path.join(top, "gpt2-ad0"), ad)
    cfg = os.path.join(ad, "adapter_config.json")
    c = json.load(open(cfg))
    c["lora_future_variant"] = {"mode": "x"}
    json.dump(c, open(cfg, "w"), indent=2, sort_keys=True)
    refused("an adapter_config.json key tfm does not know", [GEN, "-q", "-m", base, "--ids",
            "--adapter", ad, "1 2"], [line_col(cfg, "lora_future_variant", True),
                                      "lora_future_variant"])


class TfmDecoder(torch.nn.Module):
    """tfm's native decoder (eval_torch.logits_of's arithmetic) as a PyTorch
    module tree named as tfm names its adapter modules: h.{i}.attn.q, .k,
    .v (the column blocks of attn.c_attn), .attn.c_proj, .mlp.c_fc,
    .mlp.c_proj, nn.Linear each; so that PEFT can load tfm's adapter."""

    def __init__(self, P, cfg):
        super().__init__()
        self.P, self.L, self.H = P, int(cfg["n_layer"]), int(cfg["n_head"])
        import types  # PeftModelForCausalLM reads config.model_type
        self.config = types.SimpleNamespace(model_type="tfm", tie_word_embeddings=True)
        self.eps = float(cfg["ln_eps"])
        C = P["wte.weight"].shape[1]

        def lin(w, b):  # tfm's [in, out] weight as nn.Linear's [out, in]
            m = torch.nn.Linear(w.shape[0], w.shape[1])
            m.weight.data, m.bias.data = w.t().float().contiguous(), b.float().clone()
            return m
        blocks = []
        for i in range(self.L):
            p = lambda n: P[f"h.{i}.{n}"]
            W, bb = p("attn.c_attn.weight"), p("attn.c_attn.bias")
            attn = torch.nn.Module()
            for j, n in enumerate("qkv"):
                setattr(attn, n, lin(W[:, j * C:(j + 1) * C], bb[j * C:(j + 1) * C]))
            attn.c_proj = lin(p("attn.c_proj.weight"), p("attn.c_proj.bias"))
            mlp = torch.nn.Module()
            mlp.c_fc = lin(p("mlp.c_fc.weight"), p("mlp.c_fc.bias"))
            mlp.c_proj = lin(p("mlp.c_proj.weight"), p("mlp.c_proj.bias"))
            blk = torch.nn.Module()
            blk.attn, blk.mlp = attn, mlp
            blocks.append(blk)
        self.h = torch.nn.ModuleList(blocks)

    def prepare_inputs_for_generation(self, *a, **kw):  # PEFT's CAUSAL_LM asks for it
        raise NotImplementedError

    def forward(self, input_ids=None, **unused):  # PEFT passes HF's keywords
        import math
        x = input_ids
        P, H, B, T = self.P, self.H, x.shape[0], x.shape[1]
        f = lambda k: P[k].float()
        C = P["wte.weight"].shape[1]
        h = f("wte.weight")[x] + f("wpe.weight")[:T]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        ln = lambda v, k: F.layer_norm(v, (C,), f(k + ".weight"), f(k + ".bias"), self.eps)
        for i, blk in enumerate(self.h):
            a = ln(h, f"h.{i}.ln_1")
            q, k, v = [m(a).view(B, T, H, C // H).transpose(1, 2)
                       for m in (blk.attn.q, blk.attn.k, blk.attn.v)]
            att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // H)).masked_fill(~mask, -1e30)
            o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
            h = h + blk.attn.c_proj(o)
            a = ln(h, f"h.{i}.ln_2")
            h = h + blk.mlp.c_proj(F.gelu(blk.mlp.c_fc(a), approximate="tanh"))
        return ln(h, "ln_f") @ f("wte.weight").t()


def check_native_to_peft(top):
    """A native tfm model's adapter keeps tfm's module names (no HF class
    exists for PEFT to load it on): PEFT loads it on TfmDecoder with no
    warning and gives tfm-eval --adapter's log-probabilities."""
    import eval_torch
    print("tfm -> PEFT, a native tfm model:")
    data = os.path.join(top, "train.npy")
    cfg = os.path.join(top, "native.yaml")
    with open(cfg, "w") as f:
        f.write("model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 16}\n"
                f"data: {{train: {data}}}\n")
    base = os.path.join(top, "native")
    run([TRAIN, "-q", "-c", cfg, "--threads", "1", "--set", "train.max_steps=20", "-o", base])
    st = os.path.join(base, "model.safetensors")
    out = os.path.join(top, "native-lora")
    run([TRAIN, "-q", "-c", cfg, "--threads", "1", "-o", out, "--set", f"train.init={st}",
         "--set", "train.lora.r=4", "--set", "train.lora.targets=q, k, v, o, fc, proj",
         "--set", "optim.lr=3e-2", "--set", "train.max_steps=4"])
    P, mcfg, _ = eval_torch.read_model(st)
    with quiet_hf() as (log, w):
        pm = PeftModel.from_pretrained(TfmDecoder(P, mcfg), out).eval()
    said = [ln for ln in log.getvalue().splitlines() if ln.strip()] + [str(x.message) for x in w]
    if said:
        bad.append(f"native tfm model: PeftModel.from_pretrained said: {said}")
    n = sum(1 for m in pm.modules() if hasattr(m, "lora_A") and "default" in m.lora_A)
    c = json.load(open(os.path.join(out, "adapter_config.json")))
    print(f"  native: PeftModel.from_pretrained on tfm's module tree: {n} LoRA modules, "
          f"target_modules {c['target_modules']}")
    if n != 12:
        bad.append(f"native tfm model: PEFT made {n} LoRA modules, not 12")
    rng = np.random.default_rng(13)
    ids = [int(x) for x in rng.integers(0, 47, 16)]
    npy = write_ids(os.path.join(top, "n.npy"), ids)
    with torch.no_grad():
        lp = pm(input_ids=torch.tensor([ids]))[0].log_softmax(-1)
    want = np.array([lp[t - 1, ids[t]].item() for t in range(1, len(ids))])
    compare("native tfm model + tfm-train's adapter: tfm-eval --adapter vs PEFT log-probs",
            tfm_logprobs(st, out, npy, len(ids)), want)
    with torch.no_grad(), pm.disable_adapter():
        lp0 = pm(input_ids=torch.tensor([ids]))[0].log_softmax(-1)
    plain = np.array([lp0[t - 1, ids[t]].item() for t in range(1, len(ids))])
    compare("native tfm model, no adapter: tfm-eval vs TfmDecoder",
            tfm_logprobs(st, None, npy, len(ids)), plain)
    if not np.abs(want - plain).max() > 1e-3:
        bad.append("native tfm model: the adapter hardly moves PEFT's log-probs")


def check_step(top):
    """tfm-train's LoRA steps against PEFT + PyTorch's, from the same A
    (tfm's zero-step adapter loaded into PEFT) and B (0), on the same
    batches (train_torch.Rng: tfm's data stream), no dropout, no clipping:
    the losses and, after each of steps 1 and 2, A and B to 1e-5 relative.
    attn.c_proj, mlp.c_fc and mlp.c_proj: PEFT's modules are tfm's one for
    one (GPT-2's q, k, v are parts of one Conv1D in PEFT, one adapter of
    rank 3r whose off-diagonal blocks PEFT would train too)."""
    import train_torch
    print("one LoRA step, tfm-train against PEFT + PyTorch:")
    base = os.path.join(top, "gpt2")
    data = np.load(os.path.join(top, "train.npy")).astype(np.int64)
    B, T, LR, B1, B2, WD, SEED = 4, 16, 2e-2, 0.9, 0.99, 0.1, 21
    # Adam's first steps are lr·g/(|g| + eps) elementwise: where |g| is near
    # eps, float32's rounding of g (1e-7 of the gradient's scale, in tfm and
    # in PyTorch alike) is amplified by lr/(4·eps).  eps 1e-8 leaves few such
    # elements; eps 1 makes the step nearly plain gradient descent (SGD's).
    for opt_name, EPS in (("adamw", 1e-8), ("adam", 1.0)):
        sets = [f"data.train={os.path.join(top, 'train.npy')}", "train.lora.r=3",
                "train.lora.alpha=6", "train.lora.targets=o, fc, proj", f"train.batch_size={B}",
                f"model.block_size={T}", f"train.seed={SEED}", f"optim.type={opt_name}",
                f"optim.lr={LR}", f"optim.beta1={B1}", f"optim.beta2={B2}", f"optim.eps={EPS}",
                f"optim.weight_decay={WD}", "optim.grad_clip=0", "schedule.decay=constant",
                "train.log_interval=1", "model.dropout=0", "model.attn_dropout=0",
                "model.emb_dropout=0"]
        runs = [tfm_lora(os.path.join(top, f"step-{opt_name}{n}"), base, *sets,
                         f"train.max_steps={n}") for n in (0, 1, 2)]
        with quiet_hf():
            pm = PeftModel.from_pretrained(GPT2LMHeadModel.from_pretrained(base), runs[0],
                                           is_trainable=True)
        pm.train()  # dropout is 0 in the adapter; the base's is off below
        for m in pm.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        params = [p for n, p in pm.named_parameters() if p.requires_grad]
        if not params or any("lora_" not in n for n, p in pm.named_parameters()
                             if p.requires_grad):
            bad.append(f"{opt_name}: PEFT trains {[n for n, p in pm.named_parameters()]}")
            return
        Opt = torch.optim.AdamW if opt_name == "adamw" else torch.optim.Adam
        opt = Opt(params, lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)
        rng = train_torch.Rng(SEED ^ train_torch.DATA_SEED_SALT)
        losses = []
        for step in (1, 2):
            xs, ys = [], []
            for _ in range(B):
                st = rng.below(len(data) - T)
                xs.append(data[st:st + T])
                ys.append(data[st + 1:st + T + 1])
            x, y = torch.tensor(np.array(xs)), torch.tensor(np.array(ys))
            opt.zero_grad()
            logits = pm(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
            got = load_file(os.path.join(runs[step], "adapter_model.safetensors"))
            want = {n.replace(".default", ""): p.detach() for n, p in pm.named_parameters()
                    if p.requires_grad}
            if sorted(got) != sorted(want):
                bad.append(f"{opt_name}: tfm's tensors {sorted(got)[:2]}..., PEFT's "
                           f"{sorted(want)[:2]}...")
                return
            rel = max(float((got[k] - want[k]).abs().max() / want[k].abs().max().clamp(min=1e-30))
                      for k in want if want[k].abs().max() > 0)
            moved = {k[len("base_model.model."):].split(".lora_")[1][0]: 0.0 for k in want}
            for k in want:
                s0 = load_file(os.path.join(runs[0], "adapter_model.safetensors"))[k]
                ab = k.split(".lora_")[1][0]
                moved[ab] = max(moved[ab], float((want[k] - s0).abs().max()))
            worst[f"{opt_name} step {step}: A and B, relative"] = rel
            print(f"  {opt_name}, step {step}: A and B max relative |tfm - peft| = {rel:.2e} "
                  f"(moved: A {moved['A']:.2e}, B {moved['B']:.2e})")
            # step 2 is A's first move (B was 0): its Adam step is nearly
            # sign(g), where a g of A near eps amplifies rounding as above
            tol = 1e-5 if step == 1 else 5e-5
            if not rel <= tol:
                bad.append(f"{opt_name} step {step}: A, B differ by {rel:.3g} (relative) "
                           f"> {tol:g}")
            if step == 2 and not min(moved.values()) > 1e-4:
                bad.append(f"{opt_name}: the steps hardly move A or B: {moved}")
        with open(os.path.join(runs[2], "log.tsv")) as f:
            rows = [ln.rstrip("\n").split("\t") for ln in f][1:]
        tl = [float(r[1]) for r in rows]
        print(f"  {opt_name}: losses tfm {tl}, peft {[round(v, 7) for v in losses]}")
        if len(tl) != 2 or any(abs(a - b) > 1e-5 * max(1, abs(b)) for a, b in zip(tl, losses)):
            bad.append(f"{opt_name}: losses tfm {tl}, peft {losses}")


def check_other_base(top):
    """Adapters made for another base: refused, naming the adapter's file
    and what the base has, exit 1, nothing written."""
    print("adapters of another base:")
    base, bert = os.path.join(top, "gpt2"), os.path.join(top, "bert")
    npy = os.path.join(top, "g.npy")
    wide = gpt2_base(os.path.join(top, "gpt2-wide"), C=48)
    ad = os.path.join(top, "wide-ad")
    peft_adapter(GPT2LMHeadModel, wide, ad, want_judge=False, r=2, lora_alpha=4,
                 target_modules=["c_attn"])
    deep = os.path.join(top, "gpt2-deep")
    torch.manual_seed(4)
    GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=3, n_head=2, n_positions=32, vocab_size=48,
                               bos_token_id=47, eos_token_id=47)).save_pretrained(deep)
    ad_deep = os.path.join(top, "deep-ad")
    peft_adapter(GPT2LMHeadModel, deep, ad_deep, want_judge=False, r=2, lora_alpha=4,
                 target_modules=["c_fc"])
    # BERT's query and value on a GPT-2 of the same width would fit c_attn's columns
    ad_bert = os.path.join(top, "bert-qv")
    peft_adapter(BertModel, bert, ad_bert, want_judge=False, r=2, lora_alpha=4,
                 target_modules=["query", "value"])
    cases = [
        ("a GPT-2 adapter of width 48 on width 32", ad,
         [f"{ad}/adapter_model.safetensors: module 'transformer.h.0.attn.c_attn'",
          "lora_A [2, 48] and lora_B [144, 2] do not fit the base model's "
          "h.0.attn.c_attn.weight [32, 96]"]),
        ("a 3-layer GPT-2's adapter on 2 layers", ad_deep,
         [f"{ad_deep}/adapter_model.safetensors: module 'transformer.h.2.mlp.c_fc'",
          "names no weight of the base model"]),
        ("a BERT adapter (query, value) on GPT-2", ad_bert,
         [f"{ad_bert}/adapter_model.safetensors: module 'encoder.layer.0.attention.self.",
          f"is a BERT module, but the base model {base} is a GPT-2 checkpoint"]),
    ]
    for i, (what, a, pieces) in enumerate(cases):
        out = os.path.join(top, f"other{i}.safetensors")
        refused(f"{what}, tfm-eval", [EVAL, "perplexity", "-q", "-m", base, "--tokens", npy,
                                      "--adapter", a], pieces)
        refused(f"{what}, tfm-generate", [GEN, "-q", "-m", base, "--ids", "--adapter", a,
                                          "1 2"], pieces)
        refused(f"{what}, tfm-train --merge-adapter", [TRAIN, "--merge-adapter", a, base, "-o",
                                                       out], pieces, out)
    gad = os.path.join(top, "gpt2-ad0")
    txt = os.path.join(top, "lines.txt")
    refused("a GPT-2 adapter on BERT, tfm-embed", [EMBED, "-q", "-m", bert, "--adapter", gad,
            "-o", os.path.join(top, "x.npy"), txt],
            [f"{gad}/adapter_model.safetensors: module 'transformer.h.",
             f"is a GPT-2 module, but the base model {bert} is a BERT checkpoint"],
            os.path.join(top, "x.npy"))


def main():
    top = tempfile.mkdtemp(prefix="tfm-peft-hf.")
    try:
        for part in (check_gpt2_from_peft, check_gpt2_refusals, check_bert_from_peft,
                     check_t5_from_peft, check_tfm_to_peft, check_native_to_peft, check_step,
                     check_other_base):
            t0 = time.time()
            part(top)
            print(f"  ({part.__name__}: {time.time() - t0:.1f} s)")
    finally:
        if os.environ.get("KEEP"):
            print("kept", top)
        else:
            shutil.rmtree(top)
    for b in bad:
        print("FAIL: " + b)
    if worst:
        k = max(worst, key=worst.get)
        print(f"largest difference (relative to the scale): {worst[k]:.2e} ({k})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
