# Shared by tests/finetune_*.sh (sourced, not a test itself): synthetic
# fine-tuning data a tiny model learns in a few dozen steps and a model
# without training cannot get right by chance.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
command -v tfm-eval >/dev/null || PATH="$TFM_BUILDDIR:$PATH"

# make_cls SEED N [pairs|regress]: label<TAB>text lines.  The label is the
# sentiment of one cue word among filler ("pos": good, great, ...); pairs:
# the cue is in the second text; regress: the number of "good"s times 1.5.
make_cls() {
    perl -e '
        my ($seed, $n, $mode) = @ARGV;
        my @w = qw(the cat dog sat ran on a mat log and then slept ate fish bread);
        my @p = qw(good great fine nice); my @q = qw(bad awful poor sad);
        my $s = $seed;
        sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
        sub words { return map { $w[r() % @w] } 1 .. $_[0] + r() % 4 }
        for (1 .. $n) {
            my @l = words(3);
            if ($mode eq "regress") {
                my $k = r() % 4;
                splice(@l, r() % (@l + 1), 0, "good") for 1 .. $k;
                printf("%.1f\t%s\n", 1.5 * $k, join(" ", @l));
                next;
            }
            my $y = r() % 2;
            my $cue = $y ? $p[r() % 4] : $q[r() % 4];
            my @b = words(2);
            my $to = $mode eq "pairs" ? \@b : \@l;
            splice(@$to, r() % (@$to + 1), 0, $cue);
            print(($y ? "pos" : "neg"), "\t", join(" ", @l),
                  $mode eq "pairs" ? "\t" . join(" ", @b) : "", "\n");
        }' "$@"
}

# make_tags SEED N: CoNLL sentences of filler words (O), a person's first
# and last name (B-PER I-PER) half the time, and a city (B-LOC).
make_tags() {
    perl -e '
        my ($seed, $n) = @ARGV;
        my @w = qw(the cat dog sat ran on a mat log and then slept ate fish bread);
        my @per = qw(alice bob carol dave); my @loc = qw(paris rome oslo);
        my $s = $seed;
        sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
        for (1 .. $n) {
            my @l = map { [$w[r() % @w], "O"] } 1 .. 3 + r() % 4;
            splice(@l, r() % (@l + 1), 0, [$per[r() % 4], "B-PER"], [$per[r() % 4], "I-PER"])
                if r() % 2;
            splice(@l, r() % (@l + 1), 0, [$loc[r() % 3], "B-LOC"]);
            print map({ "$_->[0]\t$_->[1]\n" } @l), "\n";
        }' "$@"
}

# make_spans SEED N: SQuAD-shaped JSON lines; the context (10 to 40 filler
# words) says "code is COLOUR" somewhere, the question asks for the code.
make_spans() {
    perl -e '
        my ($seed, $n) = @ARGV;
        my @w = qw(the cat dog sat ran on a mat log and then slept ate fish bread);
        my @c = qw(red blue green pink gold);
        my $s = $seed;
        sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
        for my $i (1 .. $n) {
            my @l = map { $w[r() % @w] } 1 .. 10 + r() % 30;
            my $ans = $c[r() % 5];
            my $at = r() % (@l + 1);
            splice(@l, $at, 0, "code", "is", $ans);
            my $start = length(join(" ", @l[0 .. $at + 1])) + 1;
            printf("{\"id\": \"q%d\", \"context\": \"%s\", \"question\": \"what is the code?\", " .
                   "\"answers\": {\"text\": [\"%s\"], \"answer_start\": [%d]}}\n",
                   $i, join(" ", @l), $ans, $start);
        }' "$@"
}

# wordpiece TEXT OUT: a small uncased WordPiece tokenizer ([CLS], [SEP], ...).
wordpiece() {
    tfm-tokenize train --model wordpiece --vocab-size 200 -o "$2" "$1" 2>/dev/null
}

# field KEY FILE: the number after "KEY " on tfm-train's last stderr line.
field() {
    tail -1 "$2" | sed -n "s/.*  $1 \([-0-9.]*\).*/\1/p"
}

# at_least X MIN WHAT: fails unless X >= MIN.
at_least() {
    awk -v x="$1" -v m="$2" 'BEGIN { exit !(x != "" && x + 0 >= m) }' ||
        fail "$3: $1, expected at least $2"
}
