#!/bin/sh
# tfm-generate on encoder-decoders end to end: one translation a line in
# input order, batching changes nothing, --nbest and --json formats, the
# length limit, the speed summary, and bad input (a source past the
# encoder's context, invalid UTF-8, ids outside the source vocabulary, a
# model without end-of-text, usage errors).  The translations themselves
# are checked against PyTorch in tests/generate_seq2seq_torch.py.
set -eu
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
G="tfm-generate -q --threads 1"
MK="$TFM_BUILDDIR/tests/mkmodel"

printf 'the quick brown fox jumps over the lazy dog\n' >text.txt
"$MK" ed.st --text text.txt --layers 2 --heads 2 --embd 32 --context 16 --scale 3 --seed 7 \
    --set model.kind=encoder-decoder --set model.positions=sinusoidal --set model.norm=post
printf 'the fox\n\nlazy dog\nover\nquick brown\n' >src.txt
n=$(wc -l <src.txt)

# one line per source, in input order: the batch gives what each line alone gives
$G -m ed.st <src.txt >all
[ "$(wc -l <all)" -eq "$n" ] || fail "$(wc -l <all) lines for $n sources"
: >alone
while IFS= read -r line; do
    printf '%s\n' "$line" | $G -m ed.st >>alone
done <src.txt
cmp -s all alone || fail "batched translations differ from one at a time"
$G -m ed.st --batch 2 <src.txt >b2
cmp -s all b2 || fail "--batch 2 differs"
$G -m ed.st --prompt-file src.txt >pf
cmp -s all pf || fail "--prompt-file differs from stdin"
# the default is beam 4
$G -m ed.st --beam 4 <src.txt >beam4
cmp -s all beam4 || fail "the default is not --beam 4"
# --no-cache keeps the default beam (it used to switch to sampling with a
# clock seed), and recomputing every step gives the cached search's result
$G -m ed.st --no-cache <src.txt >nc
cmp -s all nc || fail "--no-cache changes the default decoding: $(cat nc)"
# (the same hypotheses; the decoder's whole-sequence pass rounds a little
# differently from its steps)
$G -m ed.st --nbest 3 --json --no-cache <src.txt >nc3
$G -m ed.st --nbest 3 --json <src.txt >c3
/usr/bin/python3 - c3 nc3 <<'PY' || fail "--beam 4 --nbest 3 --no-cache differs from the cached search"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == 5
for x, y in zip(a, b):
    assert len(x["nbest"]) == len(y["nbest"]) == 3
    for h, k in zip(x["nbest"], y["nbest"]):
        assert h["ids"] == k["ids"] and h["finish_reason"] == k["finish_reason"], (h, k)
        assert abs(h["score"] - k["score"]) < 1e-4, (h["score"], k["score"])
PY
$G -m ed.st --greedy <src.txt >g1
$G -m ed.st --greedy --batch 1 <src.txt >g2
cmp -s g1 g2 || fail "greedy: batching changes the output"

# --split-special: T5's sentinels (and BART's <mask>) in a source's text are
# their ids, as tfm-tokenize --split-special encodes them: the translation
# is that of those ids; without it they are ordinary text
printf 'thank you for inviting me to your party last week\nthe party was great\n' >t5.txt
tfm-tokenize train -q --model bpe --vocab-size 60 --special '<pad>' --special '</s>' \
    --special '<unk>' --special '<extra_id_0>' --special '<extra_id_1>' --special '<mask>' \
    -o t5tok.json t5.txt 2>/dev/null
"$MK" t5.st --tokenizer t5tok.json --layers 1 --heads 2 --embd 16 --context 64 --scale 3 \
    --set model.kind=encoder-decoder
seed='Thank you <extra_id_0> me to your party <extra_id_1> week'
for s in "$seed" 'the <mask> was great'; do
    ids=$(printf '%s\n' "$s" | tfm-tokenize encode -q -t t5tok.json --split-special)
    $G -m t5.st --json -n 5 --split-special "$s" | sed 's/^{"source":"[^"]*",//; s/"timings.*//' >sp
    $G -m t5.st --json -n 5 --ids "$ids" | sed 's/^{"source":"[^"]*",//; s/"timings.*//' >spids
    cmp -s sp spids || fail "--split-special '$s': $(cat sp) differs from its ids' $(cat spids)"
    grep -q "\"source_tokens\":$(($(echo "$ids" | wc -w) + 1))," sp || fail "--split-special: $(cat sp)"
    $G -m t5.st --json -n 5 "$s" | sed 's/^{"source":"[^"]*",//; s/"timings.*//' >nosp
    cmp -s sp nosp && fail "without --split-special '$s' reads the specials too"
done
expect_exit 2 $G -m t5.st --ids --split-special "1 2"

# --nbest: index, rank, score, text; the first of each is the 1-best
$G -m ed.st --nbest 3 <src.txt >nb
[ "$(wc -l <nb)" -eq $((3 * n)) ] || fail "--nbest 3: $(wc -l <nb) lines"
awk -F '\t' -v n="$n" '
    NF != 4 { print "fields: " $0; bad = 1 }
    $1 != int((NR - 1) / 3) + 1 || $2 != (NR - 1) % 3 + 1 { print "index/rank: " $0; bad = 1 }
    $2 > 1 && $3 > prev + 1e-9 { print "scores not sorted: " $0; bad = 1 }
    $3 !~ /^-?[0-9]+\.[0-9]+$/ { print "score: " $0; bad = 1 }
    { prev = $3 }
    END { exit bad }' nb || fail "--nbest format"
