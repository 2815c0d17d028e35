#!/bin/sh
# T5's span corruption (train.task span-corruption; lib/train/task_spancorrupt.c)
# and tfm-train --dump-batches: the dumped sequences are valid JSON whose
# inputs and targets put back together are a window of the corpus, the loss
# of a few steps falls, a resumed run repeats bit for bit, and what the task
# cannot run is one clear error.  --dump-batches of a decoder's lm task too.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data
tfm-tokenize train -q -m unigram -v 60 --extra-ids 12 -o t5.json corpus.txt
cat > t5.yaml <<END
model: {kind: encoder-decoder, n_layer: 1, n_head: 2, n_embd: 32, block_size: 48}
data: {text: corpus.txt, tokenizer: t5.json}
optim: {lr: 0.01}
schedule: {warmup: 5, decay: cosine}
train: {task: span-corruption, batch_size: 8, max_steps: 60, eval_interval: 20,
        eval_batches: 4, log_interval: 5, seed: 3}
END

# the corpus as the task reads it, and the ids of the specials
tfm-tokenize encode -t t5.json --document corpus.txt > stream.txt
tfm-train -c t5.yaml --dump-batches 20 -o dumped > d.jsonl
[ ! -e dumped ] || fail "--dump-batches wrote a run directory"
[ "$(wc -l < d.jsonl)" = 20 ] || fail "--dump-batches 20 printed $(wc -l < d.jsonl) lines"
python3 - d.jsonl stream.txt t5.json <<'PY' || fail "span-corruption sequences"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
stream = [int(t) for t in open(sys.argv[2]).read().split()]
tok = json.load(open(sys.argv[3]))
text = " ".join(map(str, stream))
# sentinel ids by name, from the tokenizer file itself
ids = {}
def walk(o):
    if isinstance(o, dict):
        if isinstance(o.get("content"), str) and isinstance(o.get("id"), int):
            ids[o["content"]] = o["id"]
        for v in o.values():
            walk(v)
    elif isinstance(o, list):
        for v in o:
            walk(v)
walk(tok)
sent = [ids.get("<extra_id_%d>" % i) for i in range(12)]
assert None not in sent, "sentinels not found in the tokenizer: %s" % sent
assert sent == sorted(sent, reverse=True), "sentinels not numbered from the top down"
eos = ids["</s>"]
for r in rows:
    assert set(r) == {"input_ids", "input", "target_ids", "target"}, r.keys()
    x, y = r["input_ids"], r["target_ids"]
    # block_size 48 inputs: 52 raw tokens, 8 noise in 3 spans at 0.15 / 3:
    # 44 + 3 sentinels + EOS inputs, 3 sentinels + 8 + EOS targets
    assert len(x) == 48 and len(y) == 12, (len(x), len(y))
    assert x[-1] == eos and y[-1] == eos
    x, y = x[:-1], y[:-1]
    assert y[0] == sent[0], "targets start with <extra_id_0>"
    assert "<extra_id_2>" in r["input"] and r["target"].startswith("<extra_id_0>")
    assert r["input"].endswith("</s>") and r["target"].endswith("</s>")
    # each sentinel of the inputs, in order, expanded by its span
    spans, k = {}, None
    for t in y:
        if t in sent:
            k = t
            spans[k] = []
        else:
            spans[k].append(t)
    used = [t for t in x if t in sent]
    assert used == sent[:len(used)] and list(spans) == used, (used, list(spans))
    raw = []
    for t in x:
        raw += spans[t] if t in sent else [t]
    assert all(spans[s] for s in used), "an empty noise span"
    assert len(raw) == 52
    assert " " + " ".join(map(str, raw)) + " " in " " + text + " ", "not a window of the corpus"
assert len({tuple(r["input_ids"]) for r in rows}) == len(rows), "repeated sequences"
PY
# the same seed, the same sequences; another seed, others
tfm-train -c t5.yaml --dump-batches 20 > d2.jsonl
cmp d.jsonl d2.jsonl || fail "--dump-batches differs between two calls"
tfm-train -c t5.yaml --dump-batches 20 --seed 4 > d3.jsonl
cmp -s d.jsonl d3.jsonl && fail "--dump-batches: the seed changes nothing"

# a few steps: the validation loss falls
tfm-train -q -c t5.yaml --threads 1 -o a
# (ln 49 = 3.9 at the start: the training loss of the first steps, then the
# validation loss at steps 20, 40, 60)
start=$(awk -F'\t' 'NR == 2 { print $2 }' a/log.tsv)
first=$(awk -F'\t' 'NR > 1 && $3 != "" { print $3; exit }' a/log.tsv)
last=$(awk -F'\t' 'NR > 1 && $3 != "" { v = $3 } END { print v }' a/log.tsv)
awk -v s="$start" -v f="$first" -v l="$last" 'BEGIN { exit !(l < f && l < s - 1) }' ||
    fail "loss did not fall: $start (training, step 5) -> $first -> $last (validation)"
# resuming repeats the windows and masks
tfm-train -q -c t5.yaml --threads 1 -o b --steps 23
tfm-train -q --threads 1 -o b
cmp a/model.safetensors b/model.safetensors || fail "resumed span-corruption run differs"

# --dump-batches of other tasks: a decoder's lm on token files (no text)
tfm-train -c run.yaml --dump-batches 3 > lm.jsonl
python3 - lm.jsonl <<'PY' || fail "--dump-batches of lm"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3
for r in rows:
    assert r["input"] is None and r["target"] is None
    assert r["input_ids"][1:] == r["target_ids"][:-1] and len(r["input_ids"]) == 16
PY
expect_fail 2 "--dump-batches" tfm-train -c run.yaml --dump-batches 0

# what the task cannot run
printf 'a b c\n' > tiny.txt
tfm-tokenize train -q -m char --special '<pad>' --special '</s>' -o nosent.json corpus.txt
expect_fail 1 "nosent.json: no sentinel <extra_id_0>: train.task span-corruption needs 3 (one per noise span); tfm-tokenize train -m unigram --extra-ids 3 makes" \
    tfm-train -q -c t5.yaml --set data.tokenizer=nosent.json -o e
[ ! -e e ] || fail "a refused start left a run directory"
expect_fail 1 "no sentinel <extra_id_0>" tfm-train -c t5.yaml --set data.tokenizer=nosent.json \
    --dump-batches 1
expect_fail 1 "train.task span-corruption needs model.kind encoder-decoder" \
    tfm-train -q -c t5.yaml --set model.kind=decoder -o e
expect_fail 1 "data.train with train.task span-corruption: give the raw text as data.text" \
    tfm-train -q -c t5.yaml --set data.text= --set data.train=train.npy -o e
expect_fail 1 "model.block_size 2 is too short to corrupt" \
    tfm-train -q -c t5.yaml --set model.block_size=2 -o e
expect_fail 1 "fewer than the" \
    tfm-train -q -c t5.yaml --set data.text=tiny.txt -o e
expect_fail 1 "more than model.block_size" \
    tfm-train -q -c t5.yaml --set train.noise_density=0.9 -o e
echo ok
