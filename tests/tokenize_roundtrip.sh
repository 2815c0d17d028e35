#!/bin/sh
# train -> encode -> decode gives back the input byte for byte (byte-level
# BPE and char), per line, per document and through .npy; the written
# tokenizer.json loads back; sampling reports what it used.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
make_corpus corpus.txt

for model in bpe char; do
    $T train -q --model $model --vocab-size 600 -o tok-$model.json corpus.txt
    grep -q '"model"' tok-$model.json || fail "$model: no model in tokenizer.json"
    # per line: one output line per input line, exact text back
    $T encode -q -t tok-$model.json corpus.txt >ids.txt
    [ "$(wc -l <ids.txt)" -eq "$(wc -l <corpus.txt)" ] || fail "$model: line count"
    $T decode -t tok-$model.json ids.txt >back.txt
    cmp corpus.txt back.txt || fail "$model: per-line round trip"
    # the whole file as one document, through .npy
    $T encode -q -t tok-$model.json --document --format npy -o doc.npy corpus.txt
    $T decode -t tok-$model.json doc.npy >back.txt
    cmp corpus.txt back.txt || fail "$model: document .npy round trip"
    $T decode -t tok-$model.json <doc.npy >back.txt
    cmp corpus.txt back.txt || fail "$model: .npy from stdin"
    # document ids from stdin equal document ids from the file
    $T encode -q -t tok-$model.json --document <corpus.txt >doc1.txt
    $T encode -q -t tok-$model.json --document corpus.txt >doc2.txt
    cmp doc1.txt doc2.txt || fail "$model: stdin vs file"
    [ "$(wc -l <doc1.txt)" -eq 1 ] || fail "$model: --document ids are not one line"
    $T decode -t tok-$model.json doc1.txt >back.txt
    printf '\n' >>corpus.txt   # decode ends each input line with a newline
    cmp corpus.txt back.txt || fail "$model: document ids round trip"
    make_corpus corpus.txt
done

# the BPE tokenizer actually compresses: fewer tokens than bytes
ntok=$(tr ' ' '\n' <doc1.txt | grep -c .)
$T encode -q -t tok-bpe.json --document corpus.txt | tr ' ' '\n' | grep -c . >n.txt
[ "$(cat n.txt)" -lt "$(wc -c <corpus.txt)" ] || fail "bpe does not compress"
[ "$ntok" -gt 0 ] || fail "char: no tokens"

# vocab size honoured, merge ranks printed for merges
$T vocab -t tok-bpe.json >vocab.tsv
[ "$(wc -l <vocab.tsv)" -eq 600 ] || fail "bpe vocab has $(wc -l <vocab.tsv) entries, asked 600"
awk -F '\t' 'NF != 3 { exit 1 }' vocab.tsv || fail "vocab TSV is not 3 columns"
awk -F '\t' '$3 == "0" { found = 1 } END { exit !found }' vocab.tsv || fail "no merge rank 0"

# WordPiece: trains, loads back, lowercases by default, decodes
$T train -q --model wordpiece --vocab-size 800 -o tok-wp.json corpus.txt
echo "The Quick Brown Fox" | $T encode -q -t tok-wp.json | $T decode -t tok-wp.json >wp.txt
[ "$(cat wp.txt)" = "the quick brown fox" ] || fail "wordpiece round trip: $(cat wp.txt)"

# sampling: reproducible with a seed, and says how many lines it used
n=$(wc -l <corpus.txt)
$T train --model bpe --vocab-size 400 --sample-lines 50 --seed 7 -o s1.json corpus.txt 2>err1
$T train --model bpe --vocab-size 400 --sample-lines 50 --seed 7 -o s2.json <corpus.txt 2>err2
cmp s1.json s2.json || fail "sampling with the same seed differs"
grep -q "sampled 50 of $n lines" err1 || { cat err1 >&2; fail "sampling report"; }
$T train -q --model bpe --vocab-size 400 --sample-lines 50 --seed 8 -o s3.json corpus.txt
cmp -s s1.json s3.json && fail "sampling ignores the seed"
# The WordPiece trainer's alphabet, as tfm-tokenize(1) says: a character
# seen only inside words is there only as "##a", so a word that starts with
# it is [UNK]; equal counts merge the pair of smaller ids first (##a ##y,
# ids 5 7, before ##b ##y, 6 7; x ##ay before x ##by)
printf 'xay xay xay xby xby xby\n' > wp_alpha.txt
$T train -q -m wordpiece -v 12 -o wp_alpha.json wp_alpha.txt 2>/dev/null
[ "$($T vocab -t wp_alpha.json | cut -f 2 | tr '\n' ' ')" = "[PAD] [UNK] [CLS] [SEP] [MASK] ##a ##b ##y x ##ay ##by xay " ] ||
    fail "wordpiece alphabet/ties: $($T vocab -t wp_alpha.json | cut -f 2 | tr '\n' ' ')"
[ "$(echo 'ay xay' | $T encode -q -t wp_alpha.json --format pieces)" = "[UNK] xay" ] ||
    fail "a word starting with an inside-only character: $(echo 'ay xay' | $T encode -q -t wp_alpha.json --format pieces)"
exit 0
