#!/bin/sh
# Text to text: data.prefix (T5's task prefix) goes before every source of
# an encoder-decoder and every input of a prefix LM of pairs, in the
# training batches and, read back from the model file, in tfm-generate's
# sources (--task-prefix overrides it); tfm-eval text scores outputs
# against references as worked out by hand; what cannot run is one clear
# error.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
make_corpus 300 | awk '{ sub(/\.$/, ""); print $0 "\t" $1 }' > pairs.tsv
cut -f1 pairs.tsv | sed "s/^/first word: /" > text.txt
tfm-tokenize train -q -m unigram -v 80 --extra-ids 4 -o t5.json text.txt
cat > ed.yaml <<END
model: {kind: encoder-decoder, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32,
        norm_type: rmsnorm, positions: t5, attn_scale: false, bias: false}
data: {text: pairs.tsv, tokenizer: t5.json, prefix: "first word: "}
optim: {lr: 0.01}
train: {batch_size: 8, max_steps: 30, eval_interval: 30, log_interval: 10, seed: 3}
END

# the batches: every source is the prefix and a first column, as one text
tfm-train -c ed.yaml --dump-batches 20 > d.jsonl
python3 - d.jsonl pairs.tsv <<'PY' || fail "data.prefix in the sources"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
src = {l.split("\t")[0] for l in open(sys.argv[2])}
assert len(rows) == 20
for r in rows:
    s = r["input"]
    assert s.endswith("</s>"), s
    assert s.startswith("first word: ") and s[12:-4] in src, s
PY
# a source's ids are those of the prefix and the line encoded as one text
head -1 d.jsonl | python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["input"][:-4])' |
    tfm-tokenize encode -q -t t5.json > want.txt
python3 - d.jsonl want.txt <<'PY' || fail "a prefixed source's ids"
import json, sys
ids = json.loads(open(sys.argv[1]).readline())["input_ids"]
want = [int(t) for t in open(sys.argv[2]).read().split()]
assert ids[:-1] == want, (ids, want)
PY

# tfm-generate reads the prefix from the model file
tfm-train -q -c ed.yaml --threads 1 -o ed
cut -f1 pairs.tsv | tail -5 > in.txt
tfm-generate -q -m ed/model.safetensors --greedy --json < in.txt > stored.jsonl
tfm-generate -q -m ed/model.safetensors --greedy --json --task-prefix 'first word: ' \
    < in.txt > given.jsonl
# (all but the timings)
sed 's/,"timings".*//' stored.jsonl > a.txt
sed 's/,"timings".*//' given.jsonl > b.txt
cmp a.txt b.txt || fail "the stored prefix is not the one given"
tfm-generate -q -m ed/model.safetensors --greedy --json --task-prefix '' < in.txt > none.jsonl
python3 - stored.jsonl none.jsonl in.txt t5.json <<'PY' || fail "tfm-generate's prefix"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
for x, y in zip(a, b):
    # the prefix's tokens and nothing else added; the printed source is the line
    assert x["source"] == y["source"]
    assert x["source_tokens"] > y["source_tokens"] + 2, (x, y)
PY

# a prefix LM of pairs: the same, its input before its end-of-text
cat > plm.yaml <<END
model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 40}
data: {text: pairs.tsv, tokenizer: t5.json, prefix: "first word: "}
optim: {lr: 0.01}
train: {task: prefix-lm, prefix_from: pairs, batch_size: 8, max_steps: 20,
        eval_interval: 20, log_interval: 10, seed: 3}
END
tfm-train -c plm.yaml --dump-batches 5 > p.jsonl
python3 - p.jsonl <<'PY' || fail "data.prefix in prefix-lm pairs"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    assert r["input"].startswith("first word: "), r["input"]
PY
tfm-train -q -c plm.yaml --threads 1 -o plm
tfm-generate -q -m plm/model.safetensors --greedy -n 3 --json < in.txt > ps.jsonl
tfm-generate -q -m plm/model.safetensors --greedy -n 3 --json --task-prefix '' < in.txt > pn.jsonl
python3 - ps.jsonl pn.jsonl <<'PY' || fail "tfm-generate's prefix on a prefix LM"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
for x, y in zip(a, b):
    assert x["prompt_tokens"] > y["prompt_tokens"] + 2, (x, y)
PY

# an input longer than the context is cut as a source is (--truncate)
perl -e 'print join(" ", ("the cat sat") x 30), "\n"' > long.txt
tfm-generate -m plm/model.safetensors --greedy -n 3 < long.txt > /dev/null 2> err.txt
grep -q "^tfm-generate: 1 input longer than the model's context (40 tokens) cut to it" err.txt ||
    { cat err.txt >&2; fail "a prefix LM's long input"; }
