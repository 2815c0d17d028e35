#!/bin/sh
# A tiny model learns: the validation loss falls well below the initial
# loss (ln V); the text + tokenizer path works and embeds the tokenizer.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data
tfm-train -q -c run.yaml --set train.max_steps=80 --set train.eval_interval=40 -o r
first=$(awk -F'\t' 'NR == 2 { print $2 }' r/log.tsv)
last=$(awk -F'\t' '$3 != "" { v = $3 } END { print v }' r/log.tsv)
echo "first train loss $first, last val loss $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 4 && b < 2.8) }' ||
    fail "loss did not fall enough: $first -> $last"
# curves.svg, redrawn at each evaluation: loss (train, val) and learning rate
grep -q '^<svg ' r/curves.svg && [ "$(grep -c '<polyline ' r/curves.svg)" = 3 ] ||
    fail "r/curves.svg: $(grep -c '<polyline ' r/curves.svg) polylines, not 3"
grep -q 'step (optimizer updates)' r/curves.svg || fail "curves.svg: no step axis label"
# --plot: several runs in one SVG; a directory without log.tsv, bad usage
mkdir -p norun
tfm-train --plot r r -o two.svg
[ "$(grep -c '<polyline ' two.svg)" = 6 ] || fail "--plot of two runs: not 6 polylines"
expect_fail 1 "tfm-train: norun/log.tsv: no such file" tfm-train --plot r norun -o x.svg
[ ! -e x.svg ] || fail "a failed --plot wrote x.svg"
expect_fail 2 "--plot: no output file" tfm-train --plot r
expect_fail 2 "--plot: no run directory" tfm-train --plot -o x.svg
expect_fail 2 "--plot takes run directories" tfm-train --plot r -c run.yaml -o x.svg
# log.tsv columns
head -n 1 r/log.tsv | grep -qx 'step	train_loss	val_loss	lr	grad_norm	tokens_per_s	elapsed_s' ||
    fail "log header"
[ "$(awk -F'\t' 'NF != 7' r/log.tsv | wc -l)" = 0 ] || fail "log lines without 7 fields"

# post-LN, ReLU, untied, Adam with L2, linear decay, accumulation also train
tfm-train -q -c run.yaml --set model.norm=post --set model.activation=relu \
    --set model.tie_embeddings=false --set optim.type=adam --set schedule.decay=linear \
    --set train.grad_accum=2 --set train.max_steps=60 --set model.n_embd=32 -o p
last=$(awk -F'\t' '$3 != "" { v = $3 } END { print v }' p/log.tsv)
awk -v b="$last" 'BEGIN { exit !(b < 3.2) }' || fail "variant did not learn: $last"

# early stopping: with lr 0 the validation loss never improves after the first evaluation
tfm-train -c run.yaml --set optim.lr=0 --set schedule.min_lr=0 --set train.eval_interval=5 \
    --set train.patience=2 -o e 2> err.txt || { cat err.txt; fail "patience run failed"; }
grep -q "no better validation loss in 2 evaluations: stopping at step 15" err.txt ||
    { cat err.txt; fail "no early stop"; }
[ "$(tail -n 1 e/log.tsv | cut -f 1)" = 15 ] || fail "early stop not at step 15"

if command -v tfm-tokenize >/dev/null; then
    tfm-tokenize train --model char -o tok.json corpus.txt
    tfm-train -q -c run.yaml --set data.train= --set data.val= --set data.text=corpus.txt \
        --set data.tokenizer=tok.json --set train.max_steps=60 -o t
    grep -q '"tokenizer"' t/model.safetensors || fail "no tokenizer in the model file"
    last=$(awk -F'\t' '$3 != "" { v = $3 } END { print v }' t/log.tsv)
    awk -v b="$last" 'BEGIN { exit !(b < 2.8) }' || fail "char model did not learn: $last"
fi
echo ok
