#!/bin/sh
# Bad input: the exact exit status (1 failure, 2 usage), one message naming
# the file (and line:col), and no output file or temporary left behind.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
make_corpus corpus.txt
$T train -q --model bpe --vocab-size 300 -o tok.json corpus.txt
mkdir o

no_output() {
    [ -z "$(ls -A o)" ] || { ls -la o >&2; fail "output left behind: $*"; }
}

# usage errors: exit 2, usage hint on stderr, nothing on stdout
expect_exit 2 $T
expect_exit 2 $T frobnicate
grep -q "unknown command 'frobnicate'" err || fail "unknown command message"
expect_exit 2 $T encode --no-such-option -t tok.json corpus.txt
grep -q "tfm-tokenize" err && grep -q -- "--help" err || fail "unknown option: no usage hint"
[ -s out ] && fail "usage error wrote to stdout"
# a typo of a long option gets a suggestion (as config keys do); a word
# close to nothing gets none
expect_exit 2 $T encode --tokenzer tok.json corpus.txt
grep -q "^tfm-tokenize: did you mean '--tokenizer'?$" err || fail "no suggestion: $(cat err)"
expect_exit 2 $T train --vocab-sise=300 corpus.txt
grep -q "^tfm-tokenize: did you mean '--vocab-size'?$" err || fail "no suggestion for --opt=value: $(cat err)"
expect_exit 2 $T encode --no-such-option -t tok.json corpus.txt
grep -q "did you mean" err && fail "a suggestion for a word close to nothing: $(cat err)"
expect_exit 2 $T encode -t tok.json --format yaml corpus.txt
expect_exit 2 $T encode -t tok.json --threads 0 corpus.txt
expect_exit 2 $T encode corpus.txt
grep -q -- "-t" err || fail "missing -t not explained"
expect_exit 2 $T train --model sentencepiece corpus.txt
expect_exit 2 $T train --model unigram --lowercase corpus.txt
expect_exit 2 $T train --vocab-size -5 corpus.txt
expect_exit 2 $T decode -t tok.json a b
# help and version: exit 0 on stdout
for c in train encode decode vocab; do
    $T $c --help | grep -q "Usage: tfm-tokenize $c" || fail "$c --help"
done
$T --help | grep -q "Usage:" || fail "--help"
$T --version | grep -q "tfm-tokenize (tfm)" || fail "--version"

# a missing input: exit 1, names the file, no output file
expect_exit 1 $T encode -q -t tok.json -o o/x.ids no-such-file.txt
grep -q "^tfm-tokenize: no-such-file.txt: No such file" err || { cat err >&2; fail "missing input message"; }
no_output "missing input"
# a missing tokenizer
expect_exit 1 $T encode -t no-such.json -o o/x.ids corpus.txt
grep -q "no-such.json" err || fail "missing tokenizer not named"
no_output "missing tokenizer"
# malformed JSON: file:line:col
printf '{\n  "version": "1.0",\n  "model": {"type": "BPE", "vocab": {"a": 0,, }}\n}\n' >bad.json
expect_exit 1 $T encode -t bad.json -o o/x.ids corpus.txt
grep -Eq "^tfm-tokenize: bad.json:[0-9]+:[0-9]+: " err || { cat err >&2; fail "malformed JSON without line:col"; }
[ "$(wc -l <err)" -eq 1 ] || { cat err >&2; fail "malformed JSON: more than one line"; }
no_output "malformed JSON"
# valid JSON, not a tokenizer
echo '[1, 2, 3]' >notok.json
expect_exit 1 $T vocab -t notok.json -o o/v.tsv
grep -q "notok.json" err || fail "non-tokenizer JSON not named"
no_output "non-tokenizer"
# an id out of range, in text (line:col) and in .npy
printf '1 2 3\n4 999999 5\n' >ids.txt
expect_exit 1 $T decode -t tok.json -o o/x.txt ids.txt
grep -q "^tfm-tokenize: ids.txt:2:3: id 999999 is outside the vocabulary (size 300)" err ||
    { cat err >&2; fail "id out of range message"; }
