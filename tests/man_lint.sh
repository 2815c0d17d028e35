#!/bin/sh
# Every manual page renders cleanly: no mandoc warning (its style notes and
# the date and base-system remarks aside), no groff warning, and no
# alternating-font macro (.BR, .IR, ...) that carries a sentence, which both
# tools accept and render with its words glued together.  groff checks the
# UTF-8 terminal device, man's on Debian: the pages spell SentencePiece's
# \[u2581] and GPT-2's \[u0120], which the PostScript and ASCII devices lack.
srcdir=${TFM_SRCDIR:-$(dirname "$0")/..}
command -v mandoc >/dev/null 2>&1 || { echo "SKIP: no mandoc (Debian's mandoc)"; exit 77; }
command -v groff >/dev/null 2>&1 || { echo "SKIP: no groff (Debian's groff-base)"; exit 77; }
bad=0
for m in "$srcdir"/man/*.[1-9]; do
    out=$( { mandoc -T lint -W warning "$m" 2>&1 |
                 grep -v 'STYLE\|base system\|cannot parse date'
             LC_ALL=C.UTF-8 groff -ww -z -man -Tutf8 "$m" 2>&1
             awk '/^\.(BR|BI|IR|IB|RB|RI) / {
                      s = $0; gsub(/"[^"]*"/, "\"", s); n = split(s, w, / +/); run = 0
                      for (i = 2; i <= n; i++) {
                          run = w[i] ~ /^[A-Za-z][a-z]+[,.;:]?$/ ? run + 1 : 0
                          if (run == 3) {
                              printf "%s:%d: %s carries a sentence, whose words it glues together\n",
                                  FILENAME, FNR, w[1]; break } } }' "$m"; } 2>&1)
    [ -z "$out" ] && continue
    echo "$out"
    bad=1
done
[ $bad = 0 ] && echo "man pages: clean"
exit $bad