# cut to the whole context, it leaves no room for an answer: the answer is
# empty (finish length), in every strategy, and the lines around it are answered
printf 'the cat\n' > short.txt
cat short.txt long.txt short.txt > mixed.txt
for s in --greedy "--beam 2" "--seed 1"; do
    # shellcheck disable=SC2086
    tfm-generate -q -m plm/model.safetensors $s -n 3 --json --prompt-file mixed.txt > cut.jsonl
    python3 - cut.jsonl "$s" <<'PY' || fail "a prefix LM's input cut to the whole context ($s)"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert len(r) == 3, r
assert r[1]["prompt_tokens"] == 40 and r[1]["text"] == "" and r[1]["ids"] == [], r[1]
assert r[1]["finish_reason"] == "length", r[1]
assert r[0]["ids"] and r[2]["ids"], r
if "seed" not in sys.argv[2]:  # prompt i samples with seed + i
    assert r[0] == dict(r[2], timings=r[0]["timings"]), (r[0], r[2])
PY
done
expect_fail 1 "tfm-generate: long.txt:1: the input is 101 tokens (end-of-text included), longer than the model's context (40)" \
    tfm-generate -m plm/model.safetensors --greedy -n 3 --truncate error --prompt-file long.txt
# tfm-eval info says what kind of prefix LM it is
tfm-eval info -m plm/model.safetensors > info.tsv
grep -qx 'prefix_lm	true' info.tsv && grep -qx 'prefix_from	pairs' info.tsv ||
    { cat info.tsv >&2; fail "tfm-eval info of a prefix LM of pairs"; }
tfm-eval info --json -m plm/model.safetensors | grep -q '"prefix_lm":true,"prefix_from":"pairs"' ||
    fail "tfm-eval info --json of a prefix LM of pairs"

# tfm-eval text, worked by hand: exact 3 of 6 (" no " trimmed, "Yes" is not
# "yes"), SQuAD 4 of 6 (lowercased), labels yes/no: F1 1/2 and 2/3
printf 'yes\n no \nmaybe\nYes\nno\nyes\n' > hyp.txt
printf 'yes\nno\nno\nyes\nno\nno\n' > ref.txt
tfm-eval text -q --ref ref.txt hyp.txt > t.tsv
cut -f1-4,7-8 t.tsv > got.tsv
printf 'lines\texact\tsquad_em\tsquad_f1\tlabels\tf1_macro\n6\t50\t66.6667\t66.6667\t2\t58.3333\n' > want.tsv
cmp got.tsv want.tsv || { cat t.tsv >&2; fail "tfm-eval text's scores"; }
tfm-eval text -q --json --max-labels 0 --ref ref.txt < hyp.txt > t.json
python3 - t.json <<'PY' || fail "tfm-eval text --json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["lines"] == 6 and r["exact_count"] == 3 and r["labels"] == 0
assert r["f1_macro"] is None and abs(r["squad_f1"] - 200 / 3) < 1e-6
PY
# two references: a line matches either (lines 1, 2, 3, 5, 6)
printf 'yes\nyes\nmaybe\nyes\nno\nyes\n' > ref2.txt
tfm-eval text -q --json --ref ref.txt --ref ref2.txt hyp.txt > t2.json
grep -q '"exact_count":5' t2.json || fail "a second reference: $(cat t2.json)"

# what cannot run
expect_fail 1 "data.prefix is for pairs" \
    tfm-train -q -c ed.yaml --set train.task=span-corruption --set data.text=text.txt -o e
expect_fail 1 "data.prefix is for pairs" tfm-train -q -c plm.yaml --set train.prefix_from=random -o e
[ ! -e e ] || fail "a refused start left a run directory"
expect_fail 2 "--task-prefix is text put before text prompts, not --ids" \
    tfm-generate -m ed/model.safetensors --ids --task-prefix x 1 2
head -3 hyp.txt > short.txt
expect_fail 1 "ref.txt:4: one too many: short.txt has only 3 lines" tfm-eval text --ref ref.txt short.txt
expect_fail 2 "text: missing --ref FILE" tfm-eval text hyp.txt
expect_fail 2 "--max-labels is for text" tfm-eval bleu --ref ref.txt --max-labels 2 hyp.txt
expect_fail 2 "--lowercase and --sentence are for bleu and chrf" \
    tfm-eval text --ref ref.txt --lowercase hyp.txt
echo ok
