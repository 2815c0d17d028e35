#!/bin/sh
# train.task tag (lib/train/task_tag.c) and tfm-eval tag: an encoder learns
# person and city entities on each word's first sub-token (a model tagging
# everything O, the majority, has entity F1 0); CoNLL and JSON predictions,
# their metrics against tfm-eval score's, truncated words, the tagger as
# the new head of an MLM-pretrained model, and bad input.
. "${TFM_SRCDIR:-..}/tests/finetune_lib.sh"

make_tags 7 400 > train.conll
make_tags 8 100 > test.conll
cut -f1 train.conll | tr '\n' ' ' > corpus.txt
wordpiece corpus.txt tok.json
model='kind: encoder, n_layer: 1, n_head: 2, n_embd: 32, block_size: 24, norm: post,
       activation: gelu_exact, segments: 2, emb_norm: true'
cat > tag.yaml <<END
model: {$model}
data: {text: train.conll, tokenizer: tok.json, val_fraction: 0.2}
optim: {lr: 0.003}
train: {task: tag, batch_size: 16, max_steps: 150, eval_interval: 50, seed: 1}
END
tfm-train -c tag.yaml --threads 1 -o run 2> train.err || { cat train.err >&2; fail "training"; }
grep -qF "320 training examples (320 rows), 80 validation examples; 4 tags: B-LOC B-PER I-PER O" \
    train.err || { cat train.err >&2; fail "data report"; }
at_least "$(field entity_f1 train.err)" 0.7 "validation entity F1"

# CoNLL out: word, probability, tag; a blank line after each sentence
tfm-eval tag -m run/model.safetensors test.conll > pred.conll 2> eval.err
[ "$(wc -l < pred.conll)" -eq "$(wc -l < test.conll)" ] || fail "not a line per word"
paste test.conll pred.conll | awk -F'\t' 'NF == 0 || $0 == "\t" { next }
    NF != 5 || $1 != $3 || $4 < 0 || $4 > 1 || $5 !~ /^(O|B-PER|I-PER|B-LOC)$/ { exit 1 }' ||
    fail "bad prediction lines: $(head -2 pred.conll)"
f1=$(sed -n 's/^tfm-eval: entities: F1 \([0-9.]*\),.*/\1/p' eval.err)
at_least "$f1" 0.7 "test entity F1"
# the metrics are score's of the same predictions
tfm-eval tag -q -m run/model.safetensors --json test.conll > pred.jsonl
[ "$(grep -c '^{"line":' pred.jsonl)" -eq 100 ] || fail "not a JSON line per sentence"
tfm-eval score -q --task tag --gold test.conll --json pred.conll > score.json
[ "$(tail -1 pred.jsonl)" = "{\"metrics\":$(cat score.json)}" ] ||
    fail "metrics differ from score's: $(tail -1 pred.jsonl) vs $(cat score.json)"
# JSON's tags are the CoNLL ones; words alone and JSON Lines input predict the same
perl -ne 'next unless /"tags":\[([^\]]*)\]/; print "$_\n" for map { s/"//gr } split /,/, $1;
    print "\n"' pred.jsonl > jtags.txt
cut -f3 pred.conll | cmp -s - jtags.txt || fail "JSON tags differ from the CoNLL ones"
cut -f1 test.conll | tfm-eval tag -m run/model.safetensors > nogold.conll 2> nogold.err
cmp -s nogold.conll pred.conll || fail "predictions depend on the gold tags"
[ -s nogold.err ] && fail "metrics without gold: $(cat nogold.err)"
perl -e 'local $/ = ""; while (<>) { my (@w, @t); for (split /\n/) { my ($a, $b) = split /\t/;
    push @w, "\"$a\""; push @t, "\"$b\"" } print "{\"tokens\": [", join(", ", @w),
    "], \"tags\": [", join(", ", @t), "]}\n" }' test.conll > test.jsonl
