#!/bin/sh
# tfm-embed --search end to end: the nearest rows of stored vectors against
# cosines computed here (awk) from the same vectors as TSV, their order and
# line numbers, --search-text and jsonl, and the errors (usage 2, failures 1
# naming the file, no partial output).
set -eu
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
expect_msg() { grep -qF -- "$1" err || { cat err >&2; fail "expected message: $1"; }; }
E="tfm-embed -q --threads 1"
MK="$TFM_BUILDDIR/tests/mkmodel"

cat >corpus.txt <<'TXT'
the cat sat on the mat
the dog ate the bone
a bird sang in the tree
the cat ate the bird
a dog sat in the tree
the mat and the bone
TXT
for i in 1 2 3 4 5 6 7 8 9 10; do cat corpus.txt; done >c10.txt
tfm-tokenize train -q --model wordpiece --vocab-size 200 -o wp.json c10.txt
"$MK" bert.st --tokenizer wp.json --layers 2 --heads 2 --embd 16 --context 24 --scale 2 \
    --set model.kind=encoder --set model.segments=2 --set model.norm=post \
    --set model.emb_norm=true
$E -m bert.st -o corpus.npy corpus.txt
$E -m bert.st -f tsv corpus.txt >corpus.tsv
printf 'the cat\na bird in the tree\n' >queries.txt
$E -m bert.st -f tsv queries.txt >queries.tsv

# every row's cosine to each query, nearest first (ties: the lower row)
awk -F'\t' 'NR == FNR { n++; for (i = 1; i <= NF; i++) r[n, i] = $i; d = NF; next }
    { q++; for (j = 1; j <= n; j++) { ab = aa = bb = 0
        for (i = 1; i <= d; i++) { ab += $i * r[j, i]; aa += $i * $i; bb += r[j, i] * r[j, i] }
        printf "%d\t%d\t%.9f\n", q, j, ab / sqrt(aa * bb) } }' corpus.tsv queries.tsv |
    sort -t '	' -k1,1n -k3,3gr -k2,2n >want.tsv
$E -m bert.st --search corpus.npy --top 6 queries.txt >got.tsv
[ "$(wc -l <got.tsv)" -eq 12 ] || fail "--top 6 over 2 queries: $(wc -l <got.tsv) lines"
cut -f1,2 want.tsv >want.rows
cut -f1,2 got.tsv >got.rows
cmp -s want.rows got.rows || { paste want.tsv got.tsv >&2; fail "--search: rows not in cosine order"; }
paste want.tsv got.tsv | awk -F'\t' '{ d = $3 - $6; if (d < 0) d = -d; if (d > 1e-6) bad++ }
    END { exit bad > 0 }' || fail "--search: cosines differ from the vectors'"
# the default --top is 10 (all 6 rows here); --top 2 keeps the first two
[ "$($E -m bert.st --search corpus.npy queries.txt | wc -l)" -eq 12 ] || fail "default --top"
$E -m bert.st --search corpus.npy --top 2 queries.txt >top2.tsv
[ "$(cut -f1,2 top2.tsv)" = "$(awk -F'\t' '++k[$1] <= 2 { print $1 "\t" $2 }' got.tsv)" ] ||
    fail "--top 2 is not the first two of --top 6"
# each corpus line finds itself first, at cosine 1
$E -m bert.st --search corpus.npy --top 1 corpus.txt |
    awk -F'\t' '$1 != $2 || $3 < 0.999999 { bad++ } END { exit bad > 0 }' ||
    fail "a corpus line is not its own nearest row"

# --search-text: the row's line as the last column; jsonl
printf 'r1\nr2\nr3\nr4\nr5\nr6\n' >refs.txt
$E -m bert.st --search corpus.npy --top 6 --search-text refs.txt queries.txt >text.tsv
[ "$(cut -f2 text.tsv | sed 's/^/r/')" = "$(cut -f4 text.tsv)" ] || fail "--search-text column"
$E -m bert.st --search corpus.npy --top 1 --search-text corpus.txt -f jsonl queries.txt >j.jsonl
grep -q '^{"line":1,"row":[1-6],"cosine":[-0-9.e]*,"text":"[a-z ]*"}$' j.jsonl ||
    { cat j.jsonl >&2; fail "--search -f jsonl"; }
[ "$(wc -l <j.jsonl)" -eq 2 ] || fail "--search -f jsonl: one line a query"

# usage errors (2)
expect_exit 2 $E -m bert.st --top 3 queries.txt
expect_msg "--top and --search-text apply to --search"
expect_exit 2 $E -m bert.st --search corpus.npy --similarity queries.txt
expect_msg "--similarity, --matrix and --search exclude each other"
expect_exit 2 $E -m bert.st --search corpus.npy -f npy queries.txt
expect_msg "--search writes lines: --format tsv or jsonl"
expect_exit 2 $E -m bert.st --search corpus.npy --pool none queries.txt
expect_exit 2 $E -m bert.st --search corpus.npy --top 0 queries.txt
# failures (1): another width, not a matrix, a text of another length; no output file
expect_exit 1 $E -m bert.st --pool mean,max --search corpus.npy -o o.tsv queries.txt
expect_msg "corpus.npy: 16-wide vectors, but bert.st gives 32-wide ones (max,mean)"
[ ! -e o.tsv ] || fail "an output file after an error"
$E -m bert.st --similarity -f npy -o sim.npy <<'TXT'
a	b
TXT
expect_exit 1 $E -m bert.st --search sim.npy -o o.tsv queries.txt
expect_msg "sim.npy: a 1-D array: expected the float32 [N, D] vectors tfm-embed writes"
head -5 corpus.txt >five.txt
expect_exit 1 $E -m bert.st --search corpus.npy --search-text five.txt -o o.tsv queries.txt
expect_msg "five.txt has 5 lines but the vectors 6 rows"
[ ! -e o.tsv ] || fail "an output file after an error"
expect_exit 1 $E -m bert.st --search missing.npy queries.txt
expect_msg "missing.npy"
echo "embed_search: ok"
