#!/bin/sh
# Streaming and threads change nothing: ids with --threads 1, 2, 3 and with
# the input cut into many small rounds (TFM_ENCODE_CHUNK) equal the ids of
# one whole-input encode, per line and in --document mode, for byte-level
# BPE (GPT-2's vocabulary when present, else a trained one), WordPiece and char.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
make_corpus base.txt
# ~2 MB (~600 kB sanitized): the corpus over and over with whitespace runs
# of every length at the seams, so cut points fall on every kind of byte.
reps=20; [ "${TFM_SANITIZED:-0}" = 1 ] && reps=6
i=0
while [ $i -lt $reps ]; do
    cat base.txt
    printf 'seam %d%*s\n\n  \t \r\n' $i $((i % 7)) ''
    i=$((i + 1))
done >big.txt
sz=$(wc -c <big.txt)

toks="bpe"
$T train -q --model bpe --vocab-size 800 -o bpe.json base.txt
$T train -q --model wordpiece --vocab-size 800 -o wp.json base.txt
$T train -q --model char -o char.json base.txt
set -- bpe.json wp.json char.json
if dir=$(gpt2_dir); then set -- "$dir" "$@"; fi

for tok in "$@"; do
    for mode in "" --document; do
        # reference: one round holding the whole input, one thread
        TFM_ENCODE_CHUNK=$((sz + 1)) $T encode -q -t "$tok" $mode --threads 1 -o ref big.txt
        # many small rounds on one thread; parallel rounds on 2 and 3 threads
        for run in 1:4096 2:65536 3:333333; do
            th=${run%:*} chunk=${run#*:}
            TFM_ENCODE_CHUNK=$chunk $T encode -q -t "$tok" $mode --threads $th -o got big.txt
            cmp -s ref got || fail "$tok $mode: threads $th chunk $chunk differ"
        done
        # through a pipe (short reads, answers as lines arrive)
        TFM_ENCODE_CHUNK=65536 $T encode -q -t "$tok" $mode --threads 2 <big.txt >got
        cmp -s ref got || fail "$tok $mode: from a pipe differs"
        # npy: written in place, or spooled when stdout is a pipe
        TFM_ENCODE_CHUNK=$((sz + 1)) $T encode -q -t "$tok" $mode --format npy --threads 1 -o ref.npy big.txt
        TFM_ENCODE_CHUNK=4096 $T encode -q -t "$tok" $mode --format npy --threads 2 -o got.npy big.txt
        cmp -s ref.npy got.npy || fail "$tok $mode: npy in rounds differs"
        TFM_ENCODE_CHUNK=65536 $T encode -q -t "$tok" $mode --format npy --threads 2 big.txt | cat >got.npy
        cmp -s ref.npy got.npy || fail "$tok $mode: npy through a pipe differs"
    done
done
# a tokenizer that prefixes each text with a space (ByteLevel
# add_prefix_space, RoBERTa style) must not get one at every cut
sed 's/"add_prefix_space": *false/"add_prefix_space": true/g' bpe.json >prefix.json
[ "$(echo x | $T encode -q -t prefix.json)" = "$(echo ' x' | $T encode -q -t prefix.json)" ] ||
    fail "prefix.json does not add a prefix space"
$T encode -q -t prefix.json --document -o ref base.txt
TFM_ENCODE_CHUNK=100 $T encode -q -t prefix.json --document --threads 2 -o got base.txt
cmp -s ref got || fail "add_prefix_space tokenizer: chunked document differs"

echo "streaming and thread equality on $sz bytes for: $*"
