#!/usr/bin/python3
"""The Llama family's tokenizers as transformers writes them, judged by
transformers' AutoTokenizer (and by tokenizers, for the file itself).

No hub is reachable, so small ones are made as transformers makes the
real ones:
- Llama 3: a byte-level BPE trained by tokenizers under Llama 3's
  pre-tokenizer (Split with its regex, then ByteLevel without one),
  ignore_merges, <|begin_of_text|> put first by a TemplateProcessing,
  saved by PreTrainedTokenizerFast (the class Llama 3's folders name);
- Qwen2: the same under Qwen2's regex (single digits) and an NFC
  normalizer, saved by Qwen2Tokenizer from that vocab and merges;
- Llama 2: a sentencepiece BPE (byte fallback, digits split, spaces kept)
  that LlamaTokenizer converts (add_bos_token) and saves: tokenizer.json
  only, BPE under Metaspace; and the same file in the older converters'
  form (Prepend and Replace normalizers, no pre-tokenizer), which
  transformers 5 reads as LlamaTokenizer's Metaspace and tokenizers as the
  file says.
tfm-tokenize -t FOLDER gives AutoTokenizer's ids (specials split out, as
transformers does) on tests/tok_texts.py's lines and documents and on
digit runs, contractions, CJK, emoji, newlines and runs of spaces, and
tfm-tokenize decode gives its decode; -t tokenizer.json gives tokenizers'
ids.  A tokenizer.json whose Split regex is another, and a
tokenizer_config.json naming LlamaTokenizer over a byte-level BPE, are
refused with one line naming the file.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sentencepiece as spm  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402
from tokenizers import trainers  # noqa: E402
import transformers  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_texts as T  # noqa: E402

hf_logging.set_verbosity_error()
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
EXTRA = ["don't DON'T 'S 'Ll we'VE x'ſ", "12345678 1234 3.14159 ٣٤٥٦٧ ２０２６",
         "  two  spaces   three", "\t\tfoo  \t bar", "日本語のテキスト、中文。한국어",
         "😀👍🏽👨\u200d👩\u200d👧 🇩🇪 emoji", "e\u0301 cafe\u0301 A\u030a Å", "   ",
         "<|begin_of_text|>Hi<|eot_id|>", "<|im_start|>user\nhi<|im_end|>", "<s> x</s>",
         "?!... ;-) (x)", "http://x.org/a?b=c#d"]
DOCS_EXTRA = ["a\n\nb\r\n\r\nc", "x \n y\n", "!!!\n\n?.\r\n", "  \n  \n", "\n",
              "line one\n    indented\n\ttab\n"]


def training_text():
    # the corpus also as one document: its lines end in punctuation and a
    # newline, which Llama 3's regex keeps together (".\n" tokens)
    return T.corpus_lines() + T.lines(seed=5, n_random=400)[-400:] + \
        T.documents(seed=3, n=30) + ["\n".join(T.corpus_lines()) + "\n"] * 4


def bytelevel(regex, nfc, specials, vocab_size=1500):
    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=regex == LLAMA3))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), tr)
    return tok


def llama3_tokenizer(d, vocab_size=1500):
    sp = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tok = bytelevel(LLAMA3, False, sp, vocab_size)
    bos = sp[0]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1",
        special_tokens=[(bos, tok.token_to_id(bos))])
    f = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos,
                                             eos_token=sp[1])
    f.save_pretrained(d)
    return f


def qwen2_tokenizer(d, vocab_size=1500):
    tok = bytelevel(QWEN2, True, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], vocab_size)
    m = json.loads(tok.to_str())["model"]
    f = transformers.Qwen2Tokenizer(vocab=m["vocab"], merges=[tuple(x) for x in m["merges"]])
    f.save_pretrained(d)
    return f


def llama2_tokenizer(d, top, vocab_size=3000):
    src = os.path.join(top, "spm")
    os.makedirs(src, exist_ok=True)
    train = os.path.join(src, "train.txt")
    with open(train, "w", encoding="utf-8") as fh:
        fh.write("\n".join(training_text()) + "\n")
    spm.SentencePieceTrainer.train(
        input=train, model_prefix=os.path.join(src, "tokenizer"), model_type="bpe",
        vocab_size=vocab_size, byte_fallback=True, character_coverage=0.99, split_digits=True,
        allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", num_threads=1, bos_id=1, eos_id=2, unk_id=0,
        pad_id=-1, minloglevel=2, hard_vocab_limit=False)
    f = transformers.LlamaTokenizer.from_pretrained(src, add_bos_token=True)
    f.save_pretrained(d)
    return f


def llama2_old_form(d, old):
    """Llama 2's tokenizer.json as the older LlamaConverter wrote it."""
    shutil.copytree(d, old)
    p = os.path.join(old, "tokenizer.json")
    j = json.load(open(p, encoding="utf-8"))
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    j["pre_tokenizer"] = None
    json.dump(j, open(p, "w", encoding="utf-8"), ensure_ascii=False, indent=1)


