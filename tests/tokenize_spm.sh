#!/bin/sh
# SentencePiece Unigram and BPE: the ids of models that spm_train writes (trained
# here on a generated text, --num_threads=1: its vocabulary depends on the
# thread count) equal spm_encode's on hidden text with accents, CJK, emoji,
# combining marks, odd spaces, tabs and very long words; decoding equals
# spm_decode's; the tokenizer.json that convert writes gives the same ids
# and converts back to itself; decoding inverts encoding on normalized text; -t DIR finds
# spiece.model.  Skipped (77) without spm_train.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
command -v spm_train >/dev/null 2>&1 && command -v spm_encode >/dev/null 2>&1 ||
    skip "spm_train/spm_encode not found (Debian: sentencepiece)"

# A training text: words of 1-4 syllables (Latin with accents and
# combining marks, Greek, Cyrillic, kana, hanzi, hangul, emoji), drawn by a
# fixed LCG.
awk 'BEGIN {
    n = split("ka ri to na mu se lo pe qu an er in on th st ch é è ü ß ñ " \
              "é ö ø ål κα λη ρα при ве мир до 東 京 日 本 語 中 文 한 국 어 " \
              "です ます カ タ 😀 🚀 👍🏽 ﬁ Ａ ① 1 2 3 4 5 ,", syl, " ")
    s = 12345
    for (l = 0; l < 4000; l++) {
        line = ""
        s = (s * 1103515245 + 12345) % 2147483648; k = 1 + s % 12
        for (i = 0; i < k; i++) {
            s = (s * 1103515245 + 12345) % 2147483648; m = 1 + s % 4
            word = ""
            for (j = 0; j < m; j++) {
                s = (s * 1103515245 + 12345) % 2147483648
                word = word syl[1 + int(s / 7) % n]
            }
            line = line (i ? " " : "") word
        }
        print line
    }
}' > train.txt

# Hidden text: unseen words and characters, every kind of space.
{
    printf 'the quick brown fox\n'
    printf '  leading and trailing spaces   \n'
    printf 'tabs\tbetween\t\twords\n'
    printf 'ideographic\xe3\x80\x80space and\xc2\xa0nbsp and\xe2\x80\x83em space\n'
    printf 'Crème brûlée à la façon de Noël, Ångström\n'
    printf 'combining: e\xcc\x81 a\xcc\x88 n\xcc\x83 o\xcc\x82\xcc\x81\n'
    printf '東京タワーと日本語の文章、中文句子，한국어 문장\n'
    printf 'emoji 😀🚀👍🏽👨‍👩‍👧 zwj and flags 🇯🇵🇫🇷\n'
    printf 'ﬁsh ﬂour Ｆｕｌｌｗｉｄｔｈ ①②③ ㈱ ½ ™\n'
    printf 'Supercalifragilisticexpialidocious%s\n' \
        "$(printf 'xyzzy%.0s' 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20)"
    printf 'unseen: ǅungla Ωmega ẞ ß İstanbul ﬀ\n'
    printf '\n'
    printf '     \n'
    printf 'mixed123numbers456 and punctuation!?... "quotes" «guillemets»\n'
    printf 'control\x01chars\x7fhere and a zero\xe2\x80\x8bwidth space\n'
    printf 'bad utf-8: \xff\xfe \xc3 end\n'
} > hidden.txt

