#!/bin/sh
# Output formats and special tokens: BERT pairs with type ids, per-line npy
# separators, pieces escaping, vocab TSV, vocab.txt as -t.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
make_corpus corpus.txt

if bert=$(bert_vocab); then
    # [CLS]=101 [SEP]=102; "hello world" = 7592 2088, "how are you" = 2129 2024 2017
    printf 'Hello world\tHow are you\n' | $T encode -q -t "$bert" --add-special --format jsonl >pair.jsonl
    want='{"ids":[101,7592,2088,102,2129,2024,2017,102],"type_ids":[0,0,0,0,1,1,1,1]}'
    [ "$(cat pair.jsonl)" = "$want" ] || fail "BERT pair: $(cat pair.jsonl)"
    printf 'Hello world\n' | $T encode -q -t "$bert" --add-special >one.ids
    [ "$(cat one.ids)" = "101 7592 2088 102" ] || fail "BERT single: $(cat one.ids)"
    # without --add-special a tab is whitespace
    printf 'Hello world\tHow are you\n' | $T encode -q -t "$bert" >plain.ids
    [ "$(cat plain.ids)" = "7592 2088 2129 2024 2017" ] || fail "BERT plain: $(cat plain.ids)"
    # document mode: [CLS] at the start, [SEP] at the end only
    printf 'Hello world\nHow are you\n' | $T encode -q -t "$bert" --document --add-special >doc.ids
    [ "$(cat doc.ids)" = "101 7592 2088 2129 2024 2017 102" ] || fail "BERT document: $(cat doc.ids)"
    # [MASK] is text unless --split-special
    printf 'a [MASK] b\n' | $T encode -q -t "$bert" --split-special >m.ids
    [ "$(cat m.ids)" = "1037 103 1038" ] || fail "BERT split-special: $(cat m.ids)"
    # per-line npy: each line followed by [SEP] (the eos), decoded back
    printf 'Hello world\nHow are you\n' | $T encode -q -t "$bert" --format npy >l.npy
    $T decode -t "$bert" l.npy >l.txt
    [ "$(cat l.txt)" = "hello world [SEP] how are you [SEP]" ] || fail "BERT per-line npy: $(cat l.txt)"
    $T decode -t "$bert" --skip-special l.npy >l.txt
    [ "$(cat l.txt)" = "hello world how are you" ] || fail "BERT --skip-special: $(cat l.txt)"
    $T vocab -t "$bert" | sed -n '102,103p' >v.tsv
    printf '101\t[CLS]\t-\n102\t[SEP]\t-\n' | cmp - v.tsv || fail "BERT vocab TSV"
else
    echo "note: BERT vocab.txt not in testdata/, BERT cases skipped" >&2
fi

# a trained BPE: per-line npy = each line's ids then <|endoftext|>
$T train -q --model bpe --vocab-size 400 -o bpe.json corpus.txt
eot=$($T vocab -t bpe.json | awk -F '\t' '$2 == "<|endoftext|>" { print $1 }')
[ -n "$eot" ] || fail "trained BPE has no <|endoftext|>"
printf 'one\ntwo\n' >two.txt
$T encode -q -t bpe.json two.txt >two.ids
$T encode -q -t bpe.json --format npy -o two.npy two.txt
$T decode -t bpe.json two.npy >two.back
[ "$(cat two.back)" = "one<|endoftext|>two<|endoftext|>" ] || fail "per-line npy: $(cat two.back)"
$T decode -t bpe.json --skip-special two.npy >two.back
[ "$(cat two.back)" = "onetwo" ] || fail "per-line npy skip-special: $(cat two.back)"
# --add-special appends it per line
$T encode -q -t bpe.json --add-special two.txt >two.sp
awk -v e="$eot" '$NF != e { exit 1 }' two.sp || fail "--add-special: no <|endoftext|> at the ends"
# jsonl: one object per line, ids equal the ids format
$T encode -q -t bpe.json --format jsonl corpus.txt >c.jsonl
$T encode -q -t bpe.json corpus.txt >c.ids
sed 's/^{"ids":\[//; s/\]}$//; s/,/ /g' c.jsonl | cmp - c.ids || fail "jsonl ids differ from ids"
# pieces: one line per input line, nothing unescaped that could break a line
$T encode -q -t bpe.json --format pieces corpus.txt >c.pieces
[ "$(wc -l <c.pieces)" -eq "$(wc -l <corpus.txt)" ] || fail "pieces line count"
printf 'back\\slash\n' >>corpus.txt
$T train -q --model char -o char.json corpus.txt
printf 'a b\\c\n' | $T encode -q -t char.json --format pieces >p.txt
[ "$(cat p.txt)" = 'a \x20 b \\ c' ] || fail "char pieces escaping: $(cat p.txt)"
# per line, the end of a file ends its line; --document joins files like cat
printf 'one' >a.txt; printf 'two\n' >b.txt
$T encode -q -t bpe.json a.txt b.txt >ab.ids
[ "$(wc -l <ab.ids)" -eq 2 ] || fail "files ran into each other per line"
$T decode -t bpe.json ab.ids >ab.txt
[ "$(cat ab.txt)" = "$(printf 'one\ntwo')" ] || fail "per-line files: $(cat ab.txt)"
$T encode -q -t bpe.json --document a.txt b.txt | $T decode -t bpe.json >ab.txt
[ "$(cat ab.txt)" = "onetwo" ] || fail "--document does not join files like cat: $(cat ab.txt)"
# empty input, empty lines
: | $T encode -q -t bpe.json >e.ids
[ ! -s e.ids ] || fail "empty input gave output"
printf '\n\n' | $T encode -q -t bpe.json >e.ids
[ "$(wc -l <e.ids)" -eq 2 ] && [ "$(tr -d '\n' <e.ids)" = "" ] || fail "empty lines"
: | $T encode -q -t bpe.json --document --format npy -o e.npy
$T decode -t bpe.json e.npy >e.txt
[ ! -s e.txt ] || fail "empty npy decodes to text"
exit 0