no_output "id out of range"
printf '1 2 x\n' >junk.txt
expect_exit 1 $T decode -t tok.json junk.txt
grep -q "junk.txt:1:5:" err || { cat err >&2; fail "junk id position"; }
# a truncated .npy
$T encode -q -t tok.json --document --format npy -o good.npy corpus.txt
head -c 100 good.npy >trunc.npy
expect_exit 1 $T decode -t tok.json -o o/x.txt trunc.npy
grep -q "trunc.npy" err || { cat err >&2; fail "truncated npy not named"; }
no_output "truncated npy"
# the output of a failed run in a later file is not left half-written
expect_exit 1 $T encode -q -t tok.json -o o/x.ids corpus.txt no-such-file.txt
no_output "second input missing"
# an existing output is not clobbered by a failed run
echo keep >o/keep.ids
expect_exit 1 $T encode -q -t tok.json -o o/keep.ids no-such-file.txt
[ "$(cat o/keep.ids)" = keep ] || fail "failed run clobbered its output"
rm o/keep.ids
# binary to a terminal is refused only on a tty; to a pipe it works
$T encode -q -t tok.json --format npy corpus.txt | head -c 6 | grep -q NUMPY || fail "npy to a pipe"
# -o naming a FIFO (or a device) writes into it: renaming over it would
# replace the device itself
mkfifo fifo
cat fifo >from-fifo &
$T encode -q -t tok.json -o fifo corpus.txt
wait
[ -p fifo ] || fail "-o replaced a FIFO"
$T encode -q -t tok.json corpus.txt | cmp - from-fifo || fail "-o FIFO content"
# -o naming a symbolic link follows it: the target gets the output and the
# link stays; a link to /proc/self/fd/1, and /dev/stdout, reach stdout
$T encode -q -t tok.json corpus.txt >want.ids
mkdir linked
echo old >linked/target.ids
ln -s linked/target.ids link.ids
$T encode -q -t tok.json -o link.ids corpus.txt
[ -L link.ids ] || fail "-o replaced a symbolic link"
cmp want.ids linked/target.ids || fail "-o through a link: target not written"
ln -s /proc/self/fd/1 self.ids
$T encode -q -t tok.json -o self.ids corpus.txt >r.ids
[ -L self.ids ] || fail "-o replaced a link to /proc/self/fd/1"
cmp want.ids r.ids || fail "-o link to /proc/self/fd/1: stdout empty"
{ echo head; $T encode -q -t tok.json -o /dev/stdout corpus.txt; echo tail; } >r2.ids
{ echo head; cat want.ids; echo tail; } | cmp - r2.ids || fail "-o /dev/stdout inside a redirection"
$T encode -q -t tok.json -o /dev/stdout corpus.txt | cmp - want.ids || fail "-o /dev/stdout to a pipe"
# A closed pipe (| head) ends the program quietly by SIGPIPE, as other
# filters; with SIGPIPE ignored it is a write error with a message, exit 1
for i in 1 2 3 4 5 6 7 8; do cat corpus.txt corpus.txt corpus.txt corpus.txt; done >big.txt
while [ "$(wc -c <big.txt)" -lt 400000 ]; do cat big.txt big.txt >big2.txt; mv big2.txt big.txt; done
{ st=0; $T encode -q -t tok.json big.txt 2>pipe.err || st=$?; echo $st >pipe.st; } | head -n 1 >/dev/null
[ "$(cat pipe.st)" = 141 ] || fail "| head: exit $(cat pipe.st), not SIGPIPE"
[ ! -s pipe.err ] || fail "| head: a message: $(cat pipe.err)"
(trap '' PIPE
 { st=0; $T encode -q -t tok.json big.txt 2>pipe.err || st=$?; echo $st >pipe.st; } | head -n 1 >/dev/null)
[ "$(cat pipe.st)" = 1 ] || fail "SIGPIPE ignored: exit $(cat pipe.st), not 1"
grep -q '^tfm-tokenize: <stdout>: write error: Broken pipe$' pipe.err ||
    fail "SIGPIPE ignored: no write error message: $(cat pipe.err)"
# invalid UTF-8 never crashes and round-trips through byte-level BPE
printf 'ok \377\376 bad \300\200 utf8 \355\240\200\n' >inv.txt
$T encode -q -t tok.json inv.txt >inv.ids
$T decode -t tok.json inv.ids >inv.back
cmp inv.txt inv.back || fail "invalid UTF-8 round trip"

