"""What the HuggingFace checkpoint tests (hf_bert.py, hf_t5.py, hf_bart.py)
share: the programs' paths, a safetensors writer (HF's layout is the
caller's), running a program, tests/io_probe on an encoder-decoder, tfm-
generate's greedy output against a reference, tfm-eval info's dropout
rates, and fine-tuning from a folder (train.init; LoRA, the adapter in
HF's module names)."""
import json
import os
import re
import struct
import subprocess

import numpy as np
import torch

BUILD = os.environ.get("TFM_BUILDDIR", ".")
SRC = os.environ.get("TFM_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))
PROBE = os.path.join(BUILD, "tests", "io_probe")
GEN = os.path.join(BUILD, "tfm-generate")
EVAL = os.path.join(BUILD, "tfm-eval")
TRAIN = os.path.join(BUILD, "tfm-train")
EMBED = os.path.join(BUILD, "tfm-embed")
TOKENIZE = os.path.join(BUILD, "tfm-tokenize")
TOL = 1e-4


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> numpy array (float32, float16 or int64), in file order."""
    header, off, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def refusals(what, pieces, results):
    """results: (program, CompletedProcess) pairs that must each exit 1 with
    one message, starting with the program's name, holding every piece."""
    bad = []
    for prog, rr in results:
        msg = rr.stderr.strip()
        if rr.returncode != 1 or not msg.startswith(prog + ": ") or \
                not all(x in msg for x in pieces):
            bad.append(f"{what} ({prog}): exit {rr.returncode}: {msg!r}, want {pieces}")
    return bad


def probe_encdec(d, src, src_len, tgt):
    """tests/io_probe model-logits of an encoder-decoder (the folder d):
    (the completed process, the logits file)."""
    top = os.path.dirname(d.rstrip("/"))
    bf, of = os.path.join(top, "batch.bin"), os.path.join(top, "logits.bin")
    B, S = src.shape
    with open(bf, "wb") as f:
        np.array([B, tgt.shape[1], S], np.int32).tofile(f)
        tgt.astype(np.int32).tofile(f)
        src.astype(np.int32).tofile(f)
        np.array(src_len, np.int32).tofile(f)
    return run([PROBE, "model-logits", d, bf, of]), of


def compare_greedy(name, outs, refs, eos):
    """tfm-generate --json's objects against the reference's (ids, log-probs)
    of each source: the same ids (tfm's end with eos when it ended the
    text) and log-probabilities within TOL."""
    bad, worst, stops = [], 0.0, 0
    for b, (o, (ids, lps)) in enumerate(zip(outs, refs)):
        if [i for i in o["ids"] if i != eos] != ids:
            bad.append(f"greedy row {b}: tfm {o['ids']} torch {ids}")
            continue
        stops += len(lps) > len(ids)
        worst = max(worst, max(abs(a - c) for a, c in zip(o["logprobs"], lps)))
    if len(outs) != len(refs):
        bad.append(f"{len(outs)} translations for {len(refs)} sources")
    print(f"  {name}: greedy tokens equal on {len(refs)} sources ({stops} stopped at eos), "
          f"log-prob max diff {worst:.2e}")
    if worst > TOL:
        bad.append(f"greedy log-probabilities differ by {worst:.3g}")
    return bad


def check_rates(what, path, want):
    """tfm-eval info's dropout rates of the model at path are want's."""
    r = run([EVAL, "info", "-m", path])
    if r.returncode != 0:
        return [f"{what}: tfm-eval info: {r.stderr.strip()}"]
    info = dict(x.split("\t", 1) for x in r.stdout.splitlines() if "\t" in x)
    got = {k: float(info[k]) if k in info else None for k in want}
    if got != want:
        return [f"{what}: dropout rates {got}, want {want}"]
    print(f"  {what}: dropout rates {got}")
    return []


def check_train_init(top, d, words, V, logits, rng, rates=None, rates0=None):
    """tfm-train fine-tunes from the folder d (train.init, data.tokenizer)
    on pairs of words for two steps, and the result generates; a step at
    learning rate 0 saves a model whose logits are logits(src, src_lengths,
    tgt)'s (hf_bart.py uses it too).  With rates: the folder's dropout rates
    (tfm-eval info), which the first run keeps; the lr-0 run then sets
    model.dropout=0.05, and its rates are rates0: the user's key wins, the
    others stay config.json's."""
    bad = []
    pairs = os.path.join(top, "pairs.tsv")
    with open(pairs, "w") as f:
        for i in range(40):
            a = " ".join(words[(i + k) % len(words)] for k in range(5))
            f.write(f"{a}\t{' '.join(reversed(a.split()))}\n")
    run_dir = os.path.join(top, "run")
    r = run([TRAIN, "-q", "-o", run_dir, "--set", f"train.init={d}", "--set",
             f"data.text={pairs}", "--set", f"data.tokenizer={d}", "--set",
             "train.max_steps=2", "--set", "train.batch_size=4", "--set",
             "train.eval_interval=0", "--threads", "1"])
    if r.returncode != 0:
        bad.append(f"tfm-train from the folder: {r.stderr.strip()[-600:]}")
    else:
        out = os.path.join(run_dir, "model.safetensors")
        # errors="replace": a byte-level model's bytes need not be UTF-8
        r = run([GEN, "-m", out, "--greedy", "-n", "4", "-q"], input="the of and\n",
                errors="replace")
        if r.returncode != 0:
            bad.append(f"tfm-generate on the fine-tuned model: {r.stderr.strip()}")
        print("  tfm-train: two steps from the folder, the result generates")
        if rates:
            bad += check_rates("the folder", d, rates)
            bad += check_rates("tfm-train from the folder", out, rates)
    # a step with learning rate 0 keeps the model: the saved file computes
    # the reference's logits (its configuration kept head_scale, head_bias,
    # decoder_start and the rest of the folder's description)
    run0 = os.path.join(top, "run0")
    r = run([TRAIN, "-q", "-o", run0, "--set", f"train.init={d}", "--set",
             f"data.text={pairs}", "--set", f"data.tokenizer={d}", "--set",
             "train.max_steps=1", "--set", "train.batch_size=2", "--set", "optim.lr=0",
             "--set", "train.eval_interval=0", "--threads", "1"] +
            (["--set", "model.dropout=0.05"] if rates0 else []))
    if r.returncode != 0:
        return bad + [f"tfm-train with lr 0: {r.stderr.strip()[-600:]}"]
    if rates0:
        bad += check_rates("tfm-train from the folder with model.dropout=0.05",
                           os.path.join(run0, "model.safetensors"), rates0)
    src, tgt = rng.integers(2, V, (2, 9)), rng.integers(0, V, (2, 7))
    r, of = probe_encdec(os.path.join(run0, "model.safetensors"), src, [9, 6], tgt)
    if r.returncode != 0:
        return bad + [f"io_probe on the lr-0 run: {r.stderr.strip()}"]
    got = np.fromfile(of, np.float32).reshape(2, 7, V)
    ref = logits(torch.from_numpy(src), [9, 6], torch.from_numpy(tgt)).numpy()
    err = np.abs(got - ref).max()
    print(f"  tfm-train, lr 0: the saved model's logits max |tfm - torch| = {err:.2e}")
    if not err <= TOL:
        bad.append(f"the model saved by tfm-train (lr 0) differs by {err:.3g}: "
                   f"{r.stdout.splitlines()[1:2]}")
    return bad


def check_lora(top, d, V, t, rng):
    """LoRA fine-tuning from the encoder-decoder folder d (its tensors t;
    check_train_init's pairs) writes the adapter in the checkpoint's own
    module names (PEFT's base_model.model.<module>.lora_A.weight;
    target_modules matching exactly the adapted modules), and tfm applies
    it to the folder as the run's merged model computes."""
    out = os.path.join(top, "lora")
    r = run([TRAIN, "-q", "-o", out, "--set", f"train.init={d}", "--set",
             f"data.text={os.path.join(top, 'pairs.tsv')}", "--set", f"data.tokenizer={d}",
             "--set", "train.lora.r=2", "--set", "train.lora.targets=q, k, v, o, fc, proj",
             "--set", "optim.lr=1e-2", "--set", "train.max_steps=3", "--set",
             "train.batch_size=4", "--set", "train.eval_interval=0", "--threads", "1"])
    if r.returncode != 0:
        return [f"LoRA from the folder: {r.stderr.strip()[-600:]}"]
    with open(os.path.join(out, "adapter_config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(out, "adapter_model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        names = [k for k in json.loads(f.read(n)) if k != "__metadata__"]
    mods = sorted({k[len("base_model.model."):-len(".lora_A.weight")] for k in names
                   if k.endswith(".lora_A.weight")})
    base = {k[:-len(".weight")] for k in t}
    tg = cfg["target_modules"]
    hit = lambda m: (re.fullmatch(tg, m) is not None if isinstance(tg, str) else
                     any(m == x or m.endswith("." + x) for x in tg))
    bad = []
    if not mods or any(m not in base for m in mods):
        bad.append(f"LoRA adapter modules {mods[:3]}... are not the checkpoint's "
                   f"({sorted(base)[:3]}...)")
    elif sorted(m for m in base if hit(m)) != mods:
        bad.append(f"target_modules {tg} match {sorted(m for m in base if hit(m))[:4]}..., "
                   f"the adapter has {mods[:4]}...")
    src, tgt = rng.integers(2, V, (2, 7)), rng.integers(0, V, (2, 5))
    got = []
    for model, adapter in ((d, out), (os.path.join(out, "model.safetensors"), None),
                           (d, None)):
        top2 = os.path.dirname(model.rstrip("/"))
        bf, of = os.path.join(top2, "lb.bin"), os.path.join(top2, "lo.bin")
        with open(bf, "wb") as f:
            np.array([2, 5, 7], np.int32).tofile(f)
            tgt.astype(np.int32).tofile(f)
            src.astype(np.int32).tofile(f)
            np.array([7, 4], np.int32).tofile(f)
        rr = run([PROBE, "model-logits", model, bf, of] + ([adapter] if adapter else []))
        if rr.returncode != 0:
            return bad + [f"io_probe {model} {adapter}: {rr.stderr.strip()}"]
        got.append(np.fromfile(of, np.float32))
    err = np.abs(got[0] - got[1]).max()
    print(f"  LoRA: {len(mods)} modules in HF's names ({tg}); the folder with the adapter "
          f"vs the merged model: max |diff| = {err:.2e}")
    if not err <= TOL:
        bad.append(f"the folder with its LoRA adapter differs from the merged model by {err:.3g}")
    if not np.abs(got[0] - got[2]).max() > 1e-4:
        bad.append("the LoRA adapter does not change the folder's logits")
    return bad


# ---- transformers as the judge of an encoder-decoder folder ----------------
# (hf_t5.py, hf_bart.py: ref is the folder loaded back by transformers'
# from_pretrained in float32; tensors in and out are torch's)

def hf_generate(ref, ids, n, beams=1, **kw):
    """ref.generate's search of the source ids (a list): the new tokens up
    to its end-of-text (without the start token, forced first tokens
    skip_first of them, nor padding), each one's log-probability under the
    model (raw logits, before the logits processors: forced tokens keep
    theirs), and the beam's score.  Without the cache: transformers 5.24
    sizes the decoder's cache by num_layers, so a T5 with more decoder
    blocks fails with it."""
    import torch
    out = ref.generate(input_ids=torch.tensor([ids]), do_sample=False, num_beams=beams,
                       max_new_tokens=n, use_cache=False, output_logits=True,
                       output_scores=beams > 1, return_dict_in_generate=True, **kw)
    eos = ref.generation_config.eos_token_id
    seq = out.sequences[0, 1:].tolist()
    if beams == 1:
        lps = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.logits, seq)]
    else:
        lps = []
    end = seq.index(eos) if eos in seq else len(seq)
    score = float(out.sequences_scores[0]) if beams > 1 else None
    return seq[:end], lps, score


def hf_check_logits(name, d, ref, src, src_len, tgt):
    """io_probe model-logits (tfm's training forward) of a padded batch
    against ref(input_ids, attention_mask, decoder_input_ids).logits."""
    import torch
    r, of = probe_encdec(d, src, src_len, tgt)
    if r.returncode != 0:
        return [f"io_probe: {r.stderr.strip()}"], None
    (B, S), T = src.shape, tgt.shape[1]
    mask = torch.tensor([[1] * k + [0] * (S - k) for k in src_len])
    with torch.no_grad():
        want = ref(input_ids=torch.from_numpy(src), attention_mask=mask,
                   decoder_input_ids=torch.from_numpy(tgt)).logits.numpy()
    got = np.fromfile(of, np.float32).reshape(B, T, -1)
    err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    print(f"  {name}: teacher-forced logits max |tfm - transformers| = {err:.2e} "
          f"(max |logit| {np.abs(want).max():.1f})")
    return ([] if err <= TOL else [f"logits differ by {err:.3g} > {TOL}"]), err


def hf_check_search(name, d, ref, lines, srcs, n, skip=0, beams=4, gen_kw=None):
    """tfm-generate --ids --json on lines (tfm appends the end-of-text
    token) against ref.generate on srcs (the same ids as HF's tokenizer
    ends them): --greedy's tokens and log-probabilities, and --beam's best
    hypothesis and score with length_penalty 1 on both sides and HF's
    early_stopping "never" (tfm stops only when no live hypothesis can
    beat the best finished one: the search HF's "never" makes).  skip:
    forced first tokens (BART's <s>) that tfm keeps out of its output and
    out of -n's count (HF counts them in max_new_tokens: N + skip there)."""
    gen_kw = gen_kw or {}
    eos = ref.generation_config.eos_token_id
    bad = []
    r = run([GEN, "-m", d, "--ids", "--greedy", "--json", "-n", str(n), "-q"],
            input="\n".join(lines) + "\n")
    if r.returncode != 0:
        return [f"tfm-generate --greedy: {r.stderr.strip()}"]
    refs = []
    for ids in srcs:
        seq, lps, _ = hf_generate(ref, ids, n + skip, **gen_kw)
        refs.append((seq[skip:], lps[skip:]))
    bad += compare_greedy(name, [json.loads(x) for x in r.stdout.splitlines()], refs, eos)
    r = run([GEN, "-m", d, "--ids", "--beam", str(beams), "--lenpen", "1", "--json", "-n",
             str(n), "-q"], input="\n".join(lines) + "\n")
    if r.returncode != 0:
        return bad + [f"tfm-generate --beam {beams}: {r.stderr.strip()}"]
    outs = [json.loads(x) for x in r.stdout.splitlines()]
    worst = 0.0
    for o, ids in zip(outs, srcs):
        seq, _, score = hf_generate(ref, ids, n + skip, beams, length_penalty=1.0,
                                    early_stopping="never", **gen_kw)
        got = [t for t in o["ids"] if t != eos]
        if got != seq[skip:]:
            bad.append(f"--beam {beams}: tfm {o['ids']} transformers {seq}")
            continue
        worst = max(worst, abs(o["score"] - score))
    if len(outs) != len(srcs):
        bad.append(f"--beam {beams}: {len(outs)} translations for {len(srcs)} sources")
    print(f"  {name}: --beam {beams} best hypotheses equal on {len(srcs)} sources, "
          f"score max diff {worst:.2e}")
    if worst > TOL:
        bad.append(f"beam scores differ by {worst:.3g}")
    return bad


def hf_check_bad_shards(d, src_ids):
    """The sharded folder d with one shard missing, then cut short: io_probe,
    tfm-generate and tfm-embed -o refuse it with one message naming the
    shard, exit 1, nothing written (the shard is restored after)."""
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    if len(shards) < 2:
        return [f"{d}: {len(shards)} shard"]
    bad = []
    victim = os.path.join(d, shards[len(shards) // 2])
    with open(victim, "rb") as f:
        data = f.read()
    out = os.path.join(os.path.dirname(d.rstrip("/")), "emb.npy")
    line = " ".join(map(str, src_ids)) + "\n"

    def cut():
        with open(victim, "wb") as f:
            f.write(data[:len(data) - 40])

    for what, act, pieces in (("missing shard", lambda: os.remove(victim),
                               [victim, "No such file"]),
                              ("truncated shard", cut, [victim, "data buffer"])):
        act()
        r, _ = probe_encdec(d, np.array([src_ids]), [len(src_ids)], np.zeros((1, 2), np.int64))
        r2 = run([GEN, "-m", d, "--ids", "--greedy", "-n", "2"], input=line)
        r3 = run([EMBED, "-m", d, "-o", out], input="a b\n")
        bad += refusals(what, pieces, (("io_probe", r), ("tfm-generate", r2),
                                       ("tfm-embed", r3)))
        if r2.stdout or os.path.exists(out):
            bad.append(f"{what}: output written: {r2.stdout!r}, {out} exists: "
                       f"{os.path.exists(out)}")
        print(f"  {what}: {r2.stderr.strip()}")
        with open(victim, "wb") as f:
            f.write(data)
    return bad


def hf_check_pair_loss(top, d, ref, tok, pairs, target_skip=0):
    """tfm-train's loss on source/target pairs from the folder d (its first
    step, every dropout 0, no label smoothing: the forward before any
    update) against transformers' loss (model(input_ids, attention_mask,
    labels).loss, the mean over the targets' tokens) on the batch's ids
    (--dump-batches); and each row's ids are a pair's as tok makes them
    (tok(src).input_ids, tok(text_target=tgt).input_ids[target_skip:]:
    BART's labels begin with <s>, which tfm's targets have only with
    forced_bos)."""
    import torch
    path = os.path.join(top, "loss_pairs.tsv")
    with open(path, "w") as f:
        f.write("".join(f"{a}\t{b}\n" for a, b in pairs))
    base = [TRAIN, "-q", "--set", f"train.init={d}", "--set", f"data.text={path}", "--set",
            f"data.tokenizer={d}", "--set", f"train.batch_size={len(pairs)}", "--set",
            "train.eval_interval=0", "--threads", "1"]
    r = run(base + ["-o", os.path.join(top, "dump"), "--dump-batches", str(len(pairs))])
    rows = [json.loads(x) for x in r.stdout.splitlines()] if r.returncode == 0 else []
    if len(rows) != len(pairs):
        return [f"tfm-train --dump-batches: {r.stdout[:300]!r} {r.stderr.strip()[-300:]}"]
    bad = []
    # the batch draws from the pairs (a held-out one aside): each row must
    # be one of them as transformers tokenizes it
    want = [(tok(a).input_ids, tok(text_target=b).input_ids[target_skip:]) for a, b in pairs]
    diff = [x for x in rows if (x["input_ids"], x["target_ids"]) not in want]
    if diff:
        bad.append(f"tfm-train's ids of {len(diff)} of {len(rows)} rows are no pair as "
                   f"transformers tokenizes it: {diff[:2]}, want one of {want}")
    out = os.path.join(top, "loss_run")
    zero = [x for k in ("model.dropout", "model.attn_dropout", "model.emb_dropout",
                        "model.ffn_dropout", "model.final_dropout",
                        "train.label_smoothing") for x in ("--set", f"{k}=0")]
    r = run(base + ["-o", out, "--set", "optim.lr=0", "--set", "train.max_steps=1"] + zero)
    if r.returncode != 0:
        return bad + [f"tfm-train at lr 0: {r.stderr.strip()[-400:]}"]
    with open(os.path.join(out, "log.tsv")) as f:
        log = [ln.rstrip("\n").split("\t") for ln in f]
    loss = float(log[1][log[0].index("train_loss")])
    S = max(len(x["input_ids"]) for x in rows)
    T = max(len(x["target_ids"]) for x in rows)
    pad = lambda v, n, fill: v + [fill] * (n - len(v))
    src = torch.tensor([pad(x["input_ids"], S, 0) for x in rows])
    mask = torch.tensor([pad([1] * len(x["input_ids"]), S, 0) for x in rows])
    labels = torch.tensor([pad(x["target_ids"], T, -100) for x in rows])
    with torch.no_grad():
        want_loss = float(ref(input_ids=src, attention_mask=mask, labels=labels).loss)
    err = abs(loss - want_loss)
    print(f"  tfm-train's loss on {len(pairs)} pairs {loss:.6f}, transformers' {want_loss:.6f} "
          f"(|diff| {err:.2e})")
    if not err <= TOL:
        bad.append(f"the pair loss differs: tfm {loss}, transformers {want_loss}")
    return bad
