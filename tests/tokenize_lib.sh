# Shared by the tokenize_*.sh tests and man_examples.sh (sourced, not run).
# Sets: T (tfm-tokenize), work (a temporary directory removed at exit), and
# helpers to find test data and to build inputs.
set -u
: "${TFM_SRCDIR:=$(cd "$(dirname "$0")/.." && pwd)}"
. "$TFM_SRCDIR/tests/cli_lib.sh"
T=tfm-tokenize

# GPT-2's published vocabulary as a directory, if the tree carries it.
gpt2_dir() {
    for d in "$TFM_SRCDIR/testdata/gpt2" "$TFM_SRCDIR/testdata/vocab" "$TFM_SRCDIR/testdata"; do
        if [ -f "$d/encoder.json" ] && [ -f "$d/vocab.bpe" ]; then echo "$d"; return 0; fi
        if [ -f "$d/vocab.json" ] && [ -f "$d/merges.txt" ]; then echo "$d"; return 0; fi
    done
    return 1
}

bert_vocab() {
    for f in "$TFM_SRCDIR/testdata/bert-base-uncased-vocab.txt" \
             "$TFM_SRCDIR/testdata/bert/bert-base-uncased-vocab.txt" \
             "$TFM_SRCDIR/testdata/bert/vocab.txt"; do
        [ -f "$f" ] && { echo "$f"; return 0; }
    done
    return 1
}

golden() {
    for f in "$TFM_SRCDIR/testdata/$1" "$TFM_SRCDIR"/testdata/*/"$1"; do
        [ -f "$f" ] && { echo "$f"; return 0; }
    done
    return 1
}

# make_corpus FILE: varied English text (prose, numbers, punctuation,
# whitespace runs, tabs, CRLF, a little non-ASCII), plus Debian's licence
# texts when present.  Deterministic for a given machine.
make_corpus() {
    {
        cat <<'TXT'
In the beginning the shell was small, and every program did one thing well.
A tokenizer turns text into numbers; a model turns numbers into more numbers.
It's what they'd call "streaming": we'll read a line, we've encoded it, and I'm done.
Numbers: 3.14159, 2,718, 1e-9, 42nd street, 1999-12-31 23:59:59, 0x7fff.
Whitespace   runs	and	tabs,   trailing spaces   
Windows line endings are here too.
Accented Latin: café, naïve, résumé, Ångström, São Paulo, Dvořák.
Greek: αβγ δέλτα; Cyrillic: привет мир; Arabic: مرحبا بالعالم; CJK: 你好，世界。日本語のテキスト。
Emoji 🙂🚀 and symbols © ® ™ → ≤ ≥ ∞ — “quotes” ‘single’ …
Code: for (int i = 0; i < n; i++) { sum += a[i] * b[i]; } // done
URLs like https://example.org/path?query=1&x=y#frag and e-mail a.b@example.com.

TXT
        printf 'CRLF line one\r\nCRLF line two\r\n'
        i=0
        while [ $i -lt 40 ]; do
            echo "Line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1000)) times."
            i=$((i + 1))
        done
        for f in /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 \
                 /usr/share/common-licenses/Artistic /usr/share/common-licenses/MPL-2.0; do
            [ -f "$f" ] && cat "$f"
        done
    } >"$1"
}
