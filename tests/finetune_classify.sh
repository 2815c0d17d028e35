#!/bin/sh
# train.task classify (lib/train/task_classify.c) and tfm-eval classify:
# an encoder fine-tuned from a masked-LM pre-trained one (train.init: which
# tensors load, which are new, the tokenizer taken from it), a regression,
# a GPT decoder with the auxiliary LM loss and pairs read both ways; the
# predictions' formats, their metrics against tfm-eval score's, and every
# kind of bad input.
. "${TFM_SRCDIR:-..}/tests/finetune_lib.sh"

make_cls 4242 600 > train.tsv
make_cls 777 200 > test.tsv
cut -f2 train.tsv > corpus.txt
wordpiece corpus.txt tok.json
# the labels of a model guessing at random are right half the time
model='kind: encoder, n_layer: 1, n_head: 2, n_embd: 32, norm: post, activation: gelu_exact,
       segments: 2, emb_norm: true'
cat > pre.yaml <<END
model: {$model, block_size: 24, mlm_head: true}
data: {text: corpus.txt, tokenizer: tok.json, cls_id: 2, sep_id: 3, mask_id: 4}
optim: {lr: 0.003}
train: {task: mlm, batch_size: 8, max_steps: 20, eval_interval: 0, seed: 3}
END
tfm-train -q -c pre.yaml --threads 1 -o pre
cat > cls.yaml <<END
model: {$model, block_size: 24, pooler: true}
data: {text: train.tsv, val_fraction: 0.2}
optim: {lr: 0.003}
train: {task: classify, batch_size: 16, max_steps: 60, eval_interval: 30, seed: 1,
        init: pre/model.safetensors}
END
tfm-train -c cls.yaml --threads 1 -o run 2> train.err || { cat train.err >&2; fail "training"; }
# accuracy and macro F1 are log.tsv columns; train.best_by takes either
head -n 1 run/log.tsv | grep -q '	elapsed_s	val_accuracy	val_macro_f1$' ||
    fail "classify log.tsv header: $(head -n 1 run/log.tsv)"
awk -F'\t' 'NR > 1 && $3 != "" { n++; if (!($8 >= 0 && $8 <= 1 && $9 >= 0 && $9 <= 1)) bad = 1 }
    END { exit bad || n != 2 }' run/log.tsv || fail "classify log.tsv: accuracy/F1 columns"
tfm-train -q -c cls.yaml --threads 1 --set train.best_by=macro_f1 -o byf1
[ -f byf1/best.safetensors ] || fail "train.best_by macro_f1: no best.safetensors"
# the encoder and embeddings load; pooler and classifier are new; the MLM
# head stays behind; the tokenizer came from the pre-trained file
grep -qF "initialised from pre/model.safetensors: 17 tensors loaded; 4 new: pooler.dense.weight, pooler.dense.bias, classifier.weight, classifier.bias; 5 unused: cls.predictions.transform.dense.weight" train.err ||
    { cat train.err >&2; fail "init report"; }
# the architecture is the file's: a configuration that leaves it out gets
# it, one that contradicts it is refused naming the keys
expect_fail 1 "train.init pre/model.safetensors: model.n_head 4 (the file's: 2), model.norm pre (the file's: post), model.activation relu (the file's: gelu_exact): a model started from a file keeps the file's shape" \
    tfm-train -q -c cls.yaml --set model.n_head=4 --set model.norm=pre --set model.activation=relu -o bad
[ -e bad ] && fail "a refused init left bad/"
cat > bare.yaml <<END
model: {pooler: true}
data: {text: train.tsv}
train: {task: classify, batch_size: 16, max_steps: 2, eval_interval: 0, init: pre/model.safetensors}
END
tfm-train -c bare.yaml --threads 1 -o bare 2> bare.err || { cat bare.err >&2; fail "init from the file's shape"; }
grep -qF "17 tensors loaded; 4 new: pooler" bare.err || { cat bare.err >&2; fail "bare init report"; }
tfm-eval info -m bare/model.safetensors > bare.tsv
grep -qx "model_kind	encoder" bare.tsv && grep -qx "n_head	2" bare.tsv && grep -qx "norm	post" bare.tsv ||
    { cat bare.tsv >&2; fail "the file's shape not taken"; }
