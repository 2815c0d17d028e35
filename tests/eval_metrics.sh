#!/bin/sh
# tfm-eval score, bleu and chrf end to end: scores checked by hand or
# against sacrebleu's numbers (testdata/metrics/bleu.jsonl), the TSV and JSON
# forms (null, never NaN), and for bad input one message naming the file and
# line with exit 1; usage errors exit 2.
set -eu
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
# the message names the file and line
expect_msg() { grep -q "^tfm-eval: $1" err || { cat err >&2; fail "no message '$1'"; }; }
field() { tr ',' '\n' <"$1" | sed -n "s/^\"$2\"://p" | tr -d '}'; }
close() { awk -v a="$1" -v b="$2" -v t="${3:-1e-3}" 'BEGIN { d = a - b; exit !(d * d <= t * t) }' ||
    fail "$4: $1, want $2"; }
E="tfm-eval -q"

# ---- bleu and chrf: sacrebleu's numbers for two of the golden cases -------
printf "It's 3.5%% cheaper &amp; faster -- isn't it?\n" >hyp.txt
printf 'It is 3.5 %% cheaper & faster - is it not?\n' >ref.txt
$E bleu --ref ref.txt --json <hyp.txt >b.json
close "$(field b.json bleu)" 34.9833 1e-3 BLEU
close "$(field b.json bp)" 0.8187 1e-3 BP
[ "$(field b.json sys_len)" = 10 ] && [ "$(field b.json ref_len)" = 12 ] || fail "lengths"
grep -q '"signature":"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"' b.json ||
    fail "signature: $(cat b.json)"
$E chrf --ref ref.txt --json hyp.txt >c.json
close "$(field c.json chrf)" 58.8143 1e-3 chrF
grep -q '"signature":"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"' c.json ||
    fail "chrF signature"
# the TSV form: a header and a value line, the score line on stderr
tfm-eval bleu --ref ref.txt hyp.txt >b.tsv 2>b.err
[ "$(wc -l <b.tsv)" -eq 2 ] && head -n 1 b.tsv | grep -q '^lines	bleu	' || fail "TSV: $(cat b.tsv)"
grep -q '^tfm-eval: BLEU = 34.98 70.0/44.4/37.5/28.6 (BP = 0.819 ratio = 0.833 hyp_len = 10 ref_len = 12)$' b.err ||
    fail "score line: $(cat b.err)"

# two references, lowercase: the closest length and the better reference count
printf 'THE CAT the mat\nbig dog\n' >h2.txt
printf 'the cat sat down\nbig dog\n' >r1.txt
printf 'a cat sat on the mat\na big dog\n' >r2.txt
$E bleu --ref r1.txt --ref r2.txt --lowercase --json <h2.txt >m.json
[ "$(field m.json sys_len)" = 6 ] && [ "$(field m.json ref_len)" = 6 ] || fail "closest lengths"
grep -q 'nrefs:2|case:lc|' m.json || fail "signature of two lowercase references"
# unigrams 5/6, bigrams 3/4, trigrams 0/2 (smoothed 1/(2*2)), 4-grams 0/1 (1/(4*1))
close "$(field m.json bleu)" "$(awk 'BEGIN { printf "%.12g", 100 * exp((log(5/6) + log(3/4) + log(1/4) + log(1/4)) / 4) }')" 1e-6 "BLEU of two references"
# per line: sentence BLEU with effective order; "big dog" is 100 from order 2
$E bleu --ref r1.txt --ref r2.txt --lowercase --sentence <h2.txt >s.tsv
[ "$(wc -l <s.tsv)" -eq 3 ] || fail "--sentence: a header and a line each"
[ "$(awk -F'\t' 'NR == 3 { print $2 }' s.tsv)" = 100 ] || fail "sentence BLEU: $(cat s.tsv)"
$E chrf --ref r1.txt --sentence <h2.txt | awk -F'\t' 'NR == 1 && $2 != "chrf" { exit 1 } END { exit NR != 3 }' ||
    fail "chrf --sentence"
# an empty hypothesis line is a line: BLEU 0, not an error
printf '\n' >empty.txt
printf 'Nothing here.\n' >nothing.txt
$E bleu --ref nothing.txt --json <empty.txt >e.json
[ "$(field e.json bleu)" = 0 ] || fail "empty hypothesis"

# ---- score ----------------------------------------------------------------
printf '1\n0\n1\n1\n0\n' >gold.txt
printf '1\n1\n1\n0\n0\n' >pred.txt
$E score --task classify --gold gold.txt --json pred.txt >k.json
close "$(field k.json accuracy)" 0.6 1e-7 accuracy
close "$(field k.json f1_pos)" "$(awk 'BEGIN { printf "%.12g", 2 / 3 }')" 1e-7 "binary F1 of 1"
grep -q '"pos_label":"1"' k.json || fail "default positive label 1"
# (TP 2, FP 1, FN 1, TN 1): MCC = (2 - 1) / sqrt(3 * 3 * 2 * 2)
close "$(field k.json mcc)" "$(awk 'BEGIN { printf "%.12g", 1 / 6 }')" 1e-7 MCC
$E score --task classify --gold gold.txt --pos-label 0 --json <pred.txt >k0.json
close "$(field k0.json f1_pos)" 0.5 1e-7 "binary F1 of 0"
# a positive label the data does not hold is refused, as scikit-learn does
expect_exit 1 $E score --task classify --gold gold.txt --pos-label nosuch pred.txt
grep -q "^tfm-eval: --pos-label 'nosuch' is not a label of the data (labels: '[01]', '[01]')$" err ||
    fail "--pos-label nosuch: $(cat err)"
