#!/usr/bin/python3
"""GPT-2 tokenizer folders as transformers writes them, judged by
transformers' AutoTokenizer and by tiktoken.

Folders:
- a byte-level BPE trained by HF tokenizers on the project's corpus, saved
  by GPT2Tokenizer.save_pretrained (transformers 5: tokenizer.json +
  tokenizer_config.json), and the same with add_prefix_space true;
- the same vocabulary as transformers 4 wrote it (vocab.json + merges.txt
  + tokenizer_config.json + special_tokens_map.json, no tokenizer.json);
- GPT-2's published vocabulary (testdata/gpt2: encoder.json + vocab.bpe)
  read by GPT2Tokenizer and saved by it;
- a model folder with OpenAI's names (encoder.json + vocab.bpe).
For each, tfm-tokenize encode --split-special -t FOLDER gives
AutoTokenizer's ids (tokenizer(text).input_ids, which reads
<|endoftext|> in the text as the token, as tfm's prompts do) on varied lines (the corpus, the golden
strings, random lines over the characters byte-level BPE treats
differently: tests/tok_texts.py) and on multi-line documents (--document),
and so do the programs' prompts: the ids tfm-eval perplexity scores
(--token-logprobs) in a model folder carrying the tokenizer.  tiktoken, an
Encoding built from the folder's ranks with GPT-2's pattern, gives the
same ids for the trained vocabulary and for GPT-2's published one (on the
King James Bible when Debian's bible-kjv is installed, else the corpus).
A tokenizer_config.json whose add_prefix_space contradicts tokenizer.json
(transformers follows the former) is refused, naming the file and key."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import tiktoken
import tokenizers  # noqa: F401  (the skip of tests/run-python)
import torch
import transformers  # noqa: F401
from transformers import AutoTokenizer, GPT2Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_texts as T  # noqa: E402
from hf_lib import EVAL, GEN, SRC, TOKENIZE, refusals, run  # noqa: E402
from hf_gpt2_lib import make_model, probe, train_tokenizer  # noqa: E402

GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_DIR = os.path.join(SRC, "testdata", "gpt2")


def byte_decoder():
    """GPT-2's printable stand-ins back to bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def tiktoken_of(vocab_json, specials):
    """A tiktoken.Encoding of a byte-level BPE vocabulary whose ids are its
    ranks (a merge's token after its parts), GPT-2's pattern."""
    dec = byte_decoder()
    with open(vocab_json, encoding="utf-8") as f:
        vocab = json.load(f)
    ranks = {bytes(dec[c] for c in piece): i for piece, i in vocab.items()
             if piece not in specials}
    return tiktoken.Encoding("folder", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                             special_tokens={s: vocab[s] for s in specials})


def compare(name, folder, hf, texts, docs, enc=None):
    bad = []
    got = T.tfm_encode_lines(folder, texts, "--split-special")
    want = [hf(t).input_ids for t in texts]
    diff = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    for i in diff[:3]:
        bad.append(f"{name}: {texts[i]!r}: tfm {got[i][:20]}, AutoTokenizer {want[i][:20]}")
    ddiff = 0
    for doc in docs:
        g, w = T.tfm_encode_doc(folder, doc, "--split-special"), hf(doc).input_ids
        if g != w:
            ddiff += 1
            if ddiff <= 2:
                bad.append(f"{name}: document {doc!r}: tfm {g[:20]}, AutoTokenizer {w[:20]}")
    tk = ""
    if enc is not None:
        tdiff = [i for i, t in enumerate(texts)
                 if enc.encode(t, allowed_special="all") != want[i]]
        for i in tdiff[:3]:
            bad.append(f"{name}: {texts[i]!r}: tiktoken "
                       f"{enc.encode(texts[i], allowed_special='all')[:20]}, "
                       f"AutoTokenizer {want[i][:20]}")
        tk = f"; tiktoken gives the same on {len(texts) - len(tdiff)}/{len(texts)}"
    print(f"  {name}: tfm-tokenize -t FOLDER = AutoTokenizer on {len(texts) - len(diff)}/"
          f"{len(texts)} lines and {len(docs) - ddiff}/{len(docs)} documents{tk}")
    return bad


