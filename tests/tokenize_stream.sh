#!/bin/sh
# Streaming behaviour: memory does not grow with the input (per line,
# --document, npy; the peak the program reports from getrusage), and a line
# arriving alone through a pipe is answered before the next one is sent (no
# read-ahead lag), for encode and decode.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
make_corpus corpus.txt
$T train -q --model bpe --vocab-size 500 -o tok.json corpus.txt
# ASan keeps freed memory in quarantine; keep it small so RSS means something
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8"
export ASAN_OPTIONS

# Under ASan the peak also depends on thread timing (its allocator caches and
# quarantine): up to 22 MB apart between runs of the same input on a loaded
# machine.  So there the big input is larger and so is the allowance; keeping
# the input text or its ids would still add well over 60 MB.
mb=40 slack=16
[ "${TFM_SANITIZED:-0}" = 1 ] && mb=96 slack=32
rss() { # rss MB ARGS...: peak MB (from the summary) of encoding MB megabytes
    n=$1; shift
    yes "the quick brown fox, jumps over the  lazy dog	$n" | head -c "${n}000000" |
        $T encode -t tok.json --threads 2 "$@" 2>sum.txt >/dev/null
    sed -n 's/.*peak memory \([0-9]*\) MB$/\1/p' sum.txt | grep . || fail "no peak memory in: $(cat sum.txt)"
}
for args in "" "--document" "--document --format npy -o x.npy" "--format jsonl"; do
    small=$(rss $((mb / 8)) $args)
    big=$(rss $mb $args)
    # 8x the input may cost a few MB of allocator noise, not 8x the memory
    [ $((big - small)) -lt $slack ] ||
        fail "encode $args: peak memory grew from $small MB to $big MB with 8x the input"
done

# interactive: the first line's ids appear while the pipe is still open
mkfifo in
(
    exec 3>in
    echo "hello world" >&3
    i=0
    while [ ! -s out.txt ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    [ -s out.txt ] && touch answered
    echo "second line" >&3
) &
$T encode -q -t tok.json --threads 2 <in >out.txt
wait
[ -f answered ] || fail "the first line was not answered before the second was sent"
[ "$(wc -l <out.txt)" -eq 2 ] || fail "interactive: expected 2 lines of ids"

# the same for decode
rm -f in out.txt answered
mkfifo in
first=$(echo "hello world" | $T encode -q -t tok.json)
(
    exec 3>in
    echo "$first" >&3
    i=0
    while [ ! -s out.txt ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    [ -s out.txt ] && touch answered
    echo "$first" >&3
) &
$T decode -t tok.json <in >out.txt
wait
[ -f answered ] || fail "decode: the first line was not answered before the second was sent"
[ "$(cat out.txt)" = "$(printf 'hello world\nhello world')" ] || fail "decode: interactive output"
exit 0