tfm-eval tag -q -m run/model.safetensors test.jsonl | cmp -s - pred.conll ||
    fail "JSON Lines input predicts otherwise"

# words past the context are tagged O, with probability 0, and counted
printf 'alice\tB-PER\nbob\tI-PER\nsat\tO\non\tO\nthe\tO\nmat\tO\nin\tO\nrome\tB-LOC\n' > long.conll
tfm-train -q -c tag.yaml --set model.block_size=6 --set train.max_steps=2 -o short
tfm-eval tag -m short/model.safetensors long.conll > cut.conll 2> cut.err
grep -q "^tfm-eval: 1 of 1 example cut to the model's context of 6 tokens" cut.err ||
    { cat cut.err >&2; fail "truncation not reported"; }
[ "$(tail -2 cut.conll | head -1)" = "rome	0	O" ] || fail "a cut word: $(tail -2 cut.conll)"

# the tagger is the new head of a pre-trained encoder
cat > pre.yaml <<END
model: {$model, mlm_head: true}
data: {text: corpus.txt, tokenizer: tok.json, cls_id: 2, sep_id: 3, mask_id: 4}
train: {task: mlm, batch_size: 8, max_steps: 5, eval_interval: 0, seed: 3}
END
tfm-train -q -c pre.yaml --threads 1 -o pre
tfm-train -c tag.yaml --set train.init=pre/model.safetensors --set data.tokenizer= \
    --set train.max_steps=1 -o init 2> init.err || { cat init.err >&2; fail "init"; }
grep -qF "initialised from pre/model.safetensors: 17 tensors loaded; 2 new: classifier.weight, classifier.bias; 5 unused" \
    init.err || { cat init.err >&2; fail "init report"; }

# the tagger is HF's BertForTokenClassification classifier.*; files written
# with its old name, token_classifier.* (model file and adapter, without
# their checksum), still load and predict the same
old_names() {
    perl -e 'local $/; my $d = <STDIN>; my $n = unpack("Q<", substr($d, 0, 8));
        my ($h, $b) = (substr($d, 8, $n), substr($d, 8 + $n));
        $h =~ s/"((?:base_model\.model\.)?)classifier\.(weight|bias)"/"$1token_classifier.$2"/g
            == 2 or die "no classifier.weight and .bias\n";
        $h =~ s/,"checksum":"[0-9a-f]*"// or die "no checksum\n";
        $h .= " " while length($h) % 8;
        print pack("Q<", length $h), $h, $b' < "$1" > "$2"
}
old_names run/model.safetensors old.safetensors
tfm-eval tag -q -m old.safetensors test.conll | cmp -s - pred.conll ||
    fail "a tagger with the old tensor names predicts otherwise"
# a sequence classifier of as many classes as the tagger's tags does not
# start from the tagger's classifier.* (the same name in HF, not the same head)
perl -e 'for (1 .. 40) { print qw(a b c d)[$_ % 4], "\tthe cat sat\n" }' > four.tsv
tfm-train -c tag.yaml --threads 1 --set train.task=classify --set data.text=four.tsv \
    --set data.tokenizer= --set train.init=run/model.safetensors --set train.max_steps=1 \
    -o cls4 2> cls4.err || { cat cls4.err >&2; fail "classify from a tagger"; }
grep -qF "2 new: classifier.weight, classifier.bias; 2 unused: classifier.weight, classifier.bias" \
    cls4.err || { cat cls4.err >&2; fail "a tagger's classifier started a sequence classifier"; }

# LoRA over the tagger: modules_to_save names HF's module
tfm-train -q -c tag.yaml --threads 1 --set train.init=run/model.safetensors \
    --set data.tokenizer= --set train.lora.r=2 --set train.max_steps=10 -o lora
grep -q '"modules_to_save": \["classifier"\]' lora/adapter_config.json ||
    { cat lora/adapter_config.json; fail "LoRA tag: modules_to_save"; }
