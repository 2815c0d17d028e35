#!/bin/sh
# scripts/examples/Makefile end to end with a tiny config (seconds): every
# step runs under make -j2, the result is a model, samples, a perplexity and
# few-shot accuracies;
# a second make does nothing; touching the config retrains without
# re-tokenizing.
set -eu
command -v make >/dev/null 2>&1 || { echo "SKIP: no make"; exit 77; }
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"

# a small corpus that does not change under us: the GPL (Debian's copy),
# else the project's manual pages
if [ -f /usr/share/common-licenses/GPL-3 ]; then
    cp /usr/share/common-licenses/GPL-3 corpus.txt
else
    cat "$TFM_SRCDIR"/man/*.[1-9] | grep -v '^\.' | head -n 1500 >corpus.txt
fi
cp "$TFM_SRCDIR/scripts/examples/tiny.yaml" tiny.yaml
mk() {
    # a make of its own, not a sub-make of make check's
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -f "$TFM_SRCDIR/scripts/examples/Makefile" BIN="$TFM_BUILDDIR" OUT=out \
        CORPUS=corpus.txt CONFIG=tiny.yaml VOCAB=300 NEW=10 THREADS=1 QUIET=-q "$@"
}
mk -j2 >log 2>&1 || { cat log >&2; fail "the pipeline failed"; }
for f in tok.json train.npy val.npy run/model.safetensors samples.txt eval.tsv fewshot.tsv; do
    [ -s "out/$f" ] || fail "out/$f was not made"
done
grep -q '^== greedy' out/samples.txt && grep -q '^== beam' out/samples.txt &&
    grep -q '^== nucleus' out/samples.txt || fail "samples.txt lacks a strategy"
head -n 1 out/eval.tsv | grep -q '^tokens	bytes	chars	cross_entropy	perplexity' ||
    fail "eval.tsv header: $(head -n 1 out/eval.tsv)"
# the tiny model must have learned something: perplexity well under the
# vocabulary size (300), bytes = the validation text's size
awk -F '\t' -v bytes="$(wc -c <out/val.txt)" 'NR == 2 {
    if (!($5 > 1 && $5 < 150)) { print "perplexity " $5; exit 1 }
    if ($2 != bytes) { print "bytes " $2 " != " bytes; exit 1 } }' out/eval.tsv ||
    fail "eval.tsv: $(sed -n 2p out/eval.tsv)"
# an accuracy in percent for each number of shots
awk -F '\t' 'BEGIN { split("0 1 2 4", k, " ") }
    NR == 1 && $0 != "shots\taccuracy" { exit 1 }
    NR > 1 && ($1 != k[NR - 1] || !($2 >= 0 && $2 <= 100)) { exit 1 }
    END { if (NR != 5) exit 1 }' out/fewshot.tsv ||
    fail "fewshot.tsv: $(cat out/fewshot.tsv)"

# nothing to do the second time
mk -q || fail "make -q: the pipeline is not up to date after a run"
mk >log2 2>&1
grep -Eq '(^|/)tfm-(tokenize|train|generate|eval) ' log2 && { cat log2 >&2; fail "a second make ran a program"; }
# a new config retrains (and re-evaluates) but keeps the tokens
before=$(ls -l --time-style=+%s.%N out/train.npy)
sleep 1
touch tiny.yaml
mk >log3 2>&1 || { cat log3 >&2; fail "rerun failed"; }
grep -Eq '(^|/)tfm-train ' log3 || fail "touching the config did not retrain"
grep -Eq '(^|/)tfm-tokenize ' log3 && fail "touching the config re-tokenized"
[ "$before" = "$(ls -l --time-style=+%s.%N out/train.npy)" ] || fail "train.npy was rewritten"
sed -n 2p out/eval.tsv
echo ok