# pre-training's heads (MLM, NSP) are dropped by the task that follows it,
# with a note, even when its configuration still names them
tfm-train -q -c pre.yaml --threads 1 --set train.task=mlm+nsp --set data.documents=line \
    --set model.pooler=true --set model.nsp=true --set model.classes=2 --set train.max_steps=2 -o nsp
tfm-train -c pre.yaml --threads 1 --set train.task=mlm+nsp --set data.documents=line \
    --set model.pooler=true --set model.nsp=true --set model.classes=2 --set train.max_steps=2 \
    --set train.task=classify --set data.text=train.tsv --set data.tokenizer= \
    --set train.init=nsp/model.safetensors -o nspcls 2> nspcls.err ||
    { cat nspcls.err >&2; fail "classify after mlm+nsp"; }
grep -qF "train.task classify (nsp/model.safetensors was trained for mlm+nsp) drops the heads it does not use: model.mlm_head, model.nsp, model.classes (NSP's)" nspcls.err ||
    { cat nspcls.err >&2; fail "no note of the heads dropped"; }
grep -qF "2 labels: neg pos" nspcls.err || { cat nspcls.err >&2; fail "the classifier after NSP"; }
grep -qF "480 training examples (480 rows), 120 validation examples; 2 labels: neg pos" train.err ||
    fail "no data report"
at_least "$(field accuracy train.err)" 0.9 "validation accuracy"
tfm-eval info -m run/model.safetensors > info.tsv
grep -q "^tokenizer	wordpiece" info.tsv || fail "no tokenizer stored"
grep -qx 'task	{"labels":\["neg","pos"\],"pairs":false}' info.tsv || fail "labels: $(cat info.tsv)"
tfm-eval info -m pre/model.safetensors | grep -qx "task	-" || fail "a task for a pre-trained model"
# resuming repeats the batches and dropout bit for bit (the tokenizer
# still comes from train.init's file, as the stored configuration says)
for t in 1 2; do
    set -- -q -c cls.yaml --threads $t --set train.max_steps=30 --set model.dropout=0.1
    tfm-train "$@" -o b$t
    tfm-train "$@" -o c$t --steps 13
    tfm-train -q --threads $t -o c$t
    cmp b$t/model.safetensors c$t/model.safetensors || fail "resumed run differs ($t threads)"
done

# predictions: label<TAB>probability per example, in order
tfm-eval classify -m run/model.safetensors test.tsv > pred.tsv 2> eval.err
[ "$(wc -l < pred.tsv)" -eq 200 ] || fail "not one prediction per example"
awk -F'\t' 'NF != 2 || ($1 != "pos" && $1 != "neg") || $2 < 0.5 || $2 > 1 { exit 1 }' pred.tsv ||
    fail "bad prediction line: $(head -1 pred.tsv)"
cut -f1 test.tsv > gold.txt
cut -f1 pred.tsv > pred.txt
right=$(paste gold.txt pred.txt | awk -F'\t' '$1 == $2' | wc -l)
[ "$right" -ge 180 ] || fail "only $right of 200 test examples right"
grep -Eq "^tfm-eval: accuracy (0\.9[0-9]*|1\.0000) \($right/200\)" eval.err || { cat eval.err >&2; fail "metrics"; }
# --json: the same labels, then score's metrics object of these predictions
tfm-eval classify -q -m run/model.safetensors --json test.tsv > pred.jsonl
[ "$(grep -c '^{"line":' pred.jsonl)" -eq 200 ] || fail "JSON lines"
sed -n 's/.*"label":"\([a-z]*\)".*/\1/p' pred.jsonl | cmp -s - pred.txt || fail "JSON labels differ"
tfm-eval score -q --task classify --gold gold.txt --json pred.txt > score.json
[ "$(tail -1 pred.jsonl)" = "{\"metrics\":$(cat score.json)}" ] ||
    fail "metrics differ from score's: $(tail -1 pred.jsonl) vs $(cat score.json)"