def first_diff(name, what, texts, want, got, bad):
    diff = [i for i in range(len(texts)) if want[i] != got[i]]
    print(f"  {name}: {what}: {len(texts) - len(diff)} of {len(texts)} agree")
    if diff:
        i = diff[0]
        bad.append(f"{name}: {what}: {len(diff)} differ, first {texts[i]!r}: "
                   f"HF {want[i]} tfm {got[i]}")


def check(name, tok, hf, bad, texts, docs):
    """tfm-tokenize -t tok against hf (a callable text -> ids), both ways."""
    want = [hf(t) for t in texts]
    got = T.tfm_encode_lines(tok, texts, "--split-special")
    first_diff(name, "encode", texts, want, got, bad)
    want_d = [hf(t) for t in docs]
    got_d = [T.tfm_encode_doc(tok, t, "--split-special") for t in docs]
    first_diff(name, "encode --document", docs, want_d, got_d, bad)
    return want, want_d


def check_decode(name, folder, f, want, texts, bad):
    hf_text = [f.decode(ids) for ids in want]
    got = T.tfm_decode(folder, want)
    # the unknown piece: transformers writes its name, tfm sentencepiece's
    # " \u2047 " (as tests/tokenizers_hf.py excuses it)
    unk = f.unk_token_id if name.startswith("llama2") else None
    keep = [i for i in range(len(texts)) if unk is None or unk not in want[i]]
    if len(keep) < len(texts):
        print(f"  {name}: decode: {len(texts) - len(keep)} texts with the unknown piece left out")
    first_diff(name, "decode", [texts[i] for i in keep], [hf_text[i] for i in keep],
               [got[i] for i in keep], bad)
    # and the texts themselves where transformers gives them back
    back = [i for i, t in enumerate(texts) if hf_text[i] == t]
    print(f"  {name}: decode(encode(x)) == x for {len(back)} of {len(texts)} (transformers)")


def refused(what, cmd, words, bad):
    r = subprocess.run(cmd, capture_output=True, text=True)
    msg = r.stderr.strip()
    if r.returncode != 1 or len(msg.splitlines()) != 1 or not all(w in msg for w in words):
        bad.append(f"{what}: exit {r.returncode}, {msg!r}, want {words}")
    else:
        print(f"  refused ({what}): {msg}")


