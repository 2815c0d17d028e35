#!/bin/sh
# BERT pre-training (train.task mlm, mlm+nsp; lib/train/task_mlm.c): the
# masked-LM loss falls, resuming repeats the masks bit for bit, the seed
# changes them, and configurations the task cannot run are refused; the
# same from text documents with whole-word masking, and bad text is one
# error naming its file and line.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data
# byte ids: 1, 2, 3 never occur in the text and serve as [CLS], [SEP], [MASK]
cat > mlm.yaml <<END
model: {kind: encoder, n_layer: 1, n_head: 2, n_embd: 16, block_size: 24, vocab_size: 128,
        norm: post, activation: gelu_exact, segments: 2, emb_norm: true, mlm_head: true,
        pooler: true, classes: 2, nsp: true}
data: {train: train.npy, val: val.npy, cls_id: 1, sep_id: 2, mask_id: 3, n_special: 4}
optim: {lr: 0.01, weight_decay: 0.01}
schedule: {warmup: 5, decay: linear}
train: {task: mlm+nsp, batch_size: 4, max_steps: 60, eval_interval: 20, eval_batches: 4,
        log_interval: 5, seed: 7, short_seq_prob: 0.2}
END
tfm-train -q -c mlm.yaml --threads 1 -o a
first=$(awk -F'\t' 'NR > 1 && $3 != "" { print $3; exit }' a/log.tsv)
last=$(awk -F'\t' 'NR > 1 && $3 != "" { v = $3 } END { print v }' a/log.tsv)
# ln 128 = 4.85 at the start; the first evaluation is at step 20
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f && l < 3.5) }' ||
    fail "validation MLM loss did not fall: $first -> $last"
# every validation metric is a column of log.tsv (appended after the old ones)
head -n 1 a/log.tsv | grep -qx 'step	train_loss	val_loss	lr	grad_norm	tokens_per_s	elapsed_s	val_masked_accuracy	val_nsp_accuracy' ||
    fail "mlm+nsp log.tsv header: $(head -n 1 a/log.tsv)"
awk -F'\t' 'NR > 1 && $3 != "" && !($8 >= 0 && $8 <= 1 && $9 >= 0 && $9 <= 1) { bad = 1 }
    END { exit bad }' a/log.tsv || fail "masked or NSP accuracy outside 0..1"
# train.best_by any of them; one the task does not report is named, with the valid ones
tfm-train -q -c mlm.yaml --threads 1 --set train.max_steps=20 --set train.best_by=nsp_accuracy -o bn
[ -f bn/best.safetensors ] || fail "train.best_by nsp_accuracy: no best.safetensors"
expect_fail 1 "train.best_by accuracy: train.task mlm+nsp does not report it; its validation metrics: loss, masked_accuracy, nsp_accuracy" \
    tfm-train -q -c mlm.yaml --set train.best_by=accuracy -o bx
[ ! -e bx ] || fail "a refused best_by left a run directory"
for t in 1 2; do
    rm -rf b c
    tfm-train -q -c mlm.yaml --threads $t --set train.max_steps=40 -o b
    tfm-train -q -c mlm.yaml --threads $t --set train.max_steps=40 -o c --steps 17
    tfm-train -q --threads $t -o c
    cmp b/model.safetensors c/model.safetensors || fail "resumed MLM run differs ($t threads)"
done
# dropout and the masks both come from saved streams
rm -rf b c
set -- --threads 2 --set train.max_steps=30 --set model.dropout=0.1 --set train.task=mlm \
    --set model.pooler=false --set model.classes=0 --set model.nsp=false
tfm-train -q -c mlm.yaml "$@" -o b
tfm-train -q -c mlm.yaml "$@" -o c --steps 11
tfm-train -q --threads 2 -o c
cmp b/model.safetensors c/model.safetensors || fail "resumed MLM run with dropout differs"
tfm-train -q -c mlm.yaml "$@" --seed 9 -o d
cmp -s b/model.safetensors d/model.safetensors && fail "the seed changes nothing"

# fine-tuning starts from the pre-trained weights (train.init): the heads
# the new model lacks are reported unused, and it starts where a left off
set -- -c mlm.yaml --threads 1 --set train.task=mlm --set model.pooler=false \
    --set model.classes=0 --set model.nsp=false --set train.max_steps=1 --set train.log_interval=1
