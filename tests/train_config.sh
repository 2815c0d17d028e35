#!/bin/sh
# tfm-train's configuration: file:line:col errors, --set precedence,
# --dump-config round trip, usage errors, and the man page lists every key.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"

cat > bad.yaml <<END
model:
  n_layer: 2
optim:
  lerning_rate: 0.1
END
expect_fail 1 "tfm-train: bad.yaml:4:3: unknown key 'lerning_rate' (did you mean 'optim.lr'?)" \
    tfm-train -c bad.yaml
printf 'model:\n  n_head: four\n' > bad2.yaml
expect_fail 1 "bad2.yaml:2:11: 'model.n_head' must be an integer" tfm-train -c bad2.yaml
printf 'model: [1, 2\n' > bad3.yaml
expect_fail 1 "bad3.yaml:" tfm-train -c bad3.yaml
expect_fail 1 "nope.yaml" tfm-train -c nope.yaml
expect_fail 2 "unknown key 'optim.lrr' (did you mean 'optim.lr'?)" \
    tfm-train --dump-config --set optim.lrr=1
expect_fail 2 "Try" tfm-train --no-such-option
expect_fail 2 "--threads" tfm-train --threads 0 -c bad.yaml
expect_fail 2 "no configuration" tfm-train -o empty-run
# a new run without -c: the defaults and --set
make_corpus 200 | make_npy train.npy
tfm-train -q --set data.train=train.npy --set model.n_layer=1 --set model.n_embd=16 \
    --set model.block_size=16 --set train.batch_size=2 --set train.max_steps=2 -o noc ||
    fail "a new run with --set and no -c"
[ -f noc/model.safetensors ] || fail "no model from a run without -c"

# defaults < YAML < --set, in --set order
printf 'optim:\n  lr: 0.01\n  beta2: 0.95\n' > p.yaml
tfm-train -c p.yaml --set optim.lr=0.5 --set optim.lr=0.25 --seed 9 --dump-config > eff.yaml
grep -q '^  lr: 0.25 ' eff.yaml || fail "--set did not win: $(grep lr: eff.yaml)"
grep -q '^  beta2: 0.95 ' eff.yaml || fail "YAML did not beat the default"
grep -q '^  beta1: 0.9 ' eff.yaml || fail "default lost"
grep -q '^  seed: 9 ' eff.yaml || fail "--seed"
# the dump is a valid configuration that reproduces itself
tfm-train -c eff.yaml --dump-config > eff2.yaml
cmp eff.yaml eff2.yaml || fail "--dump-config does not round-trip"

# the example configurations are valid
for f in "$TFM_SRCDIR"/scripts/examples/*.yaml; do
    tfm-train -c "$f" --dump-config > /dev/null || fail "$f"
done

# every key of the schema is documented, with its default, in tfm-config(5)
man5="$TFM_SRCDIR/man/tfm-config.5"
tfm-train --list-keys > keys.tsv
# "key<TAB>default" per line (read(1) would merge empty fields)
awk -F'\t' '{ print $1 "\t" ($3 == "" ? "\"\"" : $3) }' keys.tsv > defaults.tsv
n=$(wc -l < defaults.tsv)
awk -F'\t' 'NR == FNR { def[".B " $1] = $2; next }
    ($0 in def) { k = $0; getline; if (index($0, "default \\fB" def[k] "\\fR")) ok[k] = 1 }
    END { for (k in def) if (!(k in ok)) { print "missing or wrong default: " k; bad = 1 }
          exit bad }' defaults.tsv "$man5" || fail "man/tfm-config.5 disagrees with --list-keys"
[ "$n" -gt 30 ] || fail "only $n keys listed"
# ... each key a paragraph of its own (.TP before it)
awk '/^\.B [a-z_]+\.[a-z_]+$/ { key = $2; prev_tp = (last == ".TP"); getline
        if (index($0, "; default \\fB") && !prev_tp) { print "no .TP before " key; bad = 1 } }
    { last = $0 } END { exit bad }' "$man5" || fail "man/tfm-config.5: a key runs into the one before"
# and documents nothing that does not exist
grep '^\.B [a-z_]*\.[a-z_]*$' "$man5" | sed 's/^\.B //' | while read -r key; do
    grep -q "^$key	" keys.tsv || fail "man/tfm-config.5 documents unknown key $key"
done
# every option of --help has an entry of its own in tfm-train(1) (a .TP
# naming it), and both pages format cleanly
man1="$TFM_SRCDIR/man/tfm-train.1"
awk '/^\.TP/ { getline; print }' "$man1" | sed 's/\\-/-/g' > entries.txt
tfm-train --help | sed -n 's/^ *\(-[a-zA-Z], \)\{0,1\}--\([a-z-]*\).*/\2/p' | while read -r opt; do
    grep -q -- "^\.B[IR]* \(-[a-zA-Z] \"\{0,1\}, \"\{0,1\} \)\{0,1\}--$opt\( \|\$\)" entries.txt ||
        fail "man/tfm-train.1: --$opt has no entry of its own"
done
for page in "$man1" "$man5"; do
    if command -v mandoc >/dev/null; then
        mandoc -T lint -W warning "$page" 2>&1 |
            grep -v 'STYLE\|base system\|cannot parse date' > lint.txt || true
        [ ! -s lint.txt ] || { cat lint.txt; fail "mandoc -T lint: $page"; }
    fi
    if command -v groff >/dev/null; then
        groff -ww -z -man "$page" > lint.txt 2>&1
        [ ! -s lint.txt ] || { cat lint.txt; fail "groff -ww: $page"; }
    fi
done

# Usage errors exit 2 with one error line (and the --help hint), --set's too
printf 'train: {max_steps: 3}\n' >s.yaml
expect_fail 2 "tfm-train: --set 'foo': expected key=value" tfm-train -c s.yaml --set foo
expect_fail 2 "tfm-train: --set: unknown key 'model.foo'" tfm-train -c s.yaml --set model.foo=1
for cmd in "tfm-train --bogus" "tfm-generate --bogus" "tfm-eval --bogus" "tfm-tokenize encode --bogus" \
           "tfm-generate -m"; do
    set +e; $cmd >/dev/null 2>err; rc=$?; set -e
    [ "$rc" -eq 2 ] && [ "$(wc -l <err)" -eq 2 ] && grep -q "^${cmd%% *}: .*option" err &&
        grep -q "^Try '${cmd%% *} --help'" err || fail "$cmd: exit $rc, '$(cat err)'"
done

# A write error is a message and exit 1, for every program
for cmd in "tfm-train --dump-config" "tfm-train --list-keys" "tfm-tokenize --help" \
           "tfm-eval --version" "tfm-generate --help"; do
    set +e; $cmd >/dev/full 2>err; rc=$?; set -e
    [ "$rc" -eq 1 ] && grep -q "^tfm-[a-z]*: <stdout>: write error" err ||
        fail "$cmd >/dev/full: exit $rc, '$(cat err)'"
done
echo "ok: $n keys"
