/* tfm-tokenize: train, apply and inspect tokenizers.
 * Options -> library calls -> output; the work is in lib/text. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "base/progress.h"
#include "base/rng.h"
#include "base/thread.h"
#include "io/npy.h"
#include "lm/lm.h"
#include "text/encode_stream.h"
#include "text/tokenizer.h"
#include "text/train_feed.h"

static const char *prog = "tfm-tokenize";

static void usage_main(FILE *fp)
{
    fprintf(fp,
            "Usage: %s COMMAND [OPTION]... [FILE]...\n"
            "Train, apply and inspect tokenizers (byte-level BPE, WordPiece, char,\n"
            "SentencePiece Unigram).\n"
            "\n"
            "Commands:\n"
            "  train    learn a tokenizer from text and write its tokenizer.json\n"
            "  encode   text to token ids (ids, pieces, jsonl or .npy)\n"
            "  decode   token ids (text or .npy) back to text\n"
            "  vocab    the vocabulary as TSV: id, piece, merge rank\n"
            "  convert  write any tokenizer TOK as a tokenizer.json\n"
            "\n"
            "  -h, --help     this help; '%s COMMAND --help' for a command's options\n"
            "      --version  print the version\n"
            "\n"
            "TOK (-t) is a tokenizer.json, a directory holding GPT-2's vocab.json +\n"
            "merges.txt (or encoder.json + vocab.bpe), BERT's vocab.txt, a sentencepiece\n"
            "Unigram .model, a directory holding spiece.model, or a GGUF file.\n"
            "Exit status: 0 success, 1 failure, 2 usage error.  See tfm-tokenize(1).\n",
            prog, prog);
}

static void usage_train(FILE *fp)
{
    fprintf(fp,
            "Usage: %s train [OPTION]... [FILE]...\n"
            "Learn a tokenizer from the text in FILEs (standard input if none).\n"
            "\n"
            "  -m, --model KIND        bpe (byte-level, GPT-2 style; default), wordpiece\n"
            "                          (BERT style), char (one token per character) or\n"
            "                          unigram (SentencePiece, as spm_train; nmt_nfkc)\n"
            "  -v, --vocab-size N      vocabulary size, specials and base alphabet\n"
            "                          included (default 30000; char: every character seen)\n"
            "      --min-frequency N   do not merge pairs (char: keep characters) seen fewer\n"
            "                          than N times (default 2; char 0)\n"
            "      --special TOKEN     a special token (repeatable; default bpe:\n"
            "                          <|endoftext|>; wordpiece: [PAD] [UNK] [CLS] [SEP] [MASK];\n"
            "                          char: <unk>; unigram: <unk> <s> </s>, T5's are\n"
            "                          <pad> </s> <unk>)\n"
            "      --lowercase         lowercase (wordpiece: and strip accents); stored in\n"
            "                          the tokenizer, so encoding does the same\n"
            "      --no-lowercase      keep case (the default except for wordpiece)\n"
            "      --character-coverage F  unigram: the most frequent characters covering F\n"
            "                          of the text are kept (default 0.9995)\n"
            "      --byte-fallback     unigram: the 256 <0xXX> pieces, for unknown text\n"
            "      --user-symbols LIST unigram: comma-separated pieces never split\n"
            "      --extra-ids N       unigram: T5's sentinels <extra_id_0>.. at the top\n"
            "      --max-sentence-length N  unigram: skip lines over N bytes (default\n"
            "                          4192, spm_train's; the skipped ones are counted)\n"
            "      --sample-lines N    train on N lines drawn uniformly from the input\n"
            "      --seed S            seed of the sample (default: random, logged)\n"
            "  -o, --output FILE       write tokenizer.json to FILE (default stdout)\n"
            "      --threads N         threads (default: usable CPUs or $TFM_NUM_THREADS)\n"
            "  -q, --quiet             no progress or summary on stderr\n"
            "  -h, --help              this help;  --version  the version\n",
            prog);
}

static void usage_encode(FILE *fp)
{
    fprintf(fp,
            "Usage: %s encode -t TOK [OPTION]... [FILE]...\n"
            "Encode text from FILEs (standard input if none) as token ids; each input\n"
            "line is one sequence unless --document.\n"
            "\n"
            "  -t, --tokenizer TOK     the tokenizer (tokenizer.json, GPT-2 directory, vocab.txt,\n"
            "                          sentencepiece .model)\n"
            "  -f, --format FMT        ids (default): ids separated by spaces, a line per line;\n"
            "                          pieces: vocabulary pieces likewise;\n"
            "                          jsonl: {\"ids\":[...]} per line;\n"
            "                          npy: one flat uint16 array (uint32 if the vocabulary\n"
            "                          has more than 65536 entries)\n"
            "  -d, --document          the whole input is one sequence (newlines are text)\n"
            "      --add-special       [CLS] A [SEP] (B [SEP] for \"A<TAB>B\" lines, with\n"
            "                          type_ids in jsonl); GPT-2 style: <|endoftext|> after;\n"
            "                          Llama style: the template's <|begin_of_text|> first\n"
            "      --split-special     special-token text in the input becomes its id\n"
            "      --sample ALPHA      Unigram: a segmentation drawn per line with\n"
            "                          probability ~ p^ALPHA (subword regularization;\n"
            "                          0 uniform, large: the best one); sentencepiece\n"
            "                          BPE: BPE-dropout, each merge skipped with p ALPHA\n"
            "      --seed S            seed of --sample (default: random, logged)\n"
            "      --nbest N           Unigram: the N best segmentations of each line,\n"
            "                          best first, a line each (jsonl: {\"nbest\":[...]})\n"
            "  -o, --output FILE       write to FILE (default stdout), atomically\n"
            "      --threads N         threads (default: usable CPUs or $TFM_NUM_THREADS)\n"
            "  -q, --quiet             no summary on stderr\n"
            "  -h, --help              this help;  --version  the version\n",
            prog);
}

static void usage_decode(FILE *fp)
{
    fprintf(fp,
            "Usage: %s decode -t TOK [OPTION]... [FILE]\n"
            "Turn token ids back into text.  FILE (standard input if none or -) holds\n"
            "ids separated by spaces (one output line per input line; jsonl lines\n"
            "{\"ids\":[...]} too) or is a .npy array (decoded as one text).\n"
            "\n"
            "  -t, --tokenizer TOK     the tokenizer\n"
            "      --skip-special      leave special tokens out of the text\n"
            "  -o, --output FILE       write to FILE (default stdout), atomically\n"
            "      --threads N         accepted like every command's (decode runs on one)\n"
            "  -q, --quiet             accepted (decode prints no chatter)\n"
            "  -h, --help              this help;  --version  the version\n",
            prog);
}

static void usage_vocab(FILE *fp)
{
    fprintf(fp,
            "Usage: %s vocab -t TOK [OPTION]...\n"
            "Print the vocabulary as TSV: id, piece (tab, newline and backslash escaped\n"
            "as \\t \\n \\\\), and the merge rank that made it (- for none).\n"
            "\n"
            "  -t, --tokenizer TOK     the tokenizer\n"
            "  -o, --output FILE       write to FILE (default stdout), atomically\n"
            "      --threads N, -q     accepted like every command's (no effect)\n"
            "  -h, --help              this help;  --version  the version\n",
            prog);
}

enum {
    OPT_VERSION = 256,
    OPT_MIN_FREQ,
    OPT_SPECIAL,
    OPT_LOWER,
    OPT_NO_LOWER,
    OPT_SAMPLE,
    OPT_SEED,
    OPT_THREADS,
    OPT_ADD_SPECIAL,
    OPT_SPLIT_SPECIAL,
    OPT_SKIP_SPECIAL,
    OPT_NBEST,
    OPT_COVERAGE,
    OPT_BYTE_FALLBACK,
    OPT_USER_SYMBOLS,
    OPT_EXTRA_IDS,
    OPT_MAX_SENTENCE,
};

static tfm_tokenizer *load_tokenizer(const char *path)
{
    if (!path)
        tfm_usage_error(prog, "missing -t TOK (the tokenizer)");
    tfm_tokenizer *tok;
    tfm_err err = {0};
    if (tfm_model_tokenizer_load(&tok, path, &err) < 0)
        tfm_die(prog, &err);
    return tok;
}

static void open_out(tfm_out *o, const char *path)
{
    tfm_err err = {0};
    if (tfm_out_open(o, path, &err) < 0)
        tfm_die(prog, &err);
}

static void commit_out(tfm_out *o)
{
    tfm_err err = {0};
    if (tfm_out_commit(o, &err) < 0)
        tfm_die(prog, &err);
}

static void fail_out(tfm_out *o, const tfm_err *err)
{
    tfm_out_abort(o);
    tfm_die(prog, err);
}

static int open_in(const char *path)
{
    if (strcmp(path, "-") == 0)
        return STDIN_FILENO;
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* Peak resident memory so far, for the summaries: the streaming promise
 * made visible. */