tfm-train "$@" --set train.init=a/model.safetensors -o f 2> f.err
grep -qF "initialised from a/model.safetensors: 22 tensors loaded; 0 new; 4 unused: pooler.dense.weight, pooler.dense.bias, cls.seq_relationship.weight, cls.seq_relationship.bias" f.err ||
    { cat f.err >&2; fail "no init report"; }
tfm-train -q "$@" -o g
awk -F'\t' 'NR == FNR { if (FNR == 2) s = $2; next } FNR == 2 { exit !($2 < s - 1) }' \
    g/log.tsv f/log.tsv || fail "the initialised run does not start lower than a fresh one"
expect_fail 1 "train.init" tfm-train -q "$@" --set train.init=nothere.safetensors -o h
[ -e h/model.safetensors ] && fail "a failed init wrote a model"

# what the task cannot run
expect_fail 1 "train.task mlm+nsp needs model.kind encoder" \
    tfm-train -q -c mlm.yaml --set model.kind=decoder --set model.segments=0 -o e
expect_fail 1 "train.task mlm needs model.mlm_head: true" \
    tfm-train -q -c mlm.yaml --set train.task=mlm --set model.classes=0 --set model.nsp=false \
    --set model.mlm_head=false -o e
expect_fail 1 "train.task mlm+nsp needs model.pooler: true, model.classes: 2" \
    tfm-train -q -c mlm.yaml --set model.pooler=false -o e
expect_fail 1 "train.task mlm needs the id of [MASK]: set data.mask_id" \
    tfm-train -q -c mlm.yaml --set data.mask_id=-1 -o e
expect_fail 1 "data.cls_id 500 is outside the vocabulary (size 128)" \
    tfm-train -q -c mlm.yaml --set data.cls_id=500 -o e
expect_fail 1 "exceed 1" tfm-train -q -c mlm.yaml --set train.random_token_prob=0.5 -o e
[ -e e/model.safetensors ] && fail "a refused run wrote a model"

# From text: documents of segments (a blank line after every fifth line) and
# a WordPiece tokenizer, whole words, next sentences
awk '{ print } NR % 5 == 0 { print "" }' corpus.txt > docs.txt
tfm-tokenize train -q -m wordpiece -v 80 -o wp.json docs.txt
cat > text.yaml <<END
model: {kind: encoder, n_layer: 1, n_head: 2, n_embd: 16, block_size: 24, norm: post,
        activation: gelu_exact, segments: 2, emb_norm: true, mlm_head: true,
        pooler: true, classes: 2, nsp: true}
data: {text: docs.txt, tokenizer: wp.json}
optim: {lr: 0.01, weight_decay: 0.01}
schedule: {warmup: 5, decay: linear}
train: {task: mlm+nsp, whole_word_mask: true, batch_size: 4, max_steps: 60, eval_interval: 20,
        eval_batches: 4, log_interval: 5, seed: 7}
END
tfm-train -c text.yaml --threads 1 -o t 2> t.err
grep -qF "72 documents (360 segments," t.err && grep -qF "8 documents (" t.err &&
    grep -qF "(masked LM of whole words + next sentence)" t.err ||
    { cat t.err >&2; fail "no document count in the start report"; }
first=$(awk -F'\t' 'NR > 1 && $3 != "" { print $3; exit }' t/log.tsv)
last=$(awk -F'\t' 'NR > 1 && $3 != "" { v = $3 } END { print v }' t/log.tsv)
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' ||
    fail "validation MLM loss on text did not fall: $first -> $last"
# resuming repeats pairs and masks bit for bit
for t in 1 2; do
    rm -rf b c
    tfm-train -q -c text.yaml --threads $t --set train.max_steps=30 -o b
    tfm-train -q -c text.yaml --threads $t --set train.max_steps=30 -o c --steps 13
    tfm-train -q --threads $t -o c
    cmp b/model.safetensors c/model.safetensors || fail "resumed text MLM run differs ($t threads)"
done
# one document a line; a separate validation file
head -n 40 corpus.txt > val.txt
tfm-train -q -c text.yaml --set data.documents=line --set data.val=val.txt \
    --set train.max_steps=5 -o l