[ -s out ] && fail "--pos-label nosuch: output"
printf 'a\nb\nc\n' >g3.txt
$E score --task classify --gold g3.txt --json g3.txt >k3.json
grep -q '"pos_label":null' k3.json || fail "three labels: no binary scores by default"

printf '1\n2\n3\n4\n' >y.txt
printf '2\n4\n5\n5\n' >yhat.txt
$E score --task regress --gold y.txt --json yhat.txt >r.json
# ranks of the prediction: 1 2 3.5 3.5
close "$(field r.json spearman)" "$(awk 'BEGIN { printf "%.12g", 4.5 / sqrt(5 * 4.5) }')" 1e-7 Spearman
printf '7\n7\n7\n7\n' >const.txt
$E score --task regress --gold y.txt --json const.txt >n.json
grep -q '"pearson":null,"spearman":null' n.json || fail "undefined correlation must be null: $(cat n.json)"
if grep -qi 'nan\|inf' n.json; then fail "NaN in JSON"; fi
$E score --task regress --gold y.txt const.txt | awk -F'\t' 'NR == 2 && $2 != "-" { exit 1 }' ||
    fail "undefined correlation in TSV"

# CoNLL gold, one-sentence-a-line prediction: a stray I- opens an entity
printf -- '-DOCSTART- -X- O\n\nJohn NNP B-PER\nSmith NNP I-PER\nlives VBZ O\n\nin IN O\nNew NNP B-LOC\nYork NNP I-LOC\n' >gold.conll
printf 'I-PER I-PER O\nO B-LOC B-LOC\n' >pred.tags
$E score --task tag --gold gold.conll --json pred.tags >t.json
# gold PER(0-1) LOC(4-5); pred PER(0-1) LOC(4) LOC(5): 1 of 3 right
[ "$(field t.json correct_entities)" = 1 ] && [ "$(field t.json pred_entities)" = 3 ] || fail "entities: $(cat t.json)"
close "$(field t.json f1)" 0.4 1e-7 "entity F1"
close "$(field t.json token_accuracy)" "$(awk 'BEGIN { printf "%.12g", 4 / 6 }')" 1e-7 "token accuracy"

printf 'The Cat\tcat\nParis.\nthe end\n' >gold.ans
printf 'a cat!\nin Paris\nan\n' >pred.ans
$E score --task span --gold gold.ans --json pred.ans >a.json
# exact: 1, 0, 0 (end vs nothing); F1: 1, 2/3, 0
close "$(field a.json exact_match)" "$(awk 'BEGIN { printf "%.12g", 100 / 3 }')" 1e-7 "exact match"
close "$(field a.json f1)" "$(awk 'BEGIN { printf "%.12g", 100 * 5 / 9 }')" 1e-7 "span F1"
# no gold answer (an empty line, "answers": []) is unanswerable (SQuAD v2):
# an empty prediction is right on both scores, an answer wrong
printf 'cat\n\n\n' >gold0.ans
printf 'cat\n\nsomething\n' >pred0.ans
$E score --task span --gold gold0.ans --json pred0.ans >a0.json
close "$(field a0.json exact_match)" "$(awk 'BEGIN { printf "%.12g", 200 / 3 }')" 1e-7 "unanswerable: exact match"
close "$(field a0.json f1)" "$(awk 'BEGIN { printf "%.12g", 200 / 3 }')" 1e-7 "unanswerable: F1"

# every JSON output parses
if command -v python3 >/dev/null; then
    for f in b c m e k k0 k3 r n t a a0; do
        python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$f.json" || fail "$f.json is not JSON"
    done
fi

