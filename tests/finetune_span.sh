#!/bin/sh
# train.task span (lib/train/task_span.c) and tfm-eval span: an encoder
# learns to point at the answer in contexts longer than its window (read in
# windows data.doc_stride apart; those without the answer point at [CLS]);
# TSV and JSON predictions with character offsets, their metrics against
# tfm-eval score's, answers in whole words, and bad input.
. "${TFM_SRCDIR:-..}/tests/finetune_lib.sh"

make_spans 11 300 > train.jsonl
make_spans 12 60 > test.jsonl
perl -ne 'print "$1 $2\n" if /"context": "([^"]*)", "question": "([^"]*)"/' train.jsonl > corpus.txt
wordpiece corpus.txt tok.json
cat > span.yaml <<END
model: {kind: encoder, n_layer: 2, n_head: 2, n_embd: 32, block_size: 24, norm: post,
        activation: gelu_exact, segments: 2, emb_norm: true}
data: {text: train.jsonl, tokenizer: tok.json, val_fraction: 0.2, doc_stride: 8}
optim: {lr: 0.003}
train: {task: span, batch_size: 16, max_steps: 150, eval_interval: 50, seed: 1}
END
tfm-train -c span.yaml --threads 1 -o run 2> train.err || { cat train.err >&2; fail "training"; }
# 24 positions hold [CLS] + 5 question tokens + [SEP] ... [SEP]: 16 context
# tokens a window, contexts of up to 43 words need several
rows=$(sed -n 's/.*240 training examples (\([0-9]*\) rows), 60 validation examples.*/\1/p' train.err)
[ -n "$rows" ] && [ "$rows" -gt 480 ] || { cat train.err >&2; fail "contexts not split into windows"; }
# a model that has not learned where the code is gets (nearly) none right
at_least "$(field squad_f1 train.err)" 80 "validation SQuAD F1"

tfm-eval span -m run/model.safetensors test.jsonl > pred.tsv 2> eval.err
[ "$(wc -l < pred.tsv)" -eq 60 ] || fail "not one answer per question"
awk -F'\t' 'NF != 2 || $2 > 0 { exit 1 }' pred.tsv || fail "bad line: $(head -1 pred.tsv)"
em=$(sed -n 's/^tfm-eval: exact match \([0-9.]*\), F1.*/\1/p' eval.err)
at_least "$em" 80 "test exact match"
# the gold answers as score reads them; the metrics are score's
perl -ne 'print "$1\n" if /"text": \["([^"]*)"\]/' test.jsonl > gold.ans
cut -f1 pred.tsv > pred.ans
tfm-eval span -q -m run/model.safetensors --json test.jsonl > pred.jsonl
tfm-eval score -q --task span --gold gold.ans --json pred.ans > score.json
[ "$(tail -1 pred.jsonl)" = "{\"metrics\":$(cat score.json)}" ] ||
    fail "metrics differ from score's: $(tail -1 pred.jsonl) vs $(cat score.json)"