# bad text: one message naming the program, the file (and line), no model
one_error() { # PATTERN KEY=VALUE
    expect_fail 1 "$1" tfm-train -q -c text.yaml --set "$2" -o e
    [ "$(wc -l < err.txt)" -eq 1 ] && grep -q '^tfm-train: ' err.txt ||
        { cat err.txt >&2; fail "not one tfm-train message: $1"; }
    [ -e e/model.safetensors ] && fail "a refused run wrote a model ($1)"
    return 0
}
printf '\n  \n' > empty.txt
one_error "tfm-train: empty.txt: no text (empty, or only blank lines)" data.text=empty.txt
printf 'the cat sat.\nthe dog ran.\n\nfish\n\nthe mat.\n' > short.txt
one_error "tfm-train: short.txt:4: a document of one token" data.text=short.txt
head -n 4 corpus.txt > single.txt
one_error "tfm-train: single.txt: one document: train.task mlm+nsp" data.text=single.txt
one_error "tfm-train: single.txt: one document: train.task mlm+nsp" data.val=single.txt
# a tokenizer without [MASK] (BERT's vocab.txt form)
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\n' > nomask.txt
one_error "tokenizer nomask.txt has no [MASK]: set data.mask_id" data.tokenizer=nomask.txt
# whole words need a tokenizer; documents need text
expect_fail 1 "train.whole_word_mask needs data.tokenizer" \
    tfm-train -q -c mlm.yaml --set train.whole_word_mask=true -o e
expect_fail 1 "data.documents is for data.text" \
    tfm-train -q -c mlm.yaml --set data.documents=line -o e
expect_fail 1 "train.whole_word_mask and data.documents are for train.task mlm" \
    tfm-train -q -c run.yaml --set train.whole_word_mask=true -o e
[ -e e/model.safetensors ] && fail "a refused run wrote a model"
# fill-mask (tfm-eval fill) with the text model: one line per mask, k
# token/probability pairs, probabilities in (0, 1] and descending, the same
# numbers in --json; a line without [MASK], a decoder: one message, exit 1.
# (tests/hf_bert.py checks the probabilities against PyTorch.)
printf 'the [MASK] sat on a mat.\n\n[MASK] cat and the [MASK].\n' > fill.txt
tfm-eval fill -m t --top-k 4 --threads 1 fill.txt > fill.tsv
awk -F'\t' 'BEGIN { want[1] = "1 1"; want[2] = "3 1"; want[3] = "3 2" }
    NF != 2 + 2 * 4 || want[NR] != $1 " " $2 { print "bad line " NR ": " $0; exit 1 }
    { s = 0
      for (i = 4; i <= NF; i += 2) {
          if (!($i > 0 && $i <= 1)) { print "probability out of (0, 1]: " $0; exit 1 }
          if (i > 4 && $i > $(i - 2)) { print "not descending: " $0; exit 1 }
          s += $i }
      if (s > 1.000001) { print "probabilities sum past 1: " $0; exit 1 } }
    END { if (NR != 3) { print NR " lines, want 3"; exit 1 } }' fill.tsv ||
    fail "tfm-eval fill output"
tfm-eval fill -m t -k 4 --json --threads 1 fill.txt > fill.json
python3 - fill.json fill.tsv <<'PY' || fail "tfm-eval fill --json differs from the TSV"
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
assert [o["line"] for o in objs] == [1, 3], objs
tsv = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
rows = [(o["line"], j + 1, m) for o in objs for j, m in enumerate(o["masks"])]
assert len(rows) == len(tsv)
for (line, j, m), t in zip(rows, tsv):
    assert [int(t[0]), int(t[1])] == [line, j]
    assert len(m["candidates"]) == 4
    for c, (tok, p) in zip(m["candidates"], zip(t[2::2], t[3::2])):
        assert c["token_str"] == tok and abs(c["score"] - float(p)) <= 6e-6 * c["score"], (c, tok, p)
PY
printf 'the [MASK] sat.\nno mask here.\n' > nomask_line.txt
expect_fail 1 "tfm-eval: nomask_line.txt:2: no mask token [MASK] in the text" \
    tfm-eval fill -m t nomask_line.txt
[ -s out.txt ] && fail "fill printed the lines before the bad one: it validates every line first"
expect_fail 2 "--top-k" tfm-eval fill -m t -k 0 fill.txt
tfm-train -q -c run.yaml --set train.max_steps=1 -o dec
expect_fail 1 "model.kind is decoder: fill-mask needs an encoder with a masked-LM head" \
    tfm-eval fill -m dec fill.txt
echo ok
