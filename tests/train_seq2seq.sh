#!/bin/sh
# tfm-train on encoder-decoders: a tiny REVERSE task is learnt (the loss
# falls far below the uniform one), resuming is bit-exact with and without
# token-budget batches, the two-file form equals the TSV form, and bad
# parallel data is an error naming the file and line.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"

# Random strings of 3..8 letters from a..f and their reversal.
perl -e '
    my $s = 99;
    sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
    for (1 .. 600) {
        my $w = join "", map { chr(97 + r() % 6) } 1 .. 3 + r() % 6;
        print $w, "\t", scalar reverse($w), "\n";
    }' > pairs.tsv
cut -f 1 pairs.tsv > src.txt
cut -f 2 pairs.tsv > tgt.txt
tfm-tokenize train -q -m char --special '<pad>' --special '<s>' --special '</s>' \
    -o tok.json src.txt
cat > s2s.yaml <<END
model: {kind: encoder-decoder, n_layer: 2, n_head: 2, n_embd: 64, block_size: 12, norm: post,
        positions: sinusoidal, emb_scale: true, activation: relu}
data: {text: pairs.tsv, tokenizer: tok.json, val_fraction: 0.1}
optim: {type: adam, lr: 0.003, beta2: 0.98, weight_decay: 0}
schedule: {warmup: 20, decay: constant}
train: {batch_size: 16, max_steps: 150, eval_interval: 50, log_interval: 10, seed: 3,
        label_smoothing: 0.1}
END

# learning takes 600 steps with the paper's initialisation (seconds;
# minutes under the sanitizers, where the plain build has already checked
# it); GPT-2's plateaus for a varying number of steps before it learns
steps=600
[ -n "${TFM_SANITIZED:-}" ] && steps=60
tfm-train -c s2s.yaml --set train.max_steps=$steps --set train.eval_interval=300 \
    --set model.init=xavier -o learn \
    2> err.txt || { cat err.txt >&2; fail "training failed"; }
grep -q '540 training pairs' err.txt || { cat err.txt >&2; fail "no pair count"; }
grep -q '60 validation pairs' err.txt || { cat err.txt >&2; fail "no validation count"; }
# uniform over 9 ids is ln 9 = 2.2 and the letters alone give ~1.75; the
# task is deterministic, so a model that learnt it is far below (label
# smoothing 0.1 keeps it above ~0.5)
[ -n "${TFM_SANITIZED:-}" ] ||
    awk -F '\t' '$3 != "" { v = $3 } END { if (!(v < 1.1)) { print "val loss " v; exit 1 } }' \
        learn/log.tsv || fail "REVERSE not learnt"

tfm-train -q -c s2s.yaml -o a

# The two-file form reads the same pairs.
tfm-train -q -c s2s.yaml --set data.text= --set data.source=src.txt \
    --set data.target=tgt.txt -o b
cut -f 1-5 a/log.tsv > a.log
cut -f 1-5 b/log.tsv > b.log
cmp a.log b.log || fail "two files train differently from the TSV"

# Resuming is bit-exact, with random pairs and with token-budget batches.
for budget in 0 64; do
    rm -rf c d
    set -- -c s2s.yaml --threads 2 --set train.max_steps=40 --set train.max_tokens=$budget \
        --set model.dropout=0.1
    tfm-train -q "$@" -o c
    tfm-train -q "$@" -o d --steps 15
    tfm-train -q -o d --threads 2
    cmp c/model.safetensors d/model.safetensors || fail "resume differs (max_tokens $budget)"
done
cmp -s a/model.safetensors c/model.safetensors && fail "max_tokens changes nothing"

# Validation BLEU: the logged score is the corpus BLEU of tfm-generate's
# greedy translations of the validation sources by the same weights, and
# best.safetensors is the evaluation with the highest BLEU.
perl -e '
    my @w = qw(red green blue cat dog sun);
    my $s = 7;
    sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
    for (1 .. 200) {
        my @l = map { $w[r() % 6] } 1 .. 3 + r() % 6;
        print join(" ", @l), "\t", join(" ", reverse @l), "\n";
    }' > words.tsv