static long peak_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (ru.ru_maxrss + 1023) / 1024;
}

/* Total size of the inputs in MB when every one is a regular file, else 0
 * (unknown), for the progress bar. */
static double input_mb(int argc, char **argv, int first)
{
    double total = 0;
    if (first >= argc)
        return 0;
    for (int i = first; i < argc; i++) {
        struct stat st;
        if (strcmp(argv[i], "-") == 0 || stat(argv[i], &st) != 0 || !S_ISREG(st.st_mode))
            return 0;
        total += (double)st.st_size;
    }
    return total / 1e6;
}

/* train */

/* What spm_train refuses, or tfm would merge silently: a user symbol twice,
 * one that is a special token, or a byte piece's name beside the bytes. */
static void check_user_symbols(const char **user, size_t n, const char **specials,
                               size_t n_specials, int byte_fallback)
{
    static const char *dflt[] = {"<unk>", "<s>", "</s>"};
    if (!specials) {
        specials = dflt;
        n_specials = 3;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++)
            if (strcmp(user[i], user[j]) == 0)
                tfm_usage_error(prog, "--user-symbols: '%s' is given twice", user[i]);
        for (size_t j = 0; j < n_specials; j++)
            if (strcmp(user[i], specials[j]) == 0)
                tfm_usage_error(prog, "--user-symbols: '%s' is a special token already",
                                user[i]);
        const char *u = user[i], *hex = "0123456789ABCDEF";
        if (byte_fallback && strlen(u) == 6 && strncmp(u, "<0x", 3) == 0 && u[5] == '>' &&
            strchr(hex, u[3]) && strchr(hex, u[4]))
            tfm_usage_error(prog, "--user-symbols: '%s' is the name of a byte piece, which "
                            "--byte-fallback adds", user[i]);
    }
}