def main():
    bad = []
    lines = [t for t in T.lines(seed=1, n_random=150 if T.SANITIZED else 300, stride=2)
             if "\r" not in t] + [t for t in EXTRA if "\n" not in t]
    docs = T.documents(seed=4, n=10 if T.SANITIZED else 30) + DOCS_EXTRA + EXTRA
    long_doc = ("".join(d + "\n" for d in T.documents(seed=9, n=300)) +
                "\n".join(T.corpus_lines()) + "\nend!\n\n?.\r\n") * 2 + \
        "Amen.\n" * 12000  # where the only whitespace follows punctuation
    with tempfile.TemporaryDirectory() as top:
        made = {}
        for name, mk in (("llama3", llama3_tokenizer), ("qwen2", qwen2_tokenizer)):
            d = os.path.join(top, name)
            mk(d)
            made[name] = d
        d = os.path.join(top, "llama2")
        llama2_tokenizer(d, top)
        made["llama2"] = d
        made["llama2-old"] = os.path.join(top, "llama2-old")
        llama2_old_form(d, made["llama2-old"])
        for name, d in made.items():
            f = transformers.AutoTokenizer.from_pretrained(d)
            want, _ = check(name, d, lambda t: f(t, add_special_tokens=False).input_ids, bad,
                            lines, docs)
            check_decode(name, d, f, want, lines, bad)
            # the file alone, as tokenizers reads it
            tk = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            check(name + " (tokenizers)", os.path.join(d, "tokenizer.json"),
                  lambda t: tk.encode(t, add_special_tokens=False).ids, bad, lines, docs[:10])
            # a long document, cut into pieces on 2 threads: the cuts never
            # fall inside a pre-token ("end.\n" is one in Llama 3's)
            want = f(long_doc, add_special_tokens=False).input_ids
            got = T.tfm_encode_doc(d, long_doc, "--split-special", "--threads", "2")
            print(f"  {name}: a document of {len(long_doc.encode())} bytes: "
                  f"{'the same ids' if got == want else 'other ids'}")
            if got != want:
                k = next(i for i in range(len(want)) if i >= len(got) or got[i] != want[i])
                bad.append(f"{name}: a long document differs at token {k}: HF "
                           f"{want[k - 2:k + 3]} tfm {got[k - 2:k + 3]}")
            # the template's first token: transformers' add_special_tokens,
            # tfm's --add-special (Qwen2's template adds nothing, tfm's
            # --add-special its end-of-text as for GPT-2)
            if name != "qwen2":
                few = lines[:60]
                first_diff(name, "encode --add-special", few, [f(t).input_ids for t in few],
                           T.tfm_encode_lines(d, few, "--split-special", "--add-special"), bad)
            # tfm-tokenize convert's tokenizer.json: tokenizers gives the ids
            out = os.path.join(top, name + "-tfm.json")
            T.tfm("convert", "-t", d, "-o", out)
            tc = tokenizers.Tokenizer.from_file(out)
            first_diff(name, "tokenizers on convert's tokenizer.json", lines,
                       [f(t, add_special_tokens=False).input_ids for t in lines],
                       [e.ids for e in tc.encode_batch(lines, add_special_tokens=False)], bad)
            few = lines[:60]
            first_diff(name, "tokenizers on convert's tokenizer.json, add_special_tokens", few,
                       [f(t).input_ids for t in few], [e.ids for e in tc.encode_batch(few)], bad)
        # another regex: refused naming the file and the pattern
        e = os.path.join(top, "regex")
        shutil.copytree(made["llama3"], e)
        p = os.path.join(e, "tokenizer.json")
        j = json.load(open(p, encoding="utf-8"))
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+|."
        json.dump(j, open(p, "w", encoding="utf-8"))
        refused("another regex", [T.TOKENIZE, "encode", "-t", e], ["tokenizer.json",
                                                                    r"\p{L}+|\s+|."], bad)
        # transformers' LlamaTokenizer over a byte-level BPE: other ids than
        # the file's
        e = os.path.join(top, "class")
        shutil.copytree(made["llama3"], e)
        p = os.path.join(e, "tokenizer_config.json")
        c = json.load(open(p))
        c["tokenizer_class"] = "LlamaTokenizer"
        json.dump(c, open(p, "w"))
        refused("LlamaTokenizer over byte-level BPE", [T.TOKENIZE, "encode", "-t", e],
                ["tokenizer_config.json", "LlamaTokenizer", "tokenizer.json"], bad)
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
