#!/bin/sh
# Bad SentencePiece input: a truncated or corrupted .model (bad varints,
# lengths past the end, a charsmap trie that points outside itself) and a
# Unigram or sentencepiece-BPE tokenizer.json with duplicate pieces or ids,
# non-finite scores or merges outside the vocabulary fail
# with exit 1 and one message naming the file.  The files are made here
# byte by byte, so no spm_train is needed.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e

bad() { # file, expected message part
    echo hi > in.txt
    expect_exit 1 $T encode -t "$1" in.txt
    [ "$(wc -l < err)" -eq 1 ] || { cat err >&2; fail "$1: not one line of message"; }
    grep -q "^tfm-tokenize: .*$1" err || { cat err >&2; fail "$1: the message does not name the file"; }
    grep -q -- "$2" err || { cat err >&2; fail "$1: expected '$2'"; }
    [ -s out ] && fail "$1: output written"
    return 0
}

# A valid model: <unk>, ▁, a, ▁a (ModelProto with four pieces).
{
    printf '\012\016\012\005<unk>\025\000\000\000\000\030\002'
    printf '\012\014\012\003\342\226\201\025\000\000\200\277\030\001'
    printf '\012\012\012\001a\025\000\000\000\300\030\001'
    printf '\012\015\012\004\342\226\201a\025\000\000\200\276\030\001'
} > ok.model
echo 'a aa' | $T encode -q -t ok.model > ids || fail "the hand-made model does not load: $(cat ids)"
[ "$(cat ids)" = "3 3 2" ] || fail "hand-made model: ids '$(cat ids)', expected '3 3 2'"

head -c 20 ok.model > truncated.model
bad truncated.model "length past the end"
printf '\012\377\377\377\377\377\377\377\377\377\377\001' > varint.model
bad varint.model "varint longer than 10 bytes"
printf '\012\377\377' > varint2.model
bad varint2.model "truncated varint"
printf '\012\120abc' > length.model
bad length.model "length past the end"
printf '\013\000' > wiretype.model
bad wiretype.model "wire type"
: > empty.model
bad empty.model "no pieces"
# a charsmap whose root points past its one unit
{ cat ok.model; printf '\032\012\022\010\004\000\000\000\000\374\377\377'; } > trie.model
bad trie.model "points outside itself"
# a charsmap whose trie size is larger than the blob
{ cat ok.model; printf '\032\012\022\010\100\000\000\000\000\000\000\000'; } > size.model
bad size.model "charsmap is malformed"
# a piece twice
{ cat ok.model; printf '\012\012\012\001a\025\000\000\000\300\030\001'; } > dup.model
bad dup.model "appears twice"
# a word model
{ cat ok.model; printf '\022\002\030\003'; } > word.model
bad word.model "only unigram and bpe"

uni_json() { # vocab entries
    printf '{"normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "\342\226\201", "prepend_scheme": "always"}, "model": {"type": "Unigram", "unk_id": 0, "vocab": [%s]}}\n' "$1"
}
uni_json '["<unk>", 0], ["▁", -1], ["a", -2], ["▁a", -0.25]' > ok.json
echo 'a aa' | $T encode -q -t ok.json > ids
[ "$(cat ids)" = "3 3 2" ] || fail "hand-made tokenizer.json: ids '$(cat ids)'"
uni_json '["<unk>", 0], ["a", -1], ["a", -2]' > dup.json
bad dup.json "appears twice"
uni_json '["<unk>", 0], ["a", 1e999]' > inf.json
bad inf.json "not a finite number"
uni_json '["<unk>", 0], ["a", "x"]' > str.json
bad str.json "piece, score"
uni_json '["<unk>", 0], ["a", -1]' | sed 's/"unk_id": 0/"unk_id": 7/' > unk.json
bad unk.json "unk_id 7"
# sentencepiece's BPE as tokenizer.json (a BPE model under Metaspace)
bpe_json() { # vocab, merges
    printf '{"normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "\342\226\201", "prepend_scheme": "always"}, "model": {"type": "BPE", "unk_token": "<unk>", "vocab": {%s}, "merges": [%s]}}\n' "$1" "$2"
}
bpe_json '"<unk>": 0, "▁": 1, "a": 2, "▁a": 3' '["▁", "a"]' > okbpe.json
echo 'a aa' | $T encode -q -t okbpe.json > ids
[ "$(cat ids)" = "3 3 2" ] || fail "hand-made BPE tokenizer.json: ids '$(cat ids)'"
bpe_json '"<unk>": 0, "▁": 1, "a": 1' '' > dupid.json
bad dupid.json "vocab id 1 is given twice"
bpe_json '"<unk>": 0, "▁": 1, "a": 2' '"a a"' > merge.json
bad merge.json "not in the vocab"
bpe_json '"<u>": 0, "a": 1' '' > nounk.json
bad nounk.json "unk_token is not in the vocab"
echo "bad .model and Unigram/BPE tokenizer.json files fail with a message naming them"