static int cmd_train(int argc, char **argv)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},
        {"vocab-size", required_argument, 0, 'v'},
        {"min-frequency", required_argument, 0, OPT_MIN_FREQ},
        {"special", required_argument, 0, OPT_SPECIAL},
        {"lowercase", no_argument, 0, OPT_LOWER},
        {"no-lowercase", no_argument, 0, OPT_NO_LOWER},
        {"sample-lines", required_argument, 0, OPT_SAMPLE},
        {"seed", required_argument, 0, OPT_SEED},
        {"character-coverage", required_argument, 0, OPT_COVERAGE},
        {"byte-fallback", no_argument, 0, OPT_BYTE_FALLBACK},
        {"user-symbols", required_argument, 0, OPT_USER_SYMBOLS},
        {"extra-ids", required_argument, 0, OPT_EXTRA_IDS},
        {"max-sentence-length", required_argument, 0, OPT_MAX_SENTENCE},
        {"output", required_argument, 0, 'o'},
        {"threads", required_argument, 0, OPT_THREADS},
        {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    tfm_tok_train_opts o = {.kind = TFM_TOK_BPE, .lowercase = -1};
    long vocab = -1, min_freq = -1, sample_n = 0, threads = tfm_threads_default();
    long long seed = -1;
    const char *output = NULL;
    int quiet = 0, c;
    const char **specials = NULL, **user = NULL, *uni_opt = NULL;
    size_t n_specials = 0;
    while ((c = getopt_long(argc, argv, "m:v:o:qh", lo, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (strcmp(optarg, "bpe") == 0)
                o.kind = TFM_TOK_BPE;
            else if (strcmp(optarg, "wordpiece") == 0)
                o.kind = TFM_TOK_WORDPIECE;
            else if (strcmp(optarg, "char") == 0)
                o.kind = TFM_TOK_CHAR;
            else if (strcmp(optarg, "unigram") == 0)
                o.kind = TFM_TOK_UNIGRAM;
            else
                tfm_usage_error(prog, "--model: '%s' is not one of bpe, wordpiece, char, unigram",
                                optarg);
            break;
        case OPT_COVERAGE:
            o.character_coverage = tfm_opt_double(prog, "--character-coverage", optarg, 0.5, 1);
            uni_opt = "--character-coverage";
            break;
        case OPT_BYTE_FALLBACK: o.byte_fallback = 1; uni_opt = "--byte-fallback"; break;
        case OPT_USER_SYMBOLS:
            for (char *u = strtok(tfm_strdup(optarg), ","); u; u = strtok(NULL, ",")) {
                user = tfm_realloc(user, (o.n_user_symbols + 1) * sizeof *user);
                user[o.n_user_symbols++] = u;
            }
            uni_opt = "--user-symbols";
            break;
        case OPT_EXTRA_IDS:
            o.extra_ids = (uint32_t)tfm_opt_long(prog, "--extra-ids", optarg, 0, 100000);
            uni_opt = "--extra-ids";
            break;
        case OPT_MAX_SENTENCE:
            o.max_sentence_length =
                (uint32_t)tfm_opt_long(prog, "--max-sentence-length", optarg, 1, 1L << 30);
            uni_opt = "--max-sentence-length";
            break;
        case 'v': vocab = tfm_opt_long(prog, "--vocab-size", optarg, 1, UINT32_MAX); break;
        case OPT_MIN_FREQ: min_freq = tfm_opt_long(prog, "--min-frequency", optarg, 0, LONG_MAX); break;
        case OPT_SPECIAL:
            if (!*optarg)
                tfm_usage_error(prog, "--special: a special token cannot be empty");
            for (size_t i = 0; i < n_specials; i++)
                if (strcmp(specials[i], optarg) == 0)
                    tfm_usage_error(prog, "--special '%s' is given twice", optarg);
            specials = tfm_realloc(specials, (n_specials + 1) * sizeof *specials);
            specials[n_specials++] = optarg;
            break;
        case OPT_LOWER: o.lowercase = 1; break;
        case OPT_NO_LOWER: o.lowercase = 0; break;
        case OPT_SAMPLE: sample_n = tfm_opt_long(prog, "--sample-lines", optarg, 1, 1L << 40); break;
        case OPT_SEED: seed = tfm_opt_long(prog, "--seed", optarg, 0, LONG_MAX); break;
        case 'o': output = optarg; break;
        case OPT_THREADS: threads = tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case 'q': quiet = 1; break;
        case 'h': usage_train(stdout); exit(0);
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, lo); /* getopt said what */
        }
    }
    if (uni_opt && o.kind != TFM_TOK_UNIGRAM)
        tfm_usage_error(prog, "%s is for -m unigram", uni_opt);
    check_user_symbols(user, o.n_user_symbols, specials, n_specials, o.byte_fallback);
    if (o.kind == TFM_TOK_UNIGRAM && (o.lowercase >= 0 || min_freq >= 0))
        tfm_usage_error(prog, "-m unigram normalizes as nmt_nfkc and takes no %s",
                        o.lowercase >= 0 ? "--lowercase/--no-lowercase" : "--min-frequency");
    o.user_symbols = user;
    o.source = argc - optind == 1 ? argv[optind] : argc - optind > 1 ? "the input files"
                                                                        : "<stdin>";
    if (vocab < 0)
        vocab = o.kind == TFM_TOK_CHAR ? 0 : 30000;
    /* A character seen once still belongs in a char vocabulary. */
    if (min_freq < 0)
        min_freq = o.kind == TFM_TOK_CHAR ? 0 : 2;
    o.vocab_size = (uint32_t)vocab;
    o.min_frequency = (uint64_t)min_freq;
    o.specials = specials;
    o.n_specials = n_specials;
    o.threads = (int)threads;

    /* the output is opened first: a directory or a place that cannot be
     * written is said before the training, not after */
    tfm_out_install_signals();
    tfm_out out;
    open_out(&out, output);
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    if (sample_n && seed < 0) {
        seed = (long long)(tfm_rng_entropy_seed() & INT64_MAX);
        if (!quiet)
            fprintf(stderr, "%s: sampling with --seed %lld\n", prog, seed);
    }
    tfm_tok_feed f; /* text/train_feed.h: every line, or a sample */
    tfm_tok_feed_init(&f, tr, (uint64_t)sample_n, (uint64_t)seed);

    int nfiles = argc - optind;
    tfm_progress pg;
    tfm_progress_init(&pg, "reading", "MB", input_mb(argc, argv, optind), quiet);
    double t0 = tfm_now(), done = 0;
    tfm_err err = {0};
    for (int i = nfiles ? optind : -1; i < argc; i++) {
        const char *name = i < 0 ? "-" : argv[i];
        int fd = open_in(name);
        if (fd < 0) {
            tfm_progress_end(&pg);
            tfm_err_errno(&err, "%s", name);
            tfm_die(prog, &err);
        }
        int rc = tfm_tok_feed_fd(&f, fd, strcmp(name, "-") ? name : "<stdin>", &pg, &done, &err);
        if (fd != STDIN_FILENO)
            close(fd);
        if (rc < 0) {
            tfm_progress_end(&pg);
            tfm_die(prog, &err);
        }
        if (i < 0)
            break;
    }
    tfm_progress_end(&pg);

    uint64_t used, used_bytes, read_lines = f.lines;
    tfm_tok_feed_finish(&f, &used, &used_bytes);
    tfm_tok_feed_free(&f);
    if (sample_n && !quiet)
        fprintf(stderr, "%s: sampled %llu of %llu lines (seed %lld)\n", prog,
                (unsigned long long)used, (unsigned long long)read_lines, seed);

    tfm_tokenizer *tok;
    if (tfm_tok_trainer_finish(tr, &tok, &err) < 0)
        tfm_die(prog, &err);
    uint64_t skipped_bytes, skipped = tfm_tok_trainer_skipped(tr, &skipped_bytes);
    tfm_tok_trainer_free(tr);
    /* lines left out are said even with -q: the model did not see them */
    char skip_note[160] = "";
    if (skipped)
        snprintf(skip_note, sizeof skip_note, "%llu line%s (%.1f MB) over %u bytes skipped "
                 "(--max-sentence-length)", (unsigned long long)skipped,
                 skipped == 1 ? "" : "s", skipped_bytes / 1e6,
                 o.max_sentence_length ? o.max_sentence_length : 4192);
    if (skipped && quiet)
        fprintf(stderr, "%s: warning: %s\n", prog, skip_note);
    free(specials);
    free(user);
    /* Results the user did not ask for are said, not left to be found. */
    uint32_t got = tfm_tokenizer_vocab_size(tok);
    if (used_bytes == 0)
        fprintf(stderr, "%s: warning: the input is empty: the vocabulary has only its %u "
                "base token%s\n", prog, got, got == 1 ? "" : "s");
    else if (vocab > 0 && got > (uint32_t)vocab)
        fprintf(stderr, "%s: warning: --vocab-size %ld is below the %u tokens the vocabulary "
                "starts with (%s and the special tokens): it has %u\n", prog, vocab, got,
                o.kind == TFM_TOK_BPE ? "the 256 bytes" : "the alphabet", got);
    else if (vocab > 0 && got < (uint32_t)vocab)
        fprintf(stderr, "%s: warning: the text holds fewer candidate tokens than --vocab-size "
                "%ld: the vocabulary has %u\n", prog, vocab, got);

    tfm_buf json = {0};
    tfm_tokenizer_to_json(tok, &json);
    const char *caveat = tfm_tokenizer_hf_caveat(tok);
    if (caveat)
        fprintf(stderr, "%s: warning: %s\n", prog, caveat);
    if (fwrite(json.data, 1, json.len, out.fp) != json.len) {
        tfm_err_errno(&err, "%s: write error", output ? output : "<stdout>");
        fail_out(&out, &err);
    }
    commit_out(&out);
    if (!quiet)
        fprintf(stderr, "%s: trained a vocabulary of %u on %llu lines (%.1f MB)%s%s%s in "
                "%.2f s, peak memory %ld MB\n",
                prog, tfm_tokenizer_vocab_size(tok), (unsigned long long)(used - skipped),
                (used_bytes - skipped_bytes) / 1e6, skipped ? "; " : "", skip_note,
                skipped ? "," : "", tfm_now() - t0, peak_mb());
    tfm_buf_free(&json);
    tfm_tokenizer_free(tok);
    return 0;
}

