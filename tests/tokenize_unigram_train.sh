#!/bin/sh
# tfm-tokenize train -m unigram: a small trained model's properties (exact
# vocabulary size, T5's sentinels at the top, user symbols whole, byte
# pieces with --byte-fallback, T5's specials, every training character
# encodable, the same model for any --threads, its tokenizer.json reading
# back to itself), no seed only at line ends (as spm_train), its held-out
# token count against spm_train's (when installed), bad input: a
# vocabulary smaller than the required characters, empty input; lines over
# max_sentence_length skipped and said.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
make_corpus corpus.txt
awk 'NR % 10 != 0' corpus.txt > train.txt
awk 'NR % 10 == 0' corpus.txt > test.txt

# vocabulary size exact; sentinels; user symbols; bytes
$T train -q -m unigram -v 700 --extra-ids 5 --user-symbols '<sep>,quick' --byte-fallback \
    --threads 1 -o a.json train.txt
$T vocab -t a.json > a.tsv
[ "$(wc -l < a.tsv)" -eq 700 ] || fail "vocabulary of $(wc -l < a.tsv), not 700"
id() { awk -F '\t' -v p="$1" '$2 == p { print $1 }' "$2"; }
[ "$(id '<extra_id_0>' a.tsv)" = 699 ] || fail "<extra_id_0> is not 699"
[ "$(id '<extra_id_4>' a.tsv)" = 695 ] || fail "<extra_id_4> is not 695"
[ "$(id '<unk>' a.tsv)" = 0 ] && [ "$(id '<s>' a.tsv)" = 1 ] && [ "$(id '</s>' a.tsv)" = 2 ] ||
    fail "specials are not <unk> <s> </s> = 0 1 2"
[ "$(id '<sep>' a.tsv)" = 3 ] && [ "$(id quick a.tsv)" = 4 ] || fail "user symbols not at 3, 4"
[ "$(id '<0x00>' a.tsv)" = 5 ] && [ "$(id '<0xFF>' a.tsv)" = 260 ] || fail "byte pieces not at 5..260"
[ "$(echo 'a<sep>b' | $T encode -q -t a.json --format pieces)" = "▁a <sep> b" ] ||
    fail "<sep> is split: $(echo 'a<sep>b' | $T encode -q -t a.json --format pieces)"
echo 'ŋ' | $T encode -q -t a.json --format pieces | grep -q '<0xC5> <0x8B>' ||
    fail "an unseen character is not byte pieces"
# control pieces show in decoded text (as HF's decode) unless --skip-special
[ "$(echo '699 4 2' | $T decode -t a.json)" = "<extra_id_0>quick</s>" ] ||
    fail "decode with specials: $(echo '699 4 2' | $T decode -t a.json)"
[ "$(echo '699 4 2' | $T decode --skip-special -t a.json)" = "quick" ] ||
    fail "decode --skip-special: $(echo '699 4 2' | $T decode --skip-special -t a.json)"
echo "size, sentinels, user symbols and byte pieces as asked"

# read back: the same vocabulary and ids
$T convert -t a.json | cmp -s - a.json || fail "the tokenizer.json does not read back to itself"

# every training character encodable (coverage 1: no <unk>)
$T train -q -m unigram -v 600 --character-coverage 1 -o c.json train.txt
$T encode -q -t c.json train.txt | grep -qw 0 && fail "a training character encodes as <unk>"
# decoding gives the normalized text, which encodes to the same ids
$T encode -q -t c.json train.txt > c.ids
$T decode -t c.json c.ids > c.txt
$T encode -q -t c.json c.txt | cmp -s - c.ids || fail "decode(encode(x)) encodes differently"

# the same model for any thread count; T5's specials
$T train -q -m unigram -v 600 --threads 1 -o t1.json train.txt
$T train -q -m unigram -v 600 --threads 3 -o t3.json train.txt
cmp -s t1.json t3.json || fail "--threads 3 trains another model than --threads 1"
$T train -q -m unigram -v 600 --special '<pad>' --special '</s>' --special '<unk>' -o t5.json \
    train.txt
