#!/bin/sh
# Resuming is bit-exact: 60 steps in one go and 30 + restart + 30 give the
# same model files and the same log; killing mid-run keeps the last
# checkpoint loadable.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data
for t in 1 2; do
    rm -rf a b
    tfm-train -q -c run.yaml --threads $t --set train.max_steps=60 -o a
    tfm-train -q -c run.yaml --threads $t --set train.max_steps=60 -o b --steps 30
    grep -q '^30	' b/log.tsv || fail "no step 30 in the paused log"
    grep -q '^35	' b/log.tsv && fail "paused run went past step 30"
    # The run directory remembers its configuration: no -c needed.
    tfm-train -q --threads $t -o b
    cmp a/model.safetensors b/model.safetensors || fail "resumed weights differ ($t threads)"
    cmp a/best.safetensors b/best.safetensors || fail "resumed best differs ($t threads)"
    cut -f 1-5 a/log.tsv > a.log
    cut -f 1-5 b/log.tsv > b.log
    cmp a.log b.log || fail "resumed log differs ($t threads)"
    cp a.log a$t.log
done

# A pause mid-interval (log_interval 5, paused at 17): the resumed log's
# line at 20 averages steps 16-20, as the uninterrupted run's does.
rm -rf m
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=60 -o m --steps 17
grep -q '^17	' m/log.tsv && fail "a line at the pause's step 17"
tfm-train -q --threads 1 -o m
cut -f 1-5 m/log.tsv > m.log
cmp a1.log m.log || { diff a1.log m.log >&2; fail "the log after a mid-interval pause differs"; }

# With dropout the model's own random stream must be restored too.
rm -rf a2 b2
set -- --threads 1 --set train.max_steps=40 --set model.dropout=0.2 --set model.bias=false
tfm-train -q -c run.yaml "$@" -o a2
tfm-train -q -c run.yaml "$@" -o b2 --steps 17
tfm-train -q -o b2 --threads 1
cmp a2/model.safetensors b2/model.safetensors || fail "resume with dropout differs"

# A run with another seed differs (the comparison above can fail).
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=60 --seed 8 -o c
cmp -s a/model.safetensors c/model.safetensors && fail "the seed changes nothing"

# A seed chosen from the clock, with -q, is in the run's configuration:
# the run can be made again from it.
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=10 --set train.seed=-1 -o s1
seed=$(tfm-train -o s1 --dump-config | sed -n 's/^  seed: \([0-9]*\) .*/\1/p')
[ -n "$seed" ] || fail "no seed recorded: $(tfm-train -o s1 --dump-config | grep seed)"
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=10 --seed "$seed" -o s2
cmp s1/model.safetensors s2/model.safetensors || fail "the recorded seed $seed does not remake the run"

# Log lines beyond the checkpoint (left by a kill -9) are dropped on resume.
rm -rf d
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=60 -o d --steps 30
printf '45\t9\t\t0\t0\t0\t0\n' >> d/log.tsv
tfm-train -q -o d --threads 1
cut -f 1-5 d/log.tsv > d.log
cmp a1.log d.log || fail "stale log lines kept"

# Temporary files of an interrupted save are cleaned up.
echo partial > d/model.safetensors.tmp.AbCdEf
tfm-train -q -o d --threads 1
[ -e d/model.safetensors.tmp.AbCdEf ] && fail "stale temporary kept"

# Already finished: nothing to do, nothing changed.
cp a/model.safetensors before
tfm-train -q -o a
cmp before a/model.safetensors || fail "a finished run changed"
# ... but a larger max_steps extends it, with a warning: the schedule is
# redrawn over the new length (cosine from warmup 5 to 70: the rate at
# step 60 jumps from min_lr 0.001 back up), as the log shows
tfm-train -o a --set train.max_steps=70 --threads 1 2> ext.err
[ "$(tail -n 1 a/log.tsv | cut -f 1)" = 70 ] || fail "max_steps=70 did not extend the run"
grep -qF "warning: train.max_steps 70 (the run's: 60): the learning-rate schedule now runs to step 70, so at step 60 the rate goes from 0.001 to 0.0015" ext.err ||
    { cat ext.err >&2; fail "no warning on extending"; }
awk -F'\t' '$1 == 65 { p = (64 - 5) / 65; want = 0.001 + 0.0045 * (1 + cos(3.14159265358979 * p))
    exit !($4 > want * 0.999 && $4 < want * 1.001) }' a/log.tsv ||
    fail "the extended schedule is not cosine over 70 steps: $(grep '^65' a/log.tsv)"
# resuming with the same configuration warns of nothing
rm -rf e
tfm-train -q -c run.yaml --threads 1 -o e --steps 10
tfm-train -o e --threads 1 --steps 5 2> same.err
grep -q warning same.err && fail "a plain resume warns: $(cat same.err)"
echo ok