tfm-eval tag -q --threads 1 -m lora/model.safetensors test.conll > merged.conll
tfm-eval tag -q --threads 1 -m run/model.safetensors --adapter lora test.conll > adapted.conll
cmp merged.conll adapted.conll || fail "tfm-eval tag --adapter differs from the merged model"
mkdir oldlora && cp lora/adapter_config.json oldlora/
old_names lora/adapter_model.safetensors oldlora/adapter_model.safetensors
tfm-eval tag -q --threads 1 -m run/model.safetensors --adapter oldlora test.conll |
    cmp -s - adapted.conll || fail "an adapter with the old tagger names predicts otherwise"

# over MPI, 2 ranks with 2 and 3 of 5 rows share the loss by their tagged
# words: the same curve as one process (summation order aside)
if [ -n "${TFM_MPIRUN:-}" ] && [ -z "${TFM_SANITIZED:-}" ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    set -- --threads 1 --set train.max_steps=10 --set train.log_interval=1 \
        --set train.batch_size=5 --set train.eval_interval=5
    tfm-train -q -c tag.yaml "$@" -o one
    timeout 120 "$TFM_MPIRUN" --oversubscribe -np 2 tfm-train -q -c tag.yaml "$@" -o two ||
        fail "2 ranks"
    # (each log's width from the header: the task's metrics follow the loss columns)
    paste one/log.tsv two/log.tsv | awk -F'\t' 'NR == 1 { w = NF / 2; next } { for (k = 2; k <= 3; k++) {
        d = $k - $(k + w); if (d < 0) d = -d; if (d > 1e-5 * ($k < 0 ? -$k : $k)) exit 1 } }' ||
        fail "2 ranks train otherwise than one process"
fi

# bad input: file and line, exit 1, nothing on stdout
{ head -3 test.conll; printf 'paris\tB-ORG\n\n'; } > unknown.conll
expect_fail 1 "tfm-eval: unknown.conll:4: tag 'B-ORG' is not one of the model's 4 tags" \
    tfm-eval tag -m run/model.safetensors unknown.conll
[ -s out.txt ] && fail "output after an error"
printf 'alice\tB-PER\nbob\n' > missing.conll
expect_fail 1 "tfm-eval: missing.conll:2: 1 column, but line 1 has 2" \
    tfm-eval tag -m run/model.safetensors missing.conll
printf '{"tokens": ["a", "b"], "tags": ["O"]}\n' > short.jsonl
expect_fail 1 "tfm-eval: short.jsonl:1:32: \"tags\" must be an array of 2 tags, one per token" \
    tfm-eval tag -m run/model.safetensors short.jsonl
{ head -3 test.conll; printf 'p\351ris\tB-LOC\n\n'; } > latin1.conll
expect_fail 1 "tfm-eval: latin1.conll:4: invalid UTF-8" tfm-eval tag -m run/model.safetensors latin1.conll
expect_fail 1 "tfm-train: latin1.conll:4: invalid UTF-8" \
    tfm-train -q -c tag.yaml --set data.text=latin1.conll -o bad
expect_fail 1 "tfm-eval: latin1.conll:4: invalid UTF-8" \
    tfm-eval score -q --task tag --gold latin1.conll test.conll
{ head -8 train.conll; printf 'cat\n'; } > badtrain.conll
expect_fail 1 "tfm-train: badtrain.conll:9: one column: expected word<TAB>tag" \
    tfm-train -q -c tag.yaml --set data.text=badtrain.conll -o bad
[ -e bad ] && fail "a failed start left bad/"
expect_fail 1 "train.task tag with model.kind decoder" \
    tfm-train -q -c tag.yaml --set model.kind=decoder --set model.segments=0 -o bad
expect_fail 1 "was fine-tuned with train.task tag, not classify" \
    tfm-eval classify -m run/model.safetensors test.conll
echo ok
