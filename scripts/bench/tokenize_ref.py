#!/usr/bin/python3
"""The Python references of scripts/bench/tokenize: HF tokenizers, tiktoken
and sentencepiece as pip installs them (the references' python:
scripts/references --path), timed on the same corpus as tfm and as
tokenize_ref.js (their npm builds).

  tokenize_ref.py tiktoken-gpt2 ENCODER_JSON VOCAB_BPE CORPUS THREADS
  tokenize_ref.py hf-gpt2 ENCODER_JSON VOCAB_BPE CORPUS
  tokenize_ref.py hf-bert VOCAB_TXT CORPUS
  tokenize_ref.py spm MODEL CORPUS [IDS_OUT]

GPT-2 and BERT: the corpus as one document (no special tokens), in pieces
of about 1 MB cut where tfm and tokenize_ref.js cut (after an ASCII graphic
character, before ASCII whitespace: no pre-token joins across a cut), so
the token counts must equal tfm's.  tiktoken: the "gpt2" encoding built
from the local files (their sha256 checked against tiktoken's own for
OpenAI's), encode_ordinary per piece on 1 thread, encode_ordinary_batch
with num_threads = THREADS otherwise.  HF tokenizers: BPE.from_file with
ByteLevel(add_prefix_space=False) / WordPiece with BERT's uncased
normalizer and pre-tokenizer, encode_batch of 4 pieces at a time
(threads: RAYON_NUM_THREADS, as the npm build).  sentencepiece: one line
at a time as spm_encode reads them, encode(lines) as ids on one thread
(num_threads=1); IDS_OUT gets one line of ids per input line, as
spm_encode --output_format=id writes them.
Prints "seconds S" (the encode calls only: loading and reading are not
counted) and "tokens N"."""
import sys
import time


def pieces(path):
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    out, start = [], 0
    graphic = lambda c: 0x20 < ord(c) < 0x7f
    space = lambda c: c == " " or "\t" <= c <= "\r"
    while start < len(text):
        end = min(start + (1 << 20), len(text))
        if end < len(text):
            p = end
            while p > start + 1 and not (graphic(text[p - 1]) and space(text[p])):
                p -= 1
            if p > start + 1:
                end = p
        out.append(text[start:end])
        start = end
    return out


def report(t0, tokens):
    print("seconds %.4f" % (time.perf_counter() - t0))
    print("tokens %d" % tokens)


def tiktoken_gpt2(encoder_json, vocab_bpe, corpus, threads):
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext import openai_public
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe, encoder_json,
        vocab_bpe_hash="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
        encoder_json_hash="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783")
    enc = tiktoken.Encoding("gpt2", pat_str=openai_public.r50k_pat_str, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    ps = pieces(corpus)
    t0 = time.perf_counter()
    if threads == 1:
        n = sum(len(enc.encode_ordinary(p)) for p in ps)
    else:
        n = sum(len(x) for x in enc.encode_ordinary_batch(ps, num_threads=threads))
    report(t0, n)


def hf_encode(tok, ps):
    n = 0
    t0 = time.perf_counter()
    for i in range(0, len(ps), 4):  # as tokenize_ref.js: enough to keep the threads busy
        n += sum(len(e.ids) for e in tok.encode_batch(ps[i:i + 4], add_special_tokens=False))
    report(t0, n)


def hf_gpt2(encoder_json, vocab_bpe, corpus):
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.BPE.from_file(encoder_json, vocab_bpe))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf_encode(tok, pieces(corpus))


def hf_bert(vocab, corpus):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    tok = Tokenizer(models.WordPiece.from_file(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    hf_encode(tok, pieces(corpus))


def spm(model, corpus, out=None):
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().splitlines()
    t0 = time.perf_counter()
    ids = sp.encode(lines, out_type=int, num_threads=1)
    report(t0, sum(len(x) for x in ids))
    if out:
        with open(out, "w") as f:
            f.write("".join(" ".join(map(str, x)) + "\n" for x in ids))


def main():
    a = sys.argv[1:]
    if a[:1] == ["tiktoken-gpt2"] and len(a) == 5:
        tiktoken_gpt2(a[1], a[2], a[3], int(a[4]))
    elif a[:1] == ["hf-gpt2"] and len(a) == 4:
        hf_gpt2(a[1], a[2], a[3])
    elif a[:1] == ["hf-bert"] and len(a) == 3:
        hf_bert(a[1], a[2])
    elif a[:1] == ["spm"] and len(a) in (3, 4):
        spm(*a[1:])
    else:
        sys.exit("usage: tokenize_ref.py tiktoken-gpt2 ENCODER_JSON VOCAB_BPE CORPUS THREADS | "
                 "hf-gpt2 ENCODER_JSON VOCAB_BPE CORPUS | hf-bert VOCAB_TXT CORPUS | "
                 "spm MODEL CORPUS [IDS_OUT]")


if __name__ == "__main__":
    main()
