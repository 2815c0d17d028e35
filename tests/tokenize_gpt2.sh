#!/bin/sh
# With GPT-2's published vocabulary (a directory, as -t takes it), the
# program's ids equal the golden ids (OpenAI's tiktoken) for every case, as a
# whole document, through every output format, and decode gives the text back.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
dir=$(gpt2_dir) || skip "GPT-2 vocabulary not in testdata/"
gold=$(golden gpt2.tsv) || skip "testdata gpt2.tsv missing"
command -v python3 >/dev/null || skip "python3 needed to read the golden JSON strings"

# golden_check TOK SEP SEPID TSV...: cases without a newline become the
# lines of one file (per-line mode encodes each line as its own text); the
# others are joined by the special token SEP into one document encoded with
# --split-special, whose ids must be each case's golden ids joined by SEPID
# (a special token splits the text: spans on either side are encoded apart).
# Cases that contain SEP's text get a run each.  ROUNDTRIP=1: decode gives
# the text back.
golden_check() {
    tok=$1 sep=$2 sepid=$3; shift 3
    rm -f multi.* single.* lines.txt lines.ids
    python3 - "$sep" "$sepid" "$@" <<'PY'
import json, sys
sep, sepid = sys.argv[1].encode(), sys.argv[2]
lines, ids = open("lines.txt", "wb"), open("lines.ids", "w")
multi, multi_ids = [], []
i = 0
for path in sys.argv[3:]:
    for line in open(path, encoding="utf-8"):
        text, _, want = line.rstrip("\n").partition("\t")
        s = json.loads(text).encode("utf-8", "surrogatepass")
        open("case.%d" % i, "wb").write(s)
        if sep in s:
            open("single.%d" % i, "wb").write(s)
            open("single.%d.ids" % i, "w").write(want + "\n")
        elif b"\n" in s:
            multi.append(s)
            multi_ids.append(want)
        else:
            lines.write(s + b"\n")
            ids.write(want + "\n")
        i += 1
open("multi.txt", "wb").write(sep.join(multi))
open("multi.ids", "w").write((" %s " % sepid).join(w for w in multi_ids).replace("  ", " ").strip() + "\n")
print(len(multi), file=open("multi.n", "w"))
PY
    n=$(wc -l <lines.txt)
    $T encode -q -t "$tok" lines.txt >got
    if ! cmp -s got lines.ids; then
        diff lines.ids got | head -n 20 >&2
        fail "$tok: per-line ids differ from the golden ids"
    fi
    if [ "$ROUNDTRIP" = 1 ]; then
        $T decode -t "$tok" got >back
        cmp back lines.txt || fail "decode of the golden lines"
    fi
    $T encode -q -t "$tok" --document --split-special multi.txt >got
    if ! cmp -s got multi.ids; then
        tr ' ' '\n' <multi.ids >w; tr ' ' '\n' <got >g; diff w g | head -n 20 >&2
        fail "$tok: multi-line cases differ from the golden ids"
    fi
    if [ "$ROUNDTRIP" = 1 ]; then
        $T decode -t "$tok" got | head -c -1 >back   # decode ends the line with \n
        cmp -s back multi.txt || fail "decode of the multi-line cases"
    fi
    n=$((n + $(cat multi.n)))
    for f in single.*[0-9]; do
        [ -f "$f" ] || continue
        $T encode -q -t "$tok" --document "$f" >got
        cmp -s got "$f.ids" || fail "$f: want $(cat "$f.ids"), got $(cat got)"
        n=$((n + 1))
    done
    echo "$tok: $n golden cases agree"
}
set -- "$gold"
extra=$(golden extra.tsv) && set -- "$@" "$extra"
ROUNDTRIP=1 golden_check "$dir" '<|endoftext|>' 50256 "$@"
if bert=$(bert_vocab) && bgold=$(golden bert-uncased.tsv); then
    ROUNDTRIP=0 golden_check "$bert" '[SEP]' 102 "$bgold"
fi

# All cases at once as one document through npy equals the concatenated
# text's ids (cases end in arbitrary bytes, so compare decode instead).
cat case.*[0-9] >all.txt
$T encode -q -t "$dir" --document --format npy -o all.npy all.txt
$T decode -t "$dir" all.npy >back
cmp all.txt back || fail "npy round trip of all cases"
# uint16 for GPT-2's 50257 entries, 1-D
head -c 128 all.npy | grep -q "'descr': '<u2'" || fail "npy dtype is not <u2"

# the first known case through jsonl and pieces
printf 'Hello, world!' >h.txt
$T encode -q -t "$dir" --format jsonl h.txt >h.jsonl
[ "$(cat h.jsonl)" = '{"ids":[15496,11,995,0]}' ] || fail "jsonl: $(cat h.jsonl)"
$T encode -q -t "$dir" --format pieces h.txt >h.pieces
[ "$(cat h.pieces)" = 'Hello , Ġworld !' ] || fail "pieces: $(cat h.pieces)"
# GPT-2 --add-special ends each sequence with <|endoftext|>
$T encode -q -t "$dir" --add-special h.txt >h.ids
[ "$(cat h.ids)" = '15496 11 995 0 50256' ] || fail "add-special: $(cat h.ids)"
# special-token text is text unless --split-special
printf 'a<|endoftext|>b\n' >s.txt
$T encode -q -t "$dir" --split-special s.txt >s.ids
[ "$(cat s.ids)" = '64 50256 65' ] || fail "split-special: $(cat s.ids)"
$T encode -q -t "$dir" s.txt >s.ids
grep -qw 50256 s.ids && fail "<|endoftext|> split without --split-special"
# jsonl from encode decodes
$T decode -t "$dir" h.jsonl >h.back
[ "$(cat h.back)" = 'Hello, world!' ] || fail "decode of jsonl"