$T vocab -t t5.json | head -n 3 | cut -f 2 | tr '\n' ' ' | grep -qx '<pad> </s> <unk> ' ||
    fail "T5 specials: $($T vocab -t t5.json | head -n 3 | cut -f 2 | tr '\n' ' ')"
grep -q '"unk_id": 2' t5.json || fail "T5 specials: <unk> is not the unknown piece"
echo "deterministic for any --threads; T5's specials"

# seeds are the nodes of spm_train's suffix tree, where a line break is a
# character: a word seen only at line ends seeds no piece ("quixotic" here;
# "zebra" ends lines too, but "zebra1", "zebra2"... make it a node)
i=0
while [ $i -lt 30 ]; do
    echo "the cat sat on the mat zebra$i"
    echo "a dog ate my homework today quixotic"
    i=$((i + 1))
done > ends.txt
$T train -q -m unigram -v 40 --threads 1 -o ends.json ends.txt
$T vocab -t ends.json | cut -f 2 > ends.tsv
grep -qx '▁zebra' ends.tsv || fail "▁zebra is no piece: $(tr '\n' ' ' < ends.tsv)"
grep -q 'quix' ends.tsv && fail "a word only at line ends is a piece: $(tr '\n' ' ' < ends.tsv)"
echo "seeds as spm_train's: none only at line ends"

# against spm_train (same text, same size): within 5% here (1% on big text)
if command -v spm_train >/dev/null 2>&1; then
    spm_train --input=train.txt --model_prefix=spm --vocab_size=600 --model_type=unigram \
        --num_threads=1 --minloglevel=2 >/dev/null 2>&1 || fail "spm_train failed"
    ns=$(spm_encode --model=spm.model --output_format=piece < test.txt | wc -w)
    nt=$($T encode -q -t t1.json --format pieces test.txt | wc -w)
    echo "held-out tokens: tfm $nt, spm_train $ns"
    awk -v a="$nt" -v b="$ns" 'BEGIN { exit !(a <= 1.05 * b && a >= 0.9 * b) }' ||
        fail "tfm's $nt held-out tokens are not within 5% of spm_train's $ns"
fi

# bad input: exit 1, a message naming the file
expect_exit 1 $T train -q -m unigram -v 20 train.txt
grep -q 'train.txt' err && grep -q 'too small' err || fail "small vocabulary: $(cat err)"
: > empty.txt
expect_exit 1 $T train -q -m unigram -v 100 empty.txt
grep -q 'empty.txt' err && grep -q 'no text' err || fail "empty input: $(cat err)"
expect_exit 2 $T train -q -m bpe --byte-fallback train.txt
echo "bad input: clear messages"

# lines over max_sentence_length (4192 bytes, spm_train's) are skipped, as
# spm_train does, and said: counted in the summary (a warning with -q), an
# error when nothing is left; --max-sentence-length changes the limit
long=$(awk 'BEGIN { for (i = 0; i < 700; i++) printf "word%d ", i % 50; print "" }')
{ head -n 40 train.txt; for i in 1 2 3; do echo "$long"; done; } > mixed.txt
expect_exit 0 $T train -m unigram -v 300 -o m.json mixed.txt
grep -q 'on 40 lines' err && grep -q '3 lines (0.0 MB) over 4192 bytes skipped' err ||
    fail "skipped long lines not reported: $(cat err)"
expect_exit 0 $T train -q -m unigram -v 300 -o m.json mixed.txt
grep -q 'warning: 3 lines .* over 4192 bytes skipped' err || fail "-q: skipped lines unsaid: $(cat err)"
expect_exit 0 $T train -m unigram -v 300 --max-sentence-length 10000 -o m2.json mixed.txt
grep -q 'on 43 lines' err && ! grep -q skipped err || fail "--max-sentence-length 10000: $(cat err)"
for i in 1 2; do echo "$long"; done > long.txt
expect_exit 1 $T train -q -m unigram -v 100 long.txt
grep -q 'long.txt: no text to train on: every one of its 2 lines is longer than the max_sentence_length of 4192 bytes' err ||
    fail "all lines long: $(cat err)"
expect_exit 2 $T train -q -m unigram --max-sentence-length 0 long.txt
expect_exit 2 $T train -q -m bpe --max-sentence-length 100 long.txt
echo "long lines: skipped, counted and said; the limit is an option"