# --top-k: the K likeliest labels; the first pair is the prediction, then in
# falling probability; all of a binary task's classes sum to 1
tfm-eval classify -q -m run/model.safetensors --top-k 2 test.tsv > top2.tsv
cut -f1,2 top2.tsv | cmp -s - pred.tsv || fail "--top-k 2: the first pair is not the prediction"
awk -F'\t' 'NF != 4 || $1 == $3 || $4 > $2 || ($2 + $4 - 1)^2 > 1e-10 { exit 1 }' top2.tsv ||
    fail "--top-k 2: $(head -1 top2.tsv)"
tfm-eval classify -q -m run/model.safetensors --top-k 9 test.tsv | cmp -s - top2.tsv ||
    fail "--top-k beyond the classes: not all of them"
tfm-eval classify -q -m run/model.safetensors --top-k 2 --json test.tsv > top2.jsonl
[ "$(grep -c '"top":\[{"label":"[a-z]*","probability":[0-9.e-]*},{"label"' top2.jsonl)" -eq 200 ] ||
    fail "--top-k --json: $(head -1 top2.jsonl)"
expect_fail 2 "--top-k is for classify" tfm-eval tag -m run/model.safetensors --top-k 2 test.tsv
# without gold labels: only predictions, the same ones; JSON Lines input too
cut -f2 test.tsv | tfm-eval classify -m run/model.safetensors > nogold.tsv 2> nogold.err
cmp -s nogold.tsv pred.tsv || fail "predictions depend on the gold labels"
[ -s nogold.err ] && fail "metrics without gold: $(cat nogold.err)"
perl -ne 'chomp; my ($l, $t) = split /\t/; print "{\"label\": \"$l\", \"text\": \"$t\"}\n"' \
    test.tsv > test.jsonl
tfm-eval classify -q -m run/model.safetensors test.jsonl | cmp -s - pred.tsv ||
    fail "JSON Lines input predicts otherwise"
# a blank input line gives a blank output line: output line N is input line N
{ echo; head -2 test.tsv; echo; sed -n 3p test.tsv; } > blank.tsv
tfm-eval classify -q -m run/model.safetensors blank.tsv > blank.out
{ echo; head -2 pred.tsv; echo; sed -n 3p pred.tsv; } | cmp -s - blank.out ||
    fail "blank input lines: output not aligned: $(cat blank.out)"

# bad input: one message naming the file and line, exit 1, nothing on stdout
{ head -2 test.tsv; printf 'maybe\tthe cat\n'; } > unknown.tsv
expect_fail 1 "tfm-eval: unknown.tsv:3: label 'maybe' is not one of the model's 2 labels (neg, pos)" \
    tfm-eval classify -m run/model.safetensors unknown.tsv
[ -s out.txt ] && fail "output after an error"
[ "$(wc -l < err.txt)" -eq 1 ] || fail "more than one message: $(cat err.txt)"
{ head -1 test.tsv; printf 'pos\ta\tb\tc\n'; } > bad.tsv
expect_fail 1 "tfm-eval: bad.tsv:2: 4 fields: expected [label<TAB>]text (the model reads one text)" \
    tfm-eval classify -m run/model.safetensors bad.tsv
{ head -1 test.jsonl; printf '{"label": "pos", "text": \n'; } > bad.jsonl
expect_fail 1 "tfm-eval: bad.jsonl:2:" tfm-eval classify -m run/model.safetensors bad.jsonl
{ head -1 test.tsv; printf 'pos\tun caf\351 noir\n'; } > latin1.tsv
expect_fail 1 "tfm-eval: latin1.tsv:2: invalid UTF-8" tfm-eval classify -m run/model.safetensors latin1.tsv
printf 'neg\ta\tb\n' > pair.tsv
expect_fail 1 "tfm-eval: pair.tsv:1: 3 fields: expected [label<TAB>]text (the model reads one text)" \
    tfm-eval classify -m run/model.safetensors pair.tsv