def v4_folder(d, raw):
    """The tokenizer as transformers 4 saved it: no tokenizer.json."""
    os.makedirs(d, exist_ok=True)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(raw, f), d)
    eot = "<|endoftext|>"
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False, "add_prefix_space": False, "bos_token": eot,
                   "clean_up_tokenization_spaces": True, "eos_token": eot, "errors": "replace",
                   "model_max_length": 1024, "pad_token": None,
                   "tokenizer_class": "GPT2Tokenizer", "unk_token": eot}, f, indent=2)
    with open(os.path.join(d, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": eot, "eos_token": eot, "unk_token": eot}, f, indent=2)


def check_prompt_ids(top, raw, tok, texts):
    """The model folder's tokenizer in the programs: tfm-eval perplexity
    scores AutoTokenizer's ids of each text (--no-bos: all but the first),
    and tfm-generate --greedy continues them as transformers does."""
    d = os.path.join(top, "model")
    m = make_model(len(tok), 3)
    m.save_pretrained(d)
    tok.save_pretrained(d)
    hf = AutoTokenizer.from_pretrained(d)
    bad = []
    lp = os.path.join(top, "lp.tsv")
    n = 0
    for t in texts:
        want = hf(t).input_ids[:60]
        if len(want) < 2:
            continue
        text = hf.decode(want)
        if hf(text).input_ids != want:
            continue  # a cut that does not encode back to itself
        r = run([EVAL, "perplexity", "-m", d, "--no-bos", "--token-logprobs", lp, "-q", "-"],
                input=text)
        if r.returncode != 0:
            return [f"tfm-eval perplexity: {r.stderr.strip()}"]
        with open(lp) as f:
            got = [int(x.split("\t")[1]) for x in f.read().splitlines()
                   if x and not x.startswith("index")]
        n += 1
        if got != want[1:]:
            bad.append(f"tfm-eval perplexity of {text!r} scored {got[:12]}, AutoTokenizer's "
                       f"ids {want[1:13]}")
            if len(bad) > 3:
                break
    print(f"  model folder: tfm-eval perplexity scores AutoTokenizer's ids on {n - len(bad)}/{n}"
          " texts")
    # tfm-generate continues AutoTokenizer's prompt ids
    prompts = [t for t in texts[:40] if t.strip() and "\t" not in t][:6]
    r = run([GEN, "-m", d, "--greedy", "--json", "-n", "4", "--ignore-eos", "-q"],
            input="\n".join(prompts) + "\n")
    if r.returncode != 0:
        return bad + [f"tfm-generate: {r.stderr.strip()}"]
    outs = [json.loads(x) for x in r.stdout.splitlines()]
    m.generation_config.eos_token_id = None
    for p, o in zip(prompts, outs):
        ids = hf(p).input_ids
        with torch.no_grad():
            g = m.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=4,
                           pad_token_id=0)[0, len(ids):].tolist()
        if o["ids"] != g:
            bad.append(f"tfm-generate from {p!r}: {o['ids']}, transformers {g}")
    print(f"  model folder: tfm-generate --greedy continues {len(prompts)} prompts as "
          "transformers' generate on AutoTokenizer's ids")
    # OpenAI's names beside the model: encoder.json + vocab.bpe
    ob = os.path.join(top, "openai-names")
    m.save_pretrained(ob)
    shutil.copy(os.path.join(raw, "vocab.json"), os.path.join(ob, "encoder.json"))
    shutil.copy(os.path.join(raw, "merges.txt"), os.path.join(ob, "vocab.bpe"))
    r, _ = probe(ob, [[5, 6]], top)
    if r.returncode != 0 or f"tokenizer other {len(tok)}" not in r.stdout:
        bad.append(f"encoder.json + vocab.bpe: exit {r.returncode}: {r.stdout.strip()!r} "
                   f"{r.stderr.strip()!r}")
    lp2 = os.path.join(top, "lp2.tsv")
    text = prompts[0]
    r = run([EVAL, "perplexity", "-m", ob, "--no-bos", "--token-logprobs", lp2, "-q", "-"],
            input=text)
    if r.returncode != 0:
        bad.append(f"tfm-eval with encoder.json + vocab.bpe: {r.stderr.strip()}")
    else:
        with open(lp2) as f:
            got = [int(x.split("\t")[1]) for x in f.read().splitlines()
                   if x and not x.startswith("index")]
        if got != hf(text).input_ids[1:]:
            bad.append(f"encoder.json + vocab.bpe: {text!r} scored {got}, AutoTokenizer "
                       f"{hf(text).input_ids[1:]}")
    print("  a model folder with encoder.json + vocab.bpe: the same tokenizer")
    return bad


def check_contradiction(top, tok, v5):
    """tokenizer_config.json's add_prefix_space against tokenizer.json's
    ByteLevel pre-tokenizer: transformers follows tokenizer_config.json, so
    a folder where they differ is refused (tfm-tokenize -t FOLDER, and the
    model folder in tfm-generate), naming the file and the key."""
    bad = []
    for flip in (True, False):
        d = os.path.join(top, f"contradiction-{flip}")
        shutil.rmtree(d, ignore_errors=True)
        if flip:
            shutil.copytree(v5, d)
        else:
            GPT2Tokenizer.from_pretrained(os.path.join(top, "tok-raw"),
                                          add_prefix_space=True).save_pretrained(d)
        cfg = os.path.join(d, "tokenizer_config.json")
        with open(cfg) as f:
            c = json.load(f)
        c["add_prefix_space"] = flip
        with open(cfg, "w") as f:
            json.dump(c, f, indent=2)
        hf = AutoTokenizer.from_pretrained(d)
        plain = AutoTokenizer.from_pretrained(v5)
        if (hf("Hello world").input_ids == plain("Hello world").input_ids) != (not flip):
            bad.append(f"transformers does not follow tokenizer_config.json's "
                       f"add_prefix_space {flip} (the premise of the refusal)")
        with open(cfg) as f:
            ln = f.read().split('"add_prefix_space"')[0].count("\n") + 1
        want = [f"{cfg}:{ln}:", f"add_prefix_space {str(flip).lower()} contradicts "
                "tokenizer.json"]
        make_model(len(tok), 4).save_pretrained(d)
        res = [("tfm-tokenize", run([TOKENIZE, "encode", "-t", d], input="Hello world\n")),
               ("tfm-generate", run([GEN, "-m", d, "--greedy", "-n", "2"], input="Hello\n"))]
        bad += refusals(f"add_prefix_space {flip} over tokenizer.json's {not flip}", want, res)
    print("  tokenizer_config.json's add_prefix_space contradicting tokenizer.json: refused "
          "(transformers would follow tokenizer_config.json)")
    return bad


def main():
    if not os.path.exists(TOKENIZE):
        print(f"missing {TOKENIZE}")
        return 1
    torch.set_num_threads(1)
    top = tempfile.mkdtemp(prefix="hf_gpt2_tok.")
    bad = []
    small = T.SANITIZED
    texts = T.lines(n_random=60 if small else 200, stride=4 if small else 1)
    docs = T.documents(n=6 if small else 16)
    try:
        raw, tok = train_tokenizer(top)
        enc = tiktoken_of(os.path.join(raw, "vocab.json"), ["<|endoftext|>"])
        v5 = os.path.join(top, "v5")
        tok.save_pretrained(v5)
        names = sorted(os.listdir(v5))
        if "tokenizer.json" not in names:
            bad.append(f"GPT2Tokenizer.save_pretrained wrote {names}")
        bad += compare(f"trained BPE, save_pretrained ({' + '.join(names)})", v5,
                       AutoTokenizer.from_pretrained(v5), texts, docs, enc)
        aps = os.path.join(top, "v5-prefix")
        GPT2Tokenizer.from_pretrained(raw, add_prefix_space=True).save_pretrained(aps)
        bad += compare("the same with add_prefix_space true", aps,
                       AutoTokenizer.from_pretrained(aps), texts[:200], docs[:6])
        bad += check_contradiction(top, tok, v5)
        v4 = os.path.join(top, "v4")
        v4_folder(v4, raw)
        bad += compare("transformers 4's layout (vocab.json + merges.txt + "
                       "tokenizer_config.json + special_tokens_map.json)", v4,
                       AutoTokenizer.from_pretrained(v4), texts, docs)
        # GPT-2's published vocabulary, read and saved by transformers
        pub = os.path.join(top, "gpt2-raw")
        os.makedirs(pub)
        shutil.copy(os.path.join(GPT2_DIR, "encoder.json"), os.path.join(pub, "vocab.json"))
        shutil.copy(os.path.join(GPT2_DIR, "vocab.bpe"), os.path.join(pub, "merges.txt"))
        gsave = os.path.join(top, "gpt2")
        GPT2Tokenizer.from_pretrained(pub).save_pretrained(gsave)
        genc = tiktoken_of(os.path.join(pub, "vocab.json"), ["<|endoftext|>"])
        verses = T.kjv(100 if small else 400) or T.corpus_lines()
        bad += compare("GPT-2's published vocabulary, save_pretrained", gsave,
                       AutoTokenizer.from_pretrained(gsave), texts + verses, docs, genc)
        # one program run a text: a sample of them
        bad += check_prompt_ids(top, raw, tok, texts[::25] + docs[:4])
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