/* encode */

static int cmd_encode(int argc, char **argv)
{
    static const struct option lo[] = {
        {"tokenizer", required_argument, 0, 't'},
        {"format", required_argument, 0, 'f'},
        {"document", no_argument, 0, 'd'},
        {"add-special", no_argument, 0, OPT_ADD_SPECIAL},
        {"split-special", no_argument, 0, OPT_SPLIT_SPECIAL},
        {"sample", required_argument, 0, OPT_SAMPLE},
        {"seed", required_argument, 0, OPT_SEED},
        {"nbest", required_argument, 0, OPT_NBEST},
        {"output", required_argument, 0, 'o'},
        {"threads", required_argument, 0, OPT_THREADS},
        {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    tfm_enc_opts o = {.format = TFM_ENC_IDS, .threads = tfm_threads_default()};
    const char *tpath = NULL, *output = NULL;
    int quiet = 0, c;
    long long seed = -1;
    while ((c = getopt_long(argc, argv, "t:f:do:qh", lo, NULL)) != -1) {
        switch (c) {
        case 't': tpath = optarg; break;
        case 'f':
            if (strcmp(optarg, "ids") == 0)
                o.format = TFM_ENC_IDS;
            else if (strcmp(optarg, "pieces") == 0)
                o.format = TFM_ENC_PIECES;
            else if (strcmp(optarg, "jsonl") == 0)
                o.format = TFM_ENC_JSONL;
            else if (strcmp(optarg, "npy") == 0)
                o.format = TFM_ENC_NPY;
            else
                tfm_usage_error(prog, "--format: '%s' is not one of ids, pieces, jsonl, npy", optarg);
            break;
        case 'd': o.document = 1; break;
        case OPT_ADD_SPECIAL: o.add_special = 1; break;
        case OPT_SPLIT_SPECIAL: o.split_special = 1; break;
        case OPT_SAMPLE: {
            char *end;
            errno = 0;
            double a = strtod(optarg, &end);
            if (end == optarg || *end || errno || !(a >= 0 && a <= 1e6))
                tfm_usage_error(prog, "--sample: '%s' is not a number in [0, 1e6]", optarg);
            o.sample = 1;
            o.sample_alpha = (float)a;
            break;
        }
        case OPT_SEED: seed = tfm_opt_long(prog, "--seed", optarg, 0, LONG_MAX); break;
        case OPT_NBEST: o.nbest = (size_t)tfm_opt_long(prog, "--nbest", optarg, 1, 1000); break;
        case 'o': output = optarg; break;
        case OPT_THREADS: o.threads = (int)tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case 'q': quiet = 1; break;
        case 'h': usage_encode(stdout); exit(0);
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, lo); /* getopt said what */
        }
    }
    tfm_err err = {0};
    /* option clashes, alone then with the tokenizer: usage errors */
    if (tfm_enc_opts_check(NULL, &o, &err) < 0)
        tfm_usage_error(prog, "%s", err.msg);
    if (seed >= 0 && !o.sample)
        tfm_usage_error(prog, "--seed is for --sample");
    if (o.sample) {
        if (seed < 0) {
            seed = (long long)(tfm_rng_entropy_seed() & INT64_MAX);
            if (!quiet)
                fprintf(stderr, "%s: sampling with --seed %lld\n", prog, seed);
        }
        o.seed = (uint64_t)seed;
    }
    const char *env = getenv("TFM_ENCODE_CHUNK"); /* tests: force many rounds */
    long chunk;
    if (env && tfm_parse_long(env, 1, 1L << 30, &chunk) == 0)
        o.chunk = (size_t)chunk;
    int to_stdout = !output || strcmp(output, "-") == 0;
    if (o.format == TFM_ENC_NPY && to_stdout && isatty(STDOUT_FILENO))
        tfm_usage_error(prog, "not writing binary .npy to a terminal; use -o FILE or a redirection");
    tfm_tokenizer *tok = load_tokenizer(tpath);
    if (tfm_enc_opts_check(tok, &o, &err) < 0)
        tfm_usage_error(prog, "%s: %s", tpath, err.msg);

    tfm_out_install_signals();
    int nfiles = argc - optind;
    tfm_progress pg;
    tfm_progress_init(&pg, "encoding", "MB", input_mb(argc, argv, optind), quiet);
    o.progress = &pg;
    tfm_encoder *enc;
    if (tfm_encoder_new(&enc, tok, &o, output, &err) < 0)
        tfm_die(prog, &err);
    double t0 = tfm_now();
    for (int i = nfiles ? optind : -1; i < argc; i++) {
        const char *name = i < 0 ? "-" : argv[i];
        int fd = open_in(name);
        int rc = fd < 0 ? tfm_err_errno(&err, "%s", name)
                        : tfm_encoder_feed_fd(enc, fd, strcmp(name, "-") ? name : "<stdin>", &err);
        if (fd > STDIN_FILENO)
            close(fd);
        if (rc < 0) {
            tfm_progress_end(&pg);
            tfm_encoder_free(enc); /* removes the unfinished output */
            tfm_die(prog, &err);
        }
        if (i < 0)
            break;
    }
    int rc = tfm_encoder_finish(enc, &err);
    tfm_progress_end(&pg);
    if (rc < 0) {
        tfm_encoder_free(enc);
        tfm_die(prog, &err);
    }
    const tfm_enc_stats *st = tfm_encoder_stats(enc);
    double dt = tfm_now() - t0;
    /* a warning even with -q: the ids do not hold the whole text */
    if (st->dropped)
        fprintf(stderr, "%s: warning: %llu character%s not in the vocabulary, which has no "
                "unknown token, dropped (the first: %s)\n", prog,
                (unsigned long long)st->dropped, st->dropped == 1 ? "" : "s",
                st->first_dropped);
    if (!quiet)
        fprintf(stderr, "%s: %llu byte%s, %llu sequence%s, %llu token%s in %.3f s (%.1f MB/s), "
                "peak memory %ld MB\n",
                prog, (unsigned long long)st->bytes, st->bytes == 1 ? "" : "s",
                (unsigned long long)st->sequences, st->sequences == 1 ? "" : "s",
                (unsigned long long)st->tokens, st->tokens == 1 ? "" : "s", dt, dt > 0 ? st->bytes / 1e6 / dt : 0.0,
                peak_mb());
    tfm_encoder_free(enc);
    tfm_tokenizer_free(tok);
    return 0;
}

/* decode */

static int cmd_decode(int argc, char **argv)
{
    static const struct option lo[] = {
        {"tokenizer", required_argument, 0, 't'},
        {"skip-special", no_argument, 0, OPT_SKIP_SPECIAL},
        {"output", required_argument, 0, 'o'},
        {"threads", required_argument, 0, OPT_THREADS},
        {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    const char *tpath = NULL, *output = NULL;
    int skip = 0, c;
    while ((c = getopt_long(argc, argv, "t:o:qh", lo, NULL)) != -1) {
        switch (c) {
        case 't': tpath = optarg; break;
        case OPT_SKIP_SPECIAL: skip = 1; break;
        case 'o': output = optarg; break;
        case 'q': break;
        case 'h': usage_decode(stdout); exit(0);
        case OPT_VERSION: tfm_print_version(prog);
        case OPT_THREADS: tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        default: tfm_usage_hint(prog, argv, lo); /* getopt said what */
        }
    }
    if (argc - optind > 1)
        tfm_usage_error(prog, "decode takes at most one FILE");
    const char *in = optind < argc ? argv[optind] : "-";
    const char *in_name = strcmp(in, "-") ? in : "<stdin>";
    tfm_tokenizer *tok = load_tokenizer(tpath);
    tfm_err err = {0};
    FILE *fp = strcmp(in, "-") ? fopen(in, "rb") : stdin;
    if (!fp) {
        tfm_err_errno(&err, "%s", in);
        tfm_die(prog, &err);
    }
    tfm_out_install_signals();
    tfm_out out;
    open_out(&out, output);
    const char *oname = output && strcmp(output, "-") ? output : "<stdout>";
    /* No text line starts with NumPy's magic byte, so one byte tells. */
    int first = getc(fp);
    int rc;
    if (first == 0x93) {
        tfm_npy arr;
        tfm_buf image = {0};
        if (fp == stdin) {
            ungetc(first, fp);
            rc = tfm_read_all(fp, in_name, &image, &err);
            if (rc == 0)
                rc = tfm_npy_parse(&arr, image.data, image.len, in_name, &err);
        } else {
            rc = tfm_npy_open(&arr, in, &err);
        }
        if (rc == 0) {
            rc = tfm_decode_npy(tok, &arr, in_name, out.fp, oname, skip, &err);
            tfm_npy_close(&arr);
        }
        tfm_buf_free(&image);
    } else {
        if (first != EOF)
            ungetc(first, fp);
        rc = tfm_decode_stream(tok, fp, in_name, out.fp, oname, skip, &err);
    }
    if (fp != stdin)
        fclose(fp);
    if (rc < 0)
        fail_out(&out, &err);
    commit_out(&out);
    tfm_tokenizer_free(tok);
    return 0;
}

static void usage_convert(FILE *fp)
{
    fprintf(fp,
            "Usage: %s convert -t TOK [OPTION]...\n"
            "Write the tokenizer TOK (any form -t reads: a sentencepiece .model, GPT-2's\n"
            "files, BERT's vocab.txt, a model file) as a tokenizer.json that\n"
            "HuggingFace tokenizers loads.\n"
            "\n"
            "  -t, --tokenizer TOK     the tokenizer\n"
            "  -o, --output FILE       write to FILE (default stdout), atomically\n"
            "      --threads N, -q     accepted like every command's (no effect)\n"
            "  -h, --help              this help;  --version  the version\n",
            prog);
}

/* convert */

/* The options of convert and vocab: -t TOK -o FILE, no FILE operands. */
static tfm_tokenizer *tok_out_options(int argc, char **argv, const char *command,
                                      void (*usage)(FILE *), const char **output)
{
    static const struct option lo[] = {
        {"tokenizer", required_argument, 0, 't'},
        {"output", required_argument, 0, 'o'},
        {"threads", required_argument, 0, OPT_THREADS},
        {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    const char *tpath = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "t:o:qh", lo, NULL)) != -1) {
        switch (c) {
        case 't': tpath = optarg; break;
        case 'o': *output = optarg; break;
        case 'q': break;
        case 'h': usage(stdout); exit(0);
        case OPT_VERSION: tfm_print_version(prog);
        case OPT_THREADS: tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        default: tfm_usage_hint(prog, argv, lo); /* getopt said what */
        }
    }
    if (optind < argc)
        tfm_usage_error(prog, "%s takes no FILE (unexpected '%s')", command, argv[optind]);
    return load_tokenizer(tpath);
}

static int cmd_convert(int argc, char **argv)
{
    const char *output = NULL;
    tfm_tokenizer *tok = tok_out_options(argc, argv, "convert", usage_convert, &output);
    tfm_out_install_signals();
    tfm_buf json = {0};
    tfm_tokenizer_to_json(tok, &json);
    const char *caveat = tfm_tokenizer_hf_caveat(tok);
    if (caveat)
        fprintf(stderr, "%s: warning: %s\n", prog, caveat);
    tfm_out out;
    open_out(&out, output);
    tfm_err err = {0};
    if (fwrite(json.data, 1, json.len, out.fp) != json.len) {
        tfm_err_errno(&err, "%s: write error", output ? output : "<stdout>");
        fail_out(&out, &err);
    }
    commit_out(&out);
    tfm_buf_free(&json);
    tfm_tokenizer_free(tok);
    return 0;
}

/* vocab */

static void put_tsv_field(tfm_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '\t': tfm_buf_puts(b, "\\t"); break;
        case '\n': tfm_buf_puts(b, "\\n"); break;
        case '\r': tfm_buf_puts(b, "\\r"); break;
        case '\\': tfm_buf_puts(b, "\\\\"); break;
        default: tfm_buf_putc(b, s[i]);
        }
    }
}

