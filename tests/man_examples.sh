#!/bin/sh
# Runs the EXAMPLES of every manual page in man/, so the documentation
# cannot drift from the programs.
#
# Convention for page authors: in the EXAMPLES section, each .EX/.EE (or
# .nf/.fi) block is shell.  If some lines start with "$ ", those (and their
# backslash continuations) are commands, and the lines after a command up to
# the next "$ " are its expected standard output, compared exactly;
# otherwise every line is a command whose output is not checked.  A block
# preceded by the comment line
#   .\" notest
# is shown but not run.  The blocks of one page run in order, with `sh -e`,
# in one scratch directory holding links to every file in testdata/ and
# corpus.txt (a few hundred lines of English); programs come from the build.
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/tokenize_lib.sh"
set -e
ls "$TFM_SRCDIR"/man/*.[1-9] >/dev/null 2>&1 || skip "no manual pages"

extract() {
    awk '
    function unescape(s) {
        gsub(/\\-/, "-", s); gsub(/\\\(aq/, "\047", s); gsub(/\\\(dq/, "\"", s)
        gsub(/\\\(ga/, "`", s); gsub(/\\\(ti/, "~", s); gsub(/\\\(ha/, "^", s)
        gsub(/\\\[u0120\]/, "\304\240", s)
        gsub(/\\&/, "", s); gsub(/\\e/, "\\", s)
        return s
    }
    # a command and the output it must print
    function flush() {
        if (cmd == "") return
        if (nexp == 0) print cmd
        else {
            print "cat >.expected <<\047TFM_EXPECTED\047"
            for (k = 1; k <= nexp; k++) print want[k]
            print "TFM_EXPECTED"
            print "{ " cmd "\n} >.got"
            print "diff .expected .got || { echo \"example output differs (- shown, + actual)\" >&2; exit 1; }"
        }
        cmd = ""; nexp = 0
    }
    /^\.SH/ { inex = ($0 ~ /EXAMPLES?"?[ \t]*$/); next }
    !inex { next }
    /^\.\\" *notest/ { skipnext = 1; next }
    /^\.(EX|nf)/ { inblk = 1; n = 0; prompt = 0; next }
    /^\.(EE|fi)/ {
        inblk = 0
        if (!skipnext) {
            if (!prompt) {
                for (i = 1; i <= n; i++) print lines[i]
            } else {
                cmd = ""; nexp = 0; cont = 0
                for (i = 1; i <= n; i++) {
                    l = lines[i]
                    if (cont) { cmd = cmd "\n" l; cont = (l ~ /\\$/); continue }
                    if (substr(l, 1, 2) == "$ ") {
                        flush()
                        cmd = substr(l, 3); cont = (cmd ~ /\\$/)
                    } else if (cmd != "") want[++nexp] = l
                }
                flush()
            }
            print ""
        }
        skipnext = 0
        next
    }
    inblk { if ($0 ~ /^\.\\"/) next; lines[++n] = unescape($0); if (substr(lines[n], 1, 2) == "$ ") prompt = 1 }
    ' "$1"
}

make_corpus corpus.txt
pages=0; blocks=0
for page in "$TFM_SRCDIR"/man/*.[1-9]; do
    name=$(basename "$page")
    extract "$page" >"$name.sh"
    [ -s "$name.sh" ] || continue
    mkdir "run.$name"
    (
        cd "run.$name"
        for f in "$TFM_SRCDIR"/testdata/*; do [ -e "$f" ] && ln -s "$f" .; done
        rm -f corpus.txt
        cp ../corpus.txt .
        if ! sh -e "../$name.sh" >../"$name.out" 2>&1; then
            echo "--- $name: examples failed; script:" >&2
            cat -n "../$name.sh" >&2
            echo "--- output:" >&2
            tail -n 30 "../$name.out" >&2
            exit 1
        fi
    ) || fail "EXAMPLES of $name"
    pages=$((pages + 1))
    blocks=$((blocks + $(grep -c '^$' "$name.sh")))
done
echo "ran $blocks example blocks from $pages manual pages"
