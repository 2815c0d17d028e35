#!/bin/sh
# scripts/examples/debian-de on two tiny catalogues made here with msgfmt:
# plurals, empty translations, format strings (%s, %1$s, %-10s, {0}, $VAR),
# newlines and tabs, long and short entries are dropped; whitespace is
# collapsed; a source in both catalogues is kept once, with the translation
# most catalogues give; the split follows the MD5 of the source, so the
# output does not depend on the order of the catalogues; too few pairs fail.
set -eu
command -v msgfmt >/dev/null || { echo "msgfmt is needed (Debian package gettext)"; exit 77; }
command -v msgunfmt >/dev/null || { echo "msgunfmt is needed (Debian package gettext)"; exit 77; }
command -v perl >/dev/null || { echo "perl is needed"; exit 77; }
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
X="$TFM_SRCDIR/scripts/examples/debian-de"

long=$(printf 'word %.0s' $(seq 30))      # 150 characters
cat > a.po <<PO
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

msgid "File not found"
msgstr "Datei nicht gefunden"

msgid "Permission   denied "
msgstr "Keine  Berechtigung"

msgid "Write error"
msgstr "Schreibfehler"

msgid "Read error"
msgstr "Lesefehler"

msgid "Show help"
msgstr "Hilfe anzeigen"

msgid "Compare files"
msgstr "Dateien vergleichen"

msgid "Disk full"
msgstr "Platte voll"

msgid "Untranslated entry"
msgstr ""

msgid "cannot open %s"
msgstr "%s kann nicht geöffnet werden"

msgid "%1\$s and %2\$s"
msgstr "%2\$s und %1\$s"

msgid "width %-10s here"
msgstr "Breite %-10s hier"

msgid "Delete {0} files"
msgstr "{0} Dateien löschen"

msgid "Set \$HOME first"
msgstr "Zuerst \$HOME setzen"

msgid "one file"
msgid_plural "many files"
msgstr[0] "eine Datei"
msgstr[1] "viele Dateien"

msgid "Usage: two\nlines"
msgstr "Aufruf: zwei\nZeilen"

msgid "a\ttab"
msgstr "ein\tTab"

msgid "$long"
msgstr "$long"

msgid "OK"
msgstr "OK"

msgid "Äpfel und Birnen"
msgstr "Äpfel und Birnen"
PO
cat > b.po <<PO
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

msgid "Write error"
msgstr "Fehler beim Schreiben"

msgid "Read error"
msgstr "Lesefehler"

msgid "Hard link"
msgstr "Harter Link"
PO
cat > c.po <<PO
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

msgid "Write error"
msgstr "Fehler beim Schreiben"
PO
for f in a b c; do msgfmt -o $f.mo $f.po || fail "msgfmt $f.po"; done

# Every pair in test, then every pair in train: the expected pairs, sorted.
"$X" -q --min-pairs 1 --test 100 --valid 0 -o all a.mo b.mo c.mo || fail "extractor failed"
[ ! -s all/train.tsv ] && [ ! -s all/valid.tsv ] || fail "--test 100 left pairs elsewhere"
printf '%s\t%s\n' \
    'Compare files' 'Dateien vergleichen' \
    'Disk full' 'Platte voll' \
    'File not found' 'Datei nicht gefunden' \
    'Hard link' 'Harter Link' \
    'Permission denied' 'Keine Berechtigung' \
    'Read error' 'Lesefehler' \
    'Show help' 'Hilfe anzeigen' \
    'Write error' 'Fehler beim Schreiben' \
    'Äpfel und Birnen' 'Äpfel und Birnen' | LC_ALL=C sort > want.tsv
LC_ALL=C sort all/test.tsv > got.tsv
diff want.tsv got.tsv || fail "kept pairs differ (want < > got)"

# The default split: every pair once, each in the split of its MD5 bucket
# (first 32 bits mod 100: 0-4 test, 5-9 valid), in MD5 order, whatever the
# order of the catalogues; twice the same bytes.
"$X" -q --min-pairs 1 -o s1 a.mo b.mo c.mo 2>err1 || fail "extractor failed"
"$X" -q --min-pairs 1 -o s2 c.mo b.mo a.mo 2>err2 || fail "extractor failed (reordered)"
for s in train valid test; do cmp s1/$s.tsv s2/$s.tsv || fail "$s.tsv depends on the catalogue order"; done
[ ! -s err1 ] || fail "-q printed: $(cat err1)"
cat s1/train.tsv s1/valid.tsv s1/test.tsv | LC_ALL=C sort | diff want.tsv - || fail "split lost or added pairs"
for s in train valid test; do
    S=$s perl -MDigest::MD5=md5 -ne '
        my ($src) = split /\t/;
        my $b = unpack("N", md5($src)) % 100;
        my $want = $b < 5 ? "test" : $b < 10 ? "valid" : "train";
        die "FAIL: \"$src\" in $ARGV, bucket $b belongs in $want\n" unless $want eq $ENV{S};
        push @h, md5($src);
        END { for (1 .. $#h) { die "FAIL: $ARGV not in MD5 order\n" if $h[$_ - 1] gt $h[$_] } }
    ' s1/$s.tsv || exit 1
done

# Counts on stderr without -q; too few pairs fail; a missing pinned file
# names its package.
"$X" --min-pairs 1 -o s3 a.mo 2>err || fail "extractor failed"
grep -q 'plural' err && grep -q 'format string' err && grep -q 'train .* valid .* test .* pairs' err ||
    fail "no counts on stderr: $(cat err)"
if "$X" --min-pairs 100 -o s4 a.mo 2>err; then fail "accepted 8 pairs with --min-pairs 100"; fi
grep -q 'fewer than --min-pairs 100' err || fail "no message for too few pairs: $(cat err)"
mkdir empty
if "$X" --locale-dir empty -o s5 2>err; then fail "accepted an empty locale directory"; fi
grep -q 'empty/coreutils.mo: skipped (Debian package coreutils)' err || fail "no package named: $(cat err)"
echo "ok"