# ---- bad input: exit 1, file and line named -------------------------------
printf 'one\ntwo\n' >two.txt
expect_exit 1 tfm-eval bleu --ref two.txt hyp.txt
expect_msg "two.txt:2: one too many"
expect_exit 1 tfm-eval chrf --ref ref.txt --ref two.txt hyp.txt
expect_msg "two.txt:2:"
expect_exit 1 tfm-eval bleu --ref ref.txt two.txt
expect_msg "ref.txt:2: missing"
expect_exit 1 tfm-eval bleu --ref nosuch.txt hyp.txt
expect_msg "nosuch.txt: "
printf '1\n0\n' >p2.txt
expect_exit 1 tfm-eval score --task classify --gold gold.txt p2.txt
expect_msg "p2.txt:3: missing"
printf '1\n\n0\n1\n0\n' >blank.txt
expect_exit 1 tfm-eval score --task classify --gold gold.txt blank.txt
expect_msg "blank.txt:2: empty line"
printf '1\n2\nthree\n4\n' >bad.txt
expect_exit 1 tfm-eval score --task regress --gold y.txt bad.txt
expect_msg "bad.txt:3: 'three' is not a finite number"
printf 'John NNP B-PER\nSmith I-PER\n\n' >missing.conll
expect_exit 1 tfm-eval score --task tag --gold missing.conll pred.tags
expect_msg "missing.conll:2: 2 columns, but line 1 has 3"
printf 'John NNP B-PER\nSmith NNP I-PER\nlives VBZ O\n\nin IN O\nNew NNP\n' >missing2.conll
expect_exit 1 tfm-eval score --task tag --gold gold.conll missing2.conll
expect_msg "missing2.conll:6: 2 columns, but line 1 has 3"
# without a blank line, a CoNLL file needs --tag-format conll
printf 'John NNP B-PER\nSmith I-PER\n' >missing3.conll
expect_exit 1 tfm-eval score --task tag --tag-format conll --gold missing3.conll pred.tags
expect_msg "missing3.conll:2: 2 columns"
printf 'B-PER I-PER O\nO B-LOC\n' >short.tags
expect_exit 1 tfm-eval score --task tag --gold gold.conll short.tags
expect_msg "short.tags:2: sentence 2 has 2 tags, but 3 at gold.conll:7"
expect_exit 1 tfm-eval bleu --ref ref.txt </dev/null
expect_msg "stdin: empty input"
[ "$(wc -l <err)" -eq 1 ] || fail "one message"
# invalid UTF-8 is refused with file:line, as in JSON Lines inputs
printf 'ok\nbad \377 byte\n' >inv.txt
printf 'ok\nfine\n' >ok2.txt
expect_exit 1 tfm-eval bleu --ref ok2.txt inv.txt
grep -q "^tfm-eval: inv.txt:2: invalid UTF-8$" err || fail "bleu: invalid UTF-8: $(cat err)"
expect_exit 1 tfm-eval chrf --ref inv.txt ok2.txt
grep -q "^tfm-eval: inv.txt:2: invalid UTF-8$" err || fail "chrf: invalid UTF-8 reference: $(cat err)"
expect_exit 1 tfm-eval score --task classify --gold ok2.txt inv.txt
grep -q "^tfm-eval: inv.txt:2: invalid UTF-8$" err || fail "score: invalid UTF-8: $(cat err)"
expect_exit 1 tfm-eval score --task span --gold inv.txt ok2.txt
grep -q "^tfm-eval: inv.txt:2: invalid UTF-8$" err || fail "score: invalid UTF-8 gold: $(cat err)"

# ---- usage errors: exit 2 ---------------------------------------------------
expect_exit 2 tfm-eval bleu hyp.txt
expect_exit 2 tfm-eval score --gold gold.txt pred.txt
expect_exit 2 tfm-eval score --task classify pred.txt
expect_exit 2 tfm-eval score --task sort --gold gold.txt pred.txt
expect_exit 2 tfm-eval score --task regress --gold y.txt --sentence yhat.txt
expect_exit 2 tfm-eval score --task regress --gold y.txt --pos-label 1 yhat.txt
expect_exit 2 tfm-eval score --task tag --gold gold.conll --tag-format xml pred.tags
expect_exit 2 tfm-eval bleu --ref ref.txt --gold gold.txt hyp.txt
expect_exit 2 tfm-eval bleu --ref ref.txt --no-such-option hyp.txt
# chrf's usage hint names chrf's help, not bleu's; a typo gets a suggestion
expect_exit 2 tfm-eval chrf --ref ref.txt --lowercse hyp.txt
grep -q "bleu --help" err && fail "chrf's hint points at bleu: $(cat err)"
grep -q "^tfm-eval: did you mean '--lowercase'?$" err || fail "chrf: no suggestion: $(cat err)"
expect_exit 2 tfm-eval bleu --ref ref.txt hyp.txt extra.txt
expect_exit 2 tfm-eval bleu --ref - <hyp.txt
expect_exit 2 tfm-eval score --task classify --gold - <pred.txt
expect_exit 0 tfm-eval bleu -q --ref - hyp.txt <ref.txt
expect_exit 0 tfm-eval bleu --help
grep -q -- '--pos-label' out || fail "help"
# --threads, which every program takes (tfm(7)), is accepted and checked
for c in "score --task classify --gold gold.txt pred.txt" "bleu --ref ref.txt hyp.txt" \
         "chrf --ref ref.txt hyp.txt"; do
    expect_exit 0 tfm-eval $c --threads 1
    expect_exit 2 tfm-eval $c --threads 0
done
# options before the command
expect_exit 0 tfm-eval -q --ref ref.txt --json bleu hyp.txt
echo "tfm-eval score/bleu/chrf: all checks passed"