tr '\t' '\n' < words.tsv | tfm-tokenize train -q -m bpe -v 300 -o words.json
tfm-train -q -c s2s.yaml --set data.text=words.tsv --set data.tokenizer=words.json \
    --set train.max_steps=120 --set train.eval_interval=40 --set train.eval_bleu=true \
    --set train.best_by=bleu -o bleu
head -1 bleu/log.tsv | grep -q 'val_bleu$' || fail "no val_bleu column"
tail -20 words.tsv | cut -f 1 > val.src
tail -20 words.tsv | cut -f 2 > val.ref
tfm-generate -q -m bleu/model.safetensors --greedy < val.src > val.hyp
tfm-eval bleu --ref val.ref --json < val.hyp > bleu.json
awk -F '\t' 'NR > 1 && $3 != "" { b = $8 } END { print b }' bleu/log.tsv > logged.txt
perl -e '
    local $/; open my $f, "<", "bleu.json"; my $j = <$f>;
    my ($b) = $j =~ /"bleu":([0-9.eE+-]+)/ or die "no score in bleu.json\n";
    open $f, "<", "logged.txt"; my $l = <$f>;
    exit(abs($b - $l) < 0.006 ? 0 : 1)' || fail "logged BLEU $(cat logged.txt) is not tfm-eval's: $(cat bleu.json)"
best=$(awk -F '\t' 'NR > 1 && $3 != "" && (b == "" || $8 > b) { b = $8; s = $1 } END { print s }' \
    bleu/log.tsv)
tfm-eval info -m bleu/best.safetensors | grep -q "^step	$best\$" ||
    fail "best.safetensors is not the evaluation of highest BLEU (step $best)"

# Two tokenizers: the source side's is stored in the model file, and
# tfm-generate encodes sources with it (here its ids differ from the
# target tokenizer's: letters counted on reversed text order differently).
printf 'aaaaaabbbbbcccc\n' > skew.txt
cat src.txt >> skew.txt
tfm-tokenize train -q -m char --special '</s>' -o srctok.json skew.txt
tfm-train -q -c s2s.yaml --set data.source_tokenizer=srctok.json --set model.tie_source=false \
    --set train.max_steps=5 -o two
grep -q '"source_tokenizer"' two/model.safetensors || fail "no source_tokenizer stored"
head -3 src.txt | tfm-generate -q -m two/model.safetensors --greedy > two.out
[ "$(wc -l < two.out)" = 3 ] || fail "no translations with a source tokenizer"
# from train.init without data.tokenizer: the file's two tokenizers encode
# the pairs (and are stored again); another source tokenizer is refused
tfm-train -q -c s2s.yaml --set data.tokenizer= --set train.init=two/model.safetensors \
    --set train.max_steps=4 -o cont
grep -q '"source_tokenizer"' cont/model.safetensors || fail "train.init's source tokenizer lost"
tfm-train -o cont --dump-config | grep -q '^  tokenizer: two/model.safetensors ' ||
    fail "the stored data.tokenizer is not train.init"
tfm-train -q -o cont --set train.max_steps=6 || fail "no resume from train.init's tokenizers"
head -3 src.txt | tfm-generate -q -m cont/model.safetensors --greedy > cont.out
[ "$(wc -l < cont.out)" = 3 ] || fail "no translations after train.init"
expect_fail 1 "data.source_tokenizer tok.json is not the source tokenizer of train.init two/model.safetensors" \
    tfm-train -q -c s2s.yaml --set data.source_tokenizer=tok.json --set model.tie_source=false \
    --set train.init=two/model.safetensors -o e
# ... and ends them with the source tokenizer's end-of-text, as training and
# validation do: with end-of-text at another id on each side (here 3 and 0),
# the logged BLEU is still that of tfm-generate's translations.
tr '\t' '\n' < words.tsv | tfm-tokenize train -q -m bpe -v 300 --special '<pad>' \
    --special '<s>' --special '<x>' --special '</s>' -o wsrc.json
tfm-train -q -c s2s.yaml --set data.text=words.tsv --set data.tokenizer=words.json \
    --set data.source_tokenizer=wsrc.json --set model.tie_source=false \
    --set train.max_steps=120 --set train.eval_interval=120 --set train.eval_bleu=true -o twob