# Train with spm_train; compare encode and decode with spm's tools.
n=0
train=train.txt hidden=hidden.txt
check() { # name, spm_train options... (on $train, tested on $hidden)
    name=$1; shift
    spm_train --input="$train" --model_prefix="$name" --num_threads=1 --minloglevel=2 --hard_vocab_limit=false \
        "$@" >/dev/null 2>"$name.log" || { cat "$name.log" >&2; fail "$name: spm_train failed"; }
    spm_encode --model="$name.model" --output_format=id < "$hidden" > "$name.spm"
    $T encode -q -t "$name.model" --format ids < "$hidden" > "$name.tfm" ||
        fail "$name: tfm-tokenize encode failed"
    cmp -s "$name.spm" "$name.tfm" ||
        { diff "$name.spm" "$name.tfm" | head -10 >&2; fail "$name: ids differ from spm_encode"; }
    spm_encode --model="$name.model" --output_format=id < "$train" > "$name.spm2"
    $T encode -q -t "$name.model" < "$train" > "$name.tfm2"
    cmp -s "$name.spm2" "$name.tfm2" || fail "$name: ids differ from spm_encode on the training text"
    # decoding: as spm_decode does
    spm_decode --model="$name.model" --input_format=id < "$name.spm" > "$name.spmdec"
    $T decode -t "$name.model" < "$name.spm" > "$name.tfmdec"
    cmp -s "$name.spmdec" "$name.tfmdec" ||
        { diff "$name.spmdec" "$name.tfmdec" | head -6 >&2; fail "$name: decode differs from spm_decode"; }
    # with <s> and </s>: --skip-special drops them and keeps <unk> (unk_surface)
    extra=eos
    $T vocab -t "$name.model" | cut -f 2 | grep -qx '<s>' && extra=bos:eos
    spm_encode --model="$name.model" --output_format=id --extra_options=$extra < "$hidden" > "$name.se"
    spm_decode --model="$name.model" --input_format=id < "$name.se" > "$name.sedec"
    $T decode --skip-special -t "$name.model" < "$name.se" | cmp -s - "$name.sedec" ||
        fail "$name: decode --skip-special differs from spm_decode"
    # its tokenizer.json (written by convert, read back) gives the same ids
    $T convert -t "$name.model" -o "$name.json"
    $T encode -q -t "$name.json" < "$hidden" > "$name.json.ids"
    cmp -s "$name.spm" "$name.json.ids" || fail "$name: its tokenizer.json gives other ids"
    $T convert -t "$name.json" | cmp -s - "$name.json" || fail "$name: tokenizer.json does not round-trip"
    n=$((n + 1))
}
check uni --model_type=unigram --vocab_size=300
check uni_bytes --model_type=unigram --vocab_size=400 --byte_fallback=true
check uni_user --model_type=unigram --vocab_size=300 \
    --user_defined_symbols='<sep>,quick,東京' --control_symbols='<ctl>' \
    --bos_id=-1 --pad_id=3
check uni_identity --model_type=unigram --vocab_size=300 --normalization_rule_name=identity \
    --add_dummy_prefix=false --remove_extra_whitespaces=false
check uni_nfkc_cf --model_type=unigram --vocab_size=250 --normalization_rule_name=nmt_nfkc_cf \
    --split_digits=true
# sentencepiece's BPE: pieces merged by score; its tokenizer.json is HF's
# BPE under Metaspace
check bpe --model_type=bpe --vocab_size=300
check bpe_bytes --model_type=bpe --vocab_size=400 --byte_fallback=true
check bpe_user --model_type=bpe --vocab_size=300 \
    --user_defined_symbols='<sep>,quick,東京' --control_symbols='<ctl>'
grep -q '"type": "BPE"' bpe.json || fail "an spm BPE model's tokenizer.json is not a BPE model"

# Indented source code, as Llama-style and code tokenizers keep it
# (remove_extra_whitespaces=false): spm_decode drops only the dummy prefix,
# and only with add_dummy_prefix, so the indentation survives; pieces of
# spaces alone (allow_whitespace_only_pieces) and a line that starts with
# an unknown character or a byte piece too.
awk 'BEGIN {
    n = split("def return if else for in while class import self None x y total " \
              "print( ) : = + ( , [i] .append 0 1 # comment", w, " ")
    s = 4242
    for (l = 0; l < 1500; l++) {
        s = (s * 1103515245 + 12345) % 2147483648; d = s % 5
        line = sprintf("%*s", 4 * d, "")
        s = (s * 1103515245 + 12345) % 2147483648; k = 1 + s % 8
        for (i = 0; i < k; i++) {
            s = (s * 1103515245 + 12345) % 2147483648
            line = line (i && s % 3 ? " " : "") w[1 + int(s / 7) % n]
        }
        print line
    }
}' > code.txt
{
    head -200 code.txt
    printf '        \n \n  x\n\t  tab then spaces\n   â snowman\n    æ¼¢ \n'
} > code_hidden.txt
train=code.txt hidden=code_hidden.txt
check code_keep --model_type=unigram --vocab_size=200 --remove_extra_whitespaces=false
check code_ws --model_type=unigram --vocab_size=200 --remove_extra_whitespaces=false \
    --allow_whitespace_only_pieces=true --split_by_whitespace=false
check code_bytes --model_type=bpe --vocab_size=300 --remove_extra_whitespaces=false \
    --allow_whitespace_only_pieces=true --byte_fallback=true
check code_nodummy --model_type=unigram --vocab_size=200 --remove_extra_whitespaces=false \
    --add_dummy_prefix=false --allow_whitespace_only_pieces=true