# JSON: the id, and answer_start in characters where the context has the answer
perl -e 'open my $t, "<", $ARGV[0] or die; open my $p, "<", $ARGV[1] or die;
    while (my $x = <$t>) { my $y = <$p>; $x =~ /"id": "([^"]*)".*"context": "([^"]*)"/ or die;
        my ($id, $c) = ($1, $2);
        $y =~ /^\{"line":\d+,"id":"([^"]*)","answer":"([^"]*)","answer_start":(\d+),"score":/
            or die "bad line $y";
        $1 eq $id or die "id $1 for $id";
        substr($c, $3, length $2) eq $2 or die "$2 is not at $3 of $c" }' test.jsonl pred.jsonl ||
    fail "JSON answers"
# without answers: the same predictions, no metrics
perl -pe 's/, "answers": \{[^}]*\}//' test.jsonl > questions.jsonl
tfm-eval span -m run/model.safetensors questions.jsonl > nogold.tsv 2> nogold.err
cmp -s nogold.tsv pred.tsv || fail "predictions depend on the answers"
[ -s nogold.err ] && fail "metrics without answers: $(cat nogold.err)"
# a blank input line gives a blank output line: output line N is input line N
{ head -1 questions.jsonl; echo; sed -n 2p questions.jsonl; } > blank.jsonl
tfm-eval span -q -m run/model.safetensors blank.jsonl > blank.out
{ head -1 pred.tsv; echo; sed -n 2p pred.tsv; } | cmp -s - blank.out ||
    fail "blank input lines: output not aligned: $(cat blank.out)"
# SQuAD's own answer lists and a non-ASCII context: offsets count characters
printf '%s\n' '{"context": "caf\u00e9 code is red and then cat", "question": "what is the code?", "answers": [{"text": "red", "answer_start": 13}]}' > utf8.jsonl
tfm-eval span -q -m run/model.safetensors --json utf8.jsonl > utf8.out
head -1 utf8.out | grep -q '"answer":"red","answer_start":13,' || fail "character offsets: $(cat utf8.out)"
# answers are whole words of the context, as run_squad maps them back: a
# colour with more letters glued on (reddish: red ##d ##is ##h) is pointed
# at by its first pieces and answered whole, in the metrics too; a
# punctuation mark after the word stays out
q='"question": "what is the code?"'
for a in 'reddish then' 'greenland then' 'golden. then' 'red, then'; do
    w=${a%% *}; w=${w%[.,]}
    printf '{"context": "the cat sat and code is %s slept", %s, "answers": [{"text": "%s", "answer_start": 24}]}\n' \
        "$a" "$q" "$w"
done > words.jsonl
tfm-eval span -m run/model.safetensors words.jsonl > words.tsv 2> words.err
[ "$(cut -f1 words.tsv | tr '\n' ' ')" = "reddish greenland golden red " ] ||
    fail "answers not whole words: $(cut -f1 words.tsv | tr '\n' ' ')"
grep -q '^tfm-eval: exact match 100.00, F1 100.00 ' words.err || fail "whole-word metrics: $(cat words.err)"

# bad input: file and line, exit 1, nothing on stdout
{ head -2 test.jsonl; printf '%s\n' '{"context": "the code is red", "question": "q?", "answers": {"text": ["red"], "answer_start": [3]}}'; } > moved.jsonl
expect_fail 1 "tfm-eval: moved.jsonl:3:" tfm-eval span -m run/model.safetensors moved.jsonl
grep -qF 'answer 1: "red" is not at character 3 of the context (it has " co" there)' err.txt ||
    fail "answer_start message: $(cat err.txt)"
[ -s out.txt ] && fail "output after an error"
{ head -1 test.jsonl; printf '{"context": "the code", "question": \n'; } > broken.jsonl
expect_fail 1 "tfm-eval: broken.jsonl:2:" tfm-eval span -m run/model.safetensors broken.jsonl
printf '{"context": "the code is red"}\n' > noq.jsonl
expect_fail 1 "tfm-eval: noq.jsonl:1: needs a non-empty \"question\"" \
    tfm-eval span -m run/model.safetensors noq.jsonl
printf 'red\tthe code is red\n' > tsv.txt
expect_fail 1 "tfm-eval: tsv.txt:1: expected JSON Lines" tfm-eval span -m run/model.safetensors tsv.txt
{ head -3 train.jsonl; cat moved.jsonl; } > badtrain.jsonl
expect_fail 1 "tfm-train: badtrain.jsonl:6:" tfm-train -q -c span.yaml --set data.text=badtrain.jsonl -o bad
[ -e bad ] && fail "a failed start left bad/"
# without windows the contexts do not fit: an error when truncation is refused
expect_fail 1 "tokens, more than the 16 that fit beside the question (data.truncate head splits it into windows)" \
    tfm-train -q -c span.yaml --set data.truncate=error -o bad
expect_fail 2 "--max-answer is for span" tfm-eval classify -m run/model.safetensors --max-answer 3 test.jsonl
echo ok