expect_fail 1 "pre/model.safetensors has no classifier head (a pre-trained model): fine-tune it with train.task classify first" \
    tfm-eval classify -m pre/model.safetensors test.tsv
expect_fail 2 "missing -m MODEL" tfm-eval classify test.tsv
# ... and in training: no run directory is left behind
{ head -5 train.tsv; printf 'pos\n'; } > badtrain.tsv
expect_fail 1 "tfm-train: badtrain.tsv:6: 1 field: expected label<TAB>text or label<TAB>text_a<TAB>text_b" \
    tfm-train -q -c cls.yaml --set data.text=badtrain.tsv -o bad
[ -e bad ] && fail "a failed start left bad/"
{ head -5 train.tsv; printf 'pos\ta\tb\n'; } > mixed.tsv
expect_fail 1 "mixed.tsv:6: two texts, but line 1 has one" \
    tfm-train -q -c cls.yaml --set data.text=mixed.tsv -o bad
expect_fail 1 "train.tsv:1: label 'pos' is not a number (a regression: model.classes 1)" \
    tfm-train -q -c cls.yaml --set model.classes=1 -o bad
expect_fail 1 "train.task classify with model.nsp true" \
    tfm-train -q -c cls.yaml --set model.nsp=true --set model.classes=2 -o bad
expect_fail 1 "data.train with train.task classify" \
    tfm-train -q -c cls.yaml --set data.train=x.npy -o bad

# sequences longer than the context: cut and counted, or an error
cat > long.yaml <<END
model: {$model, block_size: 6}
data: {text: train.tsv, tokenizer: tok.json}
train: {task: classify, batch_size: 8, max_steps: 2, eval_interval: 0, seed: 1}
END
tfm-train -c long.yaml --threads 1 -o cut 2> cut.err
n=$(sed -n 's/.*; \([0-9]*\) examples cut to 6 tokens (data.truncate head).*/\1/p' cut.err)
[ -n "$n" ] && [ "$n" -gt 100 ] || { cat cut.err >&2; fail "truncation not reported"; }
tfm-eval classify -m cut/model.safetensors test.tsv > /dev/null 2> cut2.err
grep -q "^tfm-eval: [0-9]* of 200 examples cut to the model's context of 6 tokens" cut2.err ||
    { cat cut2.err >&2; fail "tfm-eval does not report truncation"; }
long=$(awk -F'\t' '{ if (split($2, w, " ") > 4) { print NR; exit } }' train.tsv)
expect_fail 1 "train.tsv:$long:" tfm-train -q -c long.yaml --set data.truncate=error -o bad
grep -q "tokens, more than the model's context of 6 (data.truncate head cuts it)" err.txt ||
    fail "truncate error: $(cat err.txt)"

# regression: decimal labels make one (classes 1, mean squared error)
make_cls 99 500 regress > reg.tsv
make_cls 5 100 regress > regtest.tsv
tfm-train -c cls.yaml --threads 1 --set data.text=reg.tsv --set train.init= \
    --set data.tokenizer=tok.json --set train.max_steps=100 -o reg 2> reg.err ||
    { cat reg.err >&2; fail "regression training"; }
grep -q "; regression$" reg.err || { cat reg.err >&2; fail "not a regression"; }
at_least "$(field pearson reg.err)" 0.8 "validation Pearson"
tfm-eval classify -m reg/model.safetensors --json regtest.tsv > reg.jsonl 2> regeval.err
sed -n 's/.*"value":\([-0-9.e]*\).*/\1/p' reg.jsonl > regpred.txt
[ "$(wc -l < regpred.txt)" -eq 100 ] || fail "regression predictions"
cut -f1 regtest.tsv > reggold.txt
tfm-eval score -q --task regress --gold reggold.txt --json regpred.txt > regscore.json
# score reads the printed values, which round: the correlations agree closely
perl -e 'my ($a, $b) = @ARGV; $a =~ /"pearson":([-0-9.e]+)/; my $x = $1;
    $b =~ /"pearson":([-0-9.e]+)/; exit !(abs($x - $1) < 1e-6 && $x > 0.8)' \
    "$(tail -1 reg.jsonl)" "$(cat regscore.json)" || fail "regression metrics: $(tail -1 reg.jsonl)"