check code_strip --model_type=unigram --vocab_size=200 --add_dummy_prefix=false
# unk_surface and a denormalizer (rules applied to the decoded text)
printf '61\t41\n20 2C\t2C\n' > denorm.tsv
train=train.txt hidden=hidden.txt
check uni_denorm --model_type=unigram --vocab_size=300 --unk_surface='<?>' \
    --denormalization_rule_tsv=denorm.tsv
grep -q '<?>' uni_denorm.tfmdec && grep -q 'A' uni_denorm.tfmdec ||
    fail "uni_denorm: no unk_surface or no denormalization in $(head -n 3 uni_denorm.tfmdec)"
echo "ids and decoding equal spm_encode/spm_decode for $n unigram and bpe models"

# A Viterbi near-tie (lib/text/unigram_test.c has the same model): "ab" is
# ▁|ab (-1 + -3 = -4) or ▁a|b (-3.5 + -0.49999997 = -4 + 2^-25, -4 in
# float).  sentencepiece sums in double: ▁a|b (ids 5 3); float sums keep
# ▁|ab (1 4).  The .model is written byte by byte: <unk>, ▁, a, b, ab, ▁a.
{
    printf '\012\016\012\005<unk>\025\000\000\000\000\030\002'
    printf '\012\014\012\003\342\226\201\025\000\000\200\277\030\001'
    printf '\012\012\012\001a\025\000\000\040\301\030\001'
    printf '\012\012\012\001b\025\377\377\377\276\030\001'
    printf '\012\013\012\002ab\025\000\000\100\300\030\001'
    printf '\012\015\012\004\342\226\201a\025\000\000\140\300\030\001'
} > tie.model
printf 'ab\nab ab\nba\n' > tie.txt
spm_encode --model=tie.model --output_format=id < tie.txt > tie.spm
$T encode -q -t tie.model < tie.txt > tie.tfm
printf '5 3\n5 3 5 3\n1 3 2\n' | cmp -s - tie.spm || fail "spm_encode no longer picks ▁a|b: $(cat tie.spm)"
cmp -s tie.spm tie.tfm || fail "Viterbi near-tie: ids $(head -n 1 tie.tfm), spm_encode $(head -n 1 tie.spm)"
echo "a Viterbi near-tie is broken as spm_encode breaks it"

# A BPE model with an unused piece: "ab" (score -1, type UNUSED) merges
# first, then into "▁ab" (-2) where a "▁" precedes it; left alone it is
# split back into a and b.  <unk>, ▁, a, b, c, ab, ▁ab; model_type BPE.
{
    printf '\012\016\012\005<unk>\025\000\000\000\000\030\002'
    printf '\012\014\012\003\342\226\201\025\000\000\100\300\030\001'
    printf '\012\012\012\001a\025\000\000\200\300\030\001'
    printf '\012\012\012\001b\025\000\000\200\300\030\001'
    printf '\012\012\012\001c\025\000\000\240\300\030\001'
    printf '\012\013\012\002ab\025\000\000\200\277\030\005'
    printf '\012\016\012\005\342\226\201ab\025\000\000\000\300\030\001'
    printf '\022\002\030\002'
} > unused.model
printf 'ab cab\nabab xy ab\n' > unused.txt
spm_encode --model=unused.model --output_format=id < unused.txt > unused.spm
$T encode -q -t unused.model < unused.txt > unused.tfm
printf '6 1 4 2 3\n6 2 3 1 0 6\n' | cmp -s - unused.spm || fail "spm_encode on unused.model: $(cat unused.spm)"
cmp -s unused.spm unused.tfm || fail "BPE with an unused piece: ids $(cat unused.tfm)"
echo "a BPE merge into an unused piece is undone as spm_encode does"

# Decoding is the exact inverse on normalized text without unknown pieces.
spm_normalize --model=uni_bytes.model < hidden.txt 2>/dev/null | sed 's/▁/ /g; s/^ //' > norm.txt ||
    true
if [ -s norm.txt ]; then
    $T encode -q -t uni_bytes.model < hidden.txt | $T decode -t uni_bytes.model > dec.txt
    cmp -s norm.txt dec.txt || { diff norm.txt dec.txt | head >&2; fail "decode is not the inverse"; }
fi

# -t DIR finds spiece.model
mkdir d
cp uni.model d/spiece.model
$T encode -q -t d < hidden.txt > dir.ids
cmp -s dir.ids uni.spm || fail "-t DIR (spiece.model) gives other ids"