tfm-generate -q -m twob/model.safetensors --greedy < val.src > twob.hyp
tfm-eval bleu --ref val.ref --json < twob.hyp > twob.json
awk -F '\t' 'NR > 1 && $3 != "" { b = $8 } END { print b }' twob/log.tsv > twob.logged
perl -e '
    local $/; open my $f, "<", "twob.json"; my $j = <$f>;
    my ($b) = $j =~ /"bleu":([0-9.eE+-]+)/ or die "no score in twob.json\n";
    open $f, "<", "twob.logged"; my $l = <$f>;
    exit($l > 0 && abs($b - $l) < 0.006 ? 0 : 1)' ||
    fail "two tokenizers: logged BLEU $(cat twob.logged) is not tfm-generate's: $(cat twob.json)"
# --json: end-of-text is a term of every score (beam 1 is greedy), and ids
# and logprobs end with it when it ended the translation: they add up to it
tfm-generate -q -m twob/model.safetensors --json --greedy < val.src > jg
tfm-generate -q -m twob/model.safetensors --json --beam 1 --lenpen 0 < val.src > jb1
/usr/bin/python3 - jg jb1 <<'PY' || fail "--json: scores and end-of-text"
import json, sys
g = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
eos = {r["ids"][-1] for r in g + b if r["finish_reason"] == "eos"}
assert len(eos) == 1, "no end-of-text, or more than one: %s" % eos
for r, s in zip(g, b):
    assert r["ids"] == s["ids"] and abs(r["score"] - s["score"]) < 1e-4, (r, s)
    assert len(r["ids"]) == len(r["logprobs"]), r
    assert abs(sum(r["logprobs"]) - r["score"]) < 1e-4, r
    assert (r["finish_reason"] == "eos") == (r["ids"][-1:] == list(eos)), r
PY
expect_fail 1 'data.source_tokenizer with model.tie_source true' \
    tfm-train -c s2s.yaml --set data.source_tokenizer=srctok.json -o e

# Bad data: file and line named, exit 1, nothing left behind.
printf 'abc\tcba\nabd\n' > notab.tsv
expect_fail 1 'notab.tsv:2: no tab' tfm-train -c s2s.yaml --set data.text=notab.tsv -o e
[ -e e ] && fail "a failed start left its run directory"
printf 'abc\tcba\n\tx\n' > empty.tsv
expect_fail 1 'empty.tsv:2: empty source' tfm-train -c s2s.yaml --set data.text=empty.tsv -o e
printf 'abc\tcba\nab\t\n' > empty2.tsv
expect_fail 1 'empty2.tsv:2: empty target' tfm-train -c s2s.yaml --set data.text=empty2.tsv -o e
printf 'a\tb\tc\n' > tabs.tsv
expect_fail 1 'tabs.tsv:1: more than one tab' tfm-train -c s2s.yaml --set data.text=tabs.tsv -o e
head -5 src.txt > s5.txt
expect_fail 1 's5.txt:6: s5.txt ends here' tfm-train -c s2s.yaml --set data.text= \
    --set data.source=s5.txt --set data.target=tgt.txt -o e
printf 'abcdefabcdefabc\tx\n' > long.tsv
expect_fail 1 'long.tsv:1: the source has 15 tokens, more than the 11' \
    tfm-train -c s2s.yaml --set data.text=long.tsv --set data.truncate=error -o e
tfm-train -c s2s.yaml --set data.text=long.tsv --set data.val_fraction=0 \
    --set train.max_steps=2 -o f 2> err.txt
grep -q '1 sides cut to 11 tokens' err.txt || { cat err.txt >&2; fail "no truncation count"; }
tfm-tokenize train -q -m char -o nospecial.json src.txt
expect_fail 1 'no end-of-text token' tfm-train -c s2s.yaml --set data.tokenizer=nospecial.json -o e
expect_fail 1 'data.train with model.kind encoder-decoder' \
    tfm-train -c s2s.yaml --set data.train=x.npy -o e
expect_fail 1 'data.source and data.target go together' \
    tfm-train -c s2s.yaml --set data.text= --set data.source=src.txt -o e
expect_fail 1 'train.best_by bleu needs train.eval_bleu' \
    tfm-train -c s2s.yaml --set train.best_by=bleu -o e
setup_data
expect_fail 1 'parallel data is for encoder-decoders' \
    tfm-train -c run.yaml --set data.source=src.txt --set data.target=tgt.txt -o e
[ -e e ] && fail "a failed start left its run directory"
echo ok