# GPT: a decoder classifies from its last token, with lambda 0.5 LM loss;
# pairs read in both orders (the cue is in the second text)
tfm-tokenize train --model bpe --vocab-size 300 -o bpe.json corpus.txt 2>/dev/null
make_cls 11 600 pairs > pairs.tsv
make_cls 12 100 pairs > pairtest.tsv
cat > gpt.yaml <<END
model: {kind: decoder, n_layer: 1, n_head: 2, n_embd: 32, block_size: 40}
data: {text: pairs.tsv, tokenizer: bpe.json, symmetric: true}
optim: {lr: 0.003}
train: {task: classify, batch_size: 16, max_steps: 80, eval_interval: 40, seed: 1}
END
tfm-train -c gpt.yaml --threads 1 -o gpt 2> gpt.err || { cat gpt.err >&2; fail "GPT training"; }
grep -qF "540 training examples (1080 rows), 60 validation examples" gpt.err ||
    { cat gpt.err >&2; fail "pairs are not read both ways"; }
at_least "$(field accuracy gpt.err)" 0.9 "GPT validation accuracy"
tfm-eval classify -m gpt/model.safetensors pairtest.tsv > gpt.tsv 2> gpteval.err
grep -Eq "^tfm-eval: accuracy (0\.9|1\.0)" gpteval.err || { cat gpteval.err >&2; fail "GPT test accuracy"; }
expect_fail 1 "test.jsonl:1: one text, but gpt/model.safetensors reads pairs of texts" \
    tfm-eval classify -m gpt/model.safetensors test.jsonl
# its training loss holds the LM term: without it the loss is far lower
tfm-train -q -c gpt.yaml --threads 1 --set train.lm_weight=0 --set train.max_steps=10 -o nolm
tfm-train -q -c gpt.yaml --threads 1 --set train.max_steps=10 -o lm
awk -F'\t' 'NR == FNR { if (FNR == 2) a = $2; next } FNR == 2 { exit !(a < $2 - 1) }' \
    nolm/log.tsv lm/log.tsv || fail "train.lm_weight changes nothing"

# LoRA over the fine-tuned classifier: the adapter carries the retrained
# head (PEFT's modules_to_save), and --adapter on the classifier predicts
# as the run's merged model; on the pre-trained model, which has no
# classifier, the head has nowhere to go.
tfm-train -q -c cls.yaml --threads 1 --set train.init=run/model.safetensors \
    --set train.lora.r=2 --set train.max_steps=20 -o lora
grep -q '"modules_to_save": \["classifier"\]' lora/adapter_config.json ||
    { cat lora/adapter_config.json; fail "LoRA classify: modules_to_save"; }
tfm-eval classify -q --threads 1 -m lora/model.safetensors test.tsv > merged.out
tfm-eval classify -q --threads 1 -m run/model.safetensors --adapter lora test.tsv > adapted.out
cmp merged.out adapted.out || fail "tfm-eval classify --adapter differs from the merged model"
tfm-eval classify -q --threads 1 -m run/model.safetensors test.tsv > plain.out
cmp -s plain.out adapted.out && fail "the adapter changed no prediction"
expect_fail 1 "tfm-eval: lora/adapter_model.safetensors: tensor 'base_model.model.classifier.weight' is no lora_A/lora_B and the base model has no 'classifier.weight' to replace" \
    tfm-eval classify -m pre/model.safetensors --adapter lora test.tsv
echo ok