# --nbest: the first of each line's n best is the encoding; --sample: the
# same draws for any thread count and chunking, and other draws for
# another seed; both refuse a tokenizer that is not Unigram.
$T encode -q -t uni.model --nbest 1 < hidden.txt > nb1.ids
cmp -s nb1.ids uni.spm || fail "--nbest 1 differs from the best segmentation"
head -n 1 hidden.txt | $T encode -q -t uni.model --nbest 3 > nb3.ids
[ "$(wc -l < nb3.ids)" -eq 3 ] || fail "--nbest 3 did not give three lines"
[ "$(head -n 1 nb3.ids)" = "$(head -n 1 uni.spm)" ] ||
    fail "--nbest 3: the first is not the best"
for i in 1 2 3 4 5 6 7 8; do cat train.txt; done > big.txt
$T encode -q -t uni.model --sample 0.2 --seed 5 --threads 1 < big.txt > s1.ids
TFM_ENCODE_CHUNK=4096 $T encode -q -t uni.model --sample 0.2 --seed 5 --threads 2 < big.txt > s2.ids
cmp -s s1.ids s2.ids || fail "--sample differs with the thread count"
$T encode -q -t uni.model --sample 0.2 --seed 6 < big.txt > s3.ids
cmp -s s1.ids s3.ids && fail "--sample: another seed gives the same draws"
$T encode -q -t uni.model < big.txt > best.ids
cmp -s s1.ids best.ids && fail "--sample 0.2 gives the best segmentation on every line"
$T decode -t uni.model s1.ids > s1.txt
$T decode -t uni.model best.ids | cmp -s - s1.txt || fail "sampled ids do not decode to the text"
make_corpus corpus.txt
$T train -q --model bpe --vocab-size 300 -o bpe.json corpus.txt
# options that do not fit together or with the tokenizer: usage errors (2)
expect_exit 2 $T encode -t bpe.json --sample 0.1 hidden.txt
grep -q "needs a Unigram" err || fail "--sample with BPE: $(cat err)"
expect_exit 2 $T encode -t bpe.json --nbest 2 hidden.txt
expect_exit 2 $T encode -t bpe.model --nbest 2 hidden.txt
grep -q "sentencepiece model is BPE" err || fail "--nbest with spm's BPE: $(cat err)"
expect_exit 2 $T encode -t uni.model --sample 0.1 --document hidden.txt
grep -q "line by line" err || fail "--sample --document: $(cat err)"
expect_exit 2 $T encode -t uni.model --nbest 2 --add-special hidden.txt
expect_exit 2 $T encode -t uni.model --sample 0.1 --nbest 2 hidden.txt
# BPE-dropout's alpha is a probability (sentencepiece: 1 and over skip
# every merge); the Unigram's is an exponent of any size
expect_exit 2 $T encode -t bpe.model --sample 1.5 hidden.txt
grep -q "in \[0, 1\]" err || fail "--sample 1.5 with spm's BPE: $(cat err)"
expect_exit 0 $T encode -q -t bpe.model --sample 1 --seed 1 hidden.txt
expect_exit 0 $T encode -q -t uni.model --sample 1.5 --seed 1 hidden.txt
# BPE-dropout: another seed draws otherwise, alpha 0 merges as encode does
$T encode -q -t bpe.model --sample 0.1 --seed 1 < big.txt > d1.ids
$T encode -q -t bpe.model --sample 0.1 --seed 2 < big.txt > d2.ids
cmp -s d1.ids d2.ids && fail "BPE-dropout: another seed gives the same draws"
$T encode -q -t bpe.model --sample 0 --seed 1 < big.txt > d0.ids
$T encode -q -t bpe.model < big.txt | cmp -s - d0.ids || fail "BPE-dropout 0 differs from encode"
echo "--nbest and --sample work; sampling is the same on any thread count"

# Per-line npy keeps lines apart with </s> (uni.model has it); a model without it (whose
# normalizer drops newlines) is refused rather than run the lines together.
expect_exit 0 $T encode -q -t uni.model --format npy -o lines.npy hidden.txt
spm_train --input=train.txt --model_prefix=noeos --num_threads=1 --minloglevel=2 \
    --vocab_size=300 --hard_vocab_limit=false --eos_id=-1 >/dev/null 2>&1 || fail "spm_train --eos_id=-1 failed"
expect_exit 2 $T encode -q -t noeos.model --format npy -o noeos.npy hidden.txt
grep -q "per-line npy needs a separator" err || fail "npy without </s>: $(cat err)"
[ ! -e noeos.npy ] || fail "npy without </s>: an output file was left"
expect_exit 0 $T encode -q -t noeos.model --format npy --document -o noeos.npy hidden.txt
echo "per-line npy: </s> between lines, refused without it"