# Results not asked for come with a warning (even with -q)
expect_exit 0 $T train -q --model bpe --vocab-size 10 corpus.txt
grep -q "^tfm-tokenize: warning: --vocab-size 10 is below the 257 tokens" err || fail "no --vocab-size warning"
: >empty.txt
expect_exit 0 $T train -q --model char empty.txt
grep -q "^tfm-tokenize: warning: the input is empty" err || fail "no empty-input warning"
expect_exit 0 env TFM_NUM_THREADS=abc $T train -q --model char corpus.txt
grep -q "^tfm-tokenize: warning: TFM_NUM_THREADS='abc' is not a thread count" err || fail "no TFM_NUM_THREADS warning"
expect_exit 0 $T train -q --model bpe --vocab-size 300 corpus.txt
[ ! -s err ] || fail "a warning without cause: $(cat err)"

# Raw bytes quoted from a bad file are escaped in the message, never sent
# to the terminal as they are
mkdir g2
printf '{"a": 0, "b": 1, "ab": 2}' >g2/encoder.json
printf '#version: 0.2\na b\n\001\033[31m\377 b\n' >g2/vocab.bpe
expect_exit 1 $T encode -t g2 corpus.txt
grep -qF "vocab.bpe:3: merge token '\\x01\\x1b[31m\\xff'" err || fail "bytes not escaped: $(cat err)"
[ "$(LC_ALL=C tr -d '\040-\176\n' <err | wc -c)" -eq 0 ] || fail "raw bytes in the message"

# One word of 2^24 equal bytes: merges would make a token longer than the
# 16 MiB limit; that pair is not merged (it reached an assertion)
head -c 16777216 /dev/zero | tr '\000' a >run.txt
expect_exit 0 $T train -q --model bpe --min-frequency 1 --vocab-size 400 -o run.json run.txt
rm run.txt

# A char model without <unk> drops characters it has no id for (as HF's
# BPE does), but says so, even with -q: "cbA" keeps 2 ids and a warning
printf 'abc\n' >abc.txt
$T train -q --model char --special '<s>' -o ch.json abc.txt
printf 'cbA\ncab\n' >cba.txt
expect_exit 0 $T encode -q -t ch.json cba.txt
[ "$(head -n 1 out | wc -w)" -eq 2 ] || fail "char model: $(cat out)"
grep -q "warning: 1 character not in the vocabulary.*'A' (U+0041)" err ||
    fail "no warning for a dropped character: $(cat err)"
expect_exit 0 $T encode -q -t ch.json abc.txt
[ ! -s err ] || fail "warning without a dropped character: $(cat err)"

# train's usage errors blame the option (exit 2), not the corpus; -o DIR
# is refused before the training (an unfinished output is never left)
printf 'some text to train on\nand more of it\n' > small.txt
expect_exit 2 $T train -q -m unigram -v 100 --special '' small.txt
grep -q -- "--special: a special token cannot be empty" err && ! grep -q small.txt err ||
    fail "--special '': $(cat err)"
expect_exit 2 $T train -q -m bpe --special '<a>' --special '<a>' small.txt
expect_exit 2 $T train -q -m unigram -v 400 --byte-fallback --user-symbols '<0x41>' small.txt
grep -q -- "--user-symbols: '<0x41>' is the name of a byte piece" err ||
    fail "--user-symbols '<0x41>': $(cat err)"
expect_exit 2 $T train -q -m unigram --user-symbols 'ab,ab' small.txt
expect_exit 2 $T train -q -m unigram --user-symbols '</s>' small.txt
mkdir outdir
: > slow.txt
i=0; while [ $i -lt 20000 ]; do echo "line $i of a text that takes a while"; i=$((i + 1)); done > slow.txt
expect_exit 1 $T train -m bpe -v 2000 -o outdir slow.txt
grep -q "outdir: is a directory" err && ! grep -q "trained\|reading" err ||
    fail "-o DIR is not refused before training: $(cat err)"
[ -z "$(ls outdir)" ] || fail "-o DIR: something was written into it"
exit 0
