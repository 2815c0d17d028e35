#!/bin/sh
# scripts/examples/instructgpt at toy step counts: the data and its rule,
# pre-training, SFT, the reward model and its held-out accuracy, PPO and
# DPO from the SFT model, each model's answers scored, and the report: a
# row per model, win rates in [0, 1], PPO's samples logged.
set -eu
command -v make >/dev/null || { echo "make is needed"; exit 77; }
command -v python3 >/dev/null || { echo "python3 is needed"; exit 77; }
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
X="$TFM_SRCDIR/scripts/examples/instructgpt"

make -s -f "$X/Makefile" BIN="$TFM_BUILDDIR" OUT=ig QUICK=1 THREADS=1 PRE_STEPS=30 \
    SFT_STEPS=10 RM_STEPS=10 PPO_STEPS=8 DPO_STEPS=5 > report.out 2> make.err ||
    fail "the pipeline: $(cat make.err)"
grep -q '^tfm-eval: reward accuracy [0-9.]* ([0-9]*/300 pairs)' ig/report.tsv ||
    fail "no reward-model accuracy in the report: $(cat ig/report.tsv)"
awk -F'\t' 'NR > 2 && $1 != "sft" {
        n++
        for (i = 2; i <= 4; i++) if ($i !~ /^[0-9.]+$/ || $i < 0 || $i > 1) bad = 1
        if ($5 !~ /^-?[0-9.]+$/) bad = 1 }
    END { exit !(n == 2 && !bad) }' ig/report.tsv || fail "report: $(cat ig/report.tsv)"
# every sample of the PPO run's rollouts: 8 steps of 4 passes of 2 = 1 rollout of 32
n=$(tail -n +2 ig/ppo/samples.tsv | wc -l)
[ "$n" -eq 32 ] || fail "ppo/samples.tsv: $n samples, expected 32"
# the rule: a list of exactly N distinct category words
python3 - "$X" <<'PY' || fail "the rule misjudges"
import sys
sys.path.insert(0, sys.argv[1])
from listrule import score
assert score("List 2 animals:", " cat, dog") == 1
assert score("List 2 animals:", " cat, cat") == 0
assert score("List 3 animals:", " cat, dog") == 0
assert score("List 1 colors:", " red") == 1
assert score("List 1 colors:", " cat") == 0
PY
echo "instructgpt pipeline: $(grep -c . ig/report.tsv) report lines"