awk -F '\t' '$2 == 1 { print $4 }' nb >nb1
cmp -s nb1 all || fail "--nbest rank 1 differs from the 1-best"

# --json: strict JSON a line with the source and scores, the n-best inside
$G -m ed.st --json --nbest 2 <src.txt >j
/usr/bin/python3 - j src.txt <<'PY' || fail "--json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
srcs = open(sys.argv[2]).read().split("\n")[:-1]
assert [r["source"] for r in rows] == srcs, "sources out of order"
for r in rows:
    assert len(r["nbest"]) == 2 and r["nbest"][0]["text"] == r["text"], r
    assert r["nbest"][0]["score"] >= r["nbest"][1]["score"], r
    assert r["finish_reason"] in ("eos", "length"), r
    assert r["source_tokens"] == len(r["source"]) + 1, r  # characters + end-of-text
PY
$G -m ed.st --json --greedy <src.txt >jg
grep -q '"score":' jg || fail "greedy --json has no score"

# the empty line is the source "end-of-text" alone: still one line out
sed -n 2p j | grep -q '"source":"","source_tokens":1,' || fail "empty source: $(sed -n 2p j)"

# length: at most a·S + b tokens (S counts the end-of-text)
tfm-generate -q -m ed.st --json --greedy --max-len-a 0 --max-len-b 3 <src.txt >l3
/usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    assert len(r["ids"]) <= 3, r' l3 || fail "--max-len-b 3"
tfm-generate -q -m ed.st --json --greedy --max-len-a 0.5 --max-len-b 1 <src.txt >lh
/usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    assert len(r["ids"]) <= int(0.5 * r["source_tokens"] + 1), r' lh || fail "--max-len-a 0.5"

# stderr ends with sentences/s and tokens/s
tfm-generate --threads 1 -m ed.st <src.txt >/dev/null 2>err
tail -n 1 err | grep -Eq "^tfm-generate: $n sentences, .* [0-9.]+ sentences/s, [0-9.]+ tokens/s$" ||
    fail "summary: $(cat err)"

# a source longer than the encoder's context (16 tokens): cut, with a count...
printf 'the fox\nthe quick brown fox jumps over the lazy dog\n' >long.txt
tfm-generate --threads 1 -m ed.st <long.txt >cut 2>err
[ "$(wc -l <cut)" -eq 2 ] || fail "--truncate head: $(cat cut)"
grep -q "^tfm-generate: 1 source longer than the encoder's context (16 tokens) cut to it: 28 tokens dropped" err ||
    fail "--truncate head message: $(cat err)"
# ... the same as the source cut by hand (15 characters + end-of-text)
printf 'the fox\nthe quick brown\n' | $G -m ed.st >cut2
cmp -s cut cut2 || fail "a cut source differs from its head"
# ... or an error naming the line, with nothing printed
expect_exit 1 $G -m ed.st --truncate error --prompt-file long.txt
grep -q "^tfm-generate: long.txt:2: the source is 44 tokens (end-of-text included), longer than the encoder's context (16)$" err ||
    fail "--truncate error: $(cat err)"
[ ! -s out ] || fail "--truncate error printed a partial output"

# invalid UTF-8: the line is named
printf 'the fox\nbad \377 byte\n' >bad.txt
expect_exit 1 $G -m ed.st <bad.txt
grep -q "^tfm-generate: stdin:2: invalid UTF-8$" err || fail "invalid UTF-8: $(cat err)"
expect_exit 1 $G -m ed.st --prompt-file bad.txt
grep -q "^tfm-generate: bad.txt:2: invalid UTF-8$" err || fail "invalid UTF-8 file: $(cat err)"

# --ids: the line's ids, end-of-text appended; ids past the source vocabulary
V=$(tfm-generate -q -m ed.st --ids --greedy --json "3 4" | /usr/bin/python3 -c '
import json, sys; print(json.load(sys.stdin)["source_tokens"])')
[ "$V" -eq 3 ] || fail "--ids source of 2 ids has $V tokens"
expect_exit 1 $G -m ed.st --ids "3 999"
grep -q "^tfm-generate: source 1: '999' is not a token id below " err || fail "ids: $(cat err)"

# usage errors exit 2
expect_exit 2 $G -m ed.st --lenpen-style cubic "x"
expect_exit 2 $G -m ed.st --truncate tail "x"
expect_exit 2 $G -m ed.st --greedy --lenpen 1 "x"
expect_exit 2 $G -m ed.st --greedy --nbest 2 "x"

# a model without an end-of-text token cannot translate
"$MK" noeos.st --layers 1 --heads 2 --embd 16 --context 16 --vocab 20 \
    --set model.kind=encoder-decoder
expect_exit 1 $G -m noeos.st --ids "1 2"
grep -q "^tfm-generate: model.kind encoder-decoder needs an end-of-text token" err ||
    fail "no end-of-text: $(cat err)"
echo "ok"