static int cmd_vocab(int argc, char **argv)
{
    const char *output = NULL;
    tfm_tokenizer *tok = tok_out_options(argc, argv, "vocab", usage_vocab, &output);
    tfm_out_install_signals();
    tfm_out out;
    open_out(&out, output);
    tfm_buf b = {0};
    uint32_t n = tfm_tokenizer_vocab_size(tok);
    tfm_err err = {0};
    for (uint32_t id = 0; id < n; id++) {
        size_t len = 0;
        const char *p = tfm_tokenizer_piece(tok, id, &len);
        tfm_buf_printf(&b, "%u\t", id);
        if (p)
            put_tsv_field(&b, p, len);
        int64_t rank = tfm_tokenizer_merge_rank(tok, id);
        if (rank >= 0)
            tfm_buf_printf(&b, "\t%lld\n", (long long)rank);
        else
            tfm_buf_puts(&b, "\t-\n");
        if (b.len >= (1u << 16) || id + 1 == n) {
            if (fwrite(b.data, 1, b.len, out.fp) != b.len) {
                tfm_err_errno(&err, "%s: write error", output ? output : "<stdout>");
                fail_out(&out, &err);
            }
            tfm_buf_clear(&b);
        }
    }
    tfm_buf_free(&b);
    commit_out(&out);
    tfm_tokenizer_free(tok);
    return 0;
}

int main(int argc, char **argv)
{
    tfm_main_start(prog);
    if (argc < 2) {
        usage_main(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0)
        tfm_print_version(prog);
    /* Subcommand options start after the command name; getopt_long reports
     * "tfm-tokenize: unrecognized option" with the program's name. */
    argv[1] = (char *)prog;
    if (strcmp(cmd, "train") == 0)
        return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "encode") == 0)
        return cmd_encode(argc - 1, argv + 1);
    if (strcmp(cmd, "decode") == 0)
        return cmd_decode(argc - 1, argv + 1);
    if (strcmp(cmd, "vocab") == 0)
        return cmd_vocab(argc - 1, argv + 1);
    if (strcmp(cmd, "convert") == 0)
        return cmd_convert(argc - 1, argv + 1);
    if (cmd[0] == '-')
        tfm_usage_error(prog, "unknown option '%s' (options follow the command)", cmd);
    tfm_usage_error(prog, "unknown command '%s' (train, encode, decode, vocab, convert)", cmd);
}
