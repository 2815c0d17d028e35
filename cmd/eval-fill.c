/* tfm-eval fill: the top-k tokens and probabilities an encoder's masked-LM
 * head predicts for each mask token of each input line (lib/infer/fill.h),
 * as HuggingFace's fill-mask pipeline. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "eval.h"
#include "infer/fill.h"
#include "lm/info.h"
#include "tensor/gemm.h"

static const char *prog = "tfm-eval";

static void __attribute__((noreturn)) usage(void)
{
    printf("Usage: %s fill -m MODEL [options] [FILE]\n"
           "For each mask token (the tokenizer's, e.g. [MASK]) of each line of FILE\n"
           "(default: stdin), the tokens an encoder pre-trained with train.task mlm\n"
           "(or a BERT checkpoint with its cls.predictions head) predicts there, with\n"
           "their probabilities (softmax over the vocabulary), most likely first.\n"
           "Blank lines are skipped; every other line needs a mask token.  Nothing is\n"
           "printed unless every line has its answer.\n"
           "\n"
           "Output: one line per mask, line<TAB>mask<TAB>token<TAB>prob<TAB>token<TAB>prob...\n"
           "(the input line number from 1, the mask's number in the line from 1, k\n"
           "token and probability pairs; a token is its vocabulary entry, e.g. ##ing).\n"
           "\n"
           "Options:\n"
           "  -m, --model FILE     the encoder's model file (or a BERT checkpoint folder)\n"
           "      --adapter DIR    a LoRA adapter (PEFT's layout, as tfm-train writes it)\n"
           "                       merged into the model's weights at load\n"
           "  -k, --top-k K        candidates per mask (default 5; at most the vocabulary)\n"
           "      --json           one JSON object per input line: {\"line\": N, \"masks\":\n"
           "                       [{\"position\": P, \"candidates\": [{\"token\": ID,\n"
           "                       \"token_str\": \"...\", \"score\": PROB}, ...]}, ...]}\n"
           "      --threads N      threads (default: TFM_NUM_THREADS or the usable CPUs)\n"
           "  -q, --quiet          no notes on stderr\n"
           "  -h, --help           this help\n"
           "\n"
           "Exit status: 0 success, 1 failure (a line without a mask token, a model\n"
           "that is not an encoder with a masked-LM head, or one that gives NaN), 2 usage.\n",
           prog);
    exit(0);
}

enum { OPT_JSON = 256, OPT_THREADS, OPT_VERSION, OPT_ADAPTER };

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"adapter", required_argument, 0, OPT_ADAPTER},
    {"top-k", required_argument, 0, 'k'},
    {"json", no_argument, 0, OPT_JSON},
    {"threads", required_argument, 0, OPT_THREADS},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

static void put_token(tfm_buf *o, const tfm_tokenizer *tok, uint32_t id, int json)
{
    size_t n = 0;
    const char *s = tfm_tokenizer_piece(tok, id, &n);
    char tmp[32];
    if (!s) { /* a row of the model's vocabulary past the tokenizer's */
        n = (size_t)snprintf(tmp, sizeof tmp, "<%u>", id);
        s = tmp;
    }
    if (json)
        tfm_buf_put_json_string(o, s, n);
    else
        tfm_buf_append(o, s, n);
}

int tfm_eval_fill_main(int argc, char **argv)
{
    const char *model = NULL, *adapter = NULL, *input = "-";
    long k = 5, threads = 0;
    int json = 0, c;
    while ((c = getopt_long(argc, argv, "m:k:qh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case OPT_ADAPTER: adapter = optarg; break;
        case 'k': k = tfm_opt_long(prog, "--top-k", optarg, 1, 1L << 24); break;
        case OPT_JSON: json = 1; break;
        case OPT_THREADS: threads = tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case 'q': break;
        case 'h': usage();
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, long_opts);
        }
    }
    optind++; /* the command */
    if (optind < argc)
        input = argv[optind++];
    if (optind < argc)
        tfm_usage_error(prog, "one input file at most");
    if (!model)
        tfm_usage_error(prog, "missing -m MODEL");

    tfm_blas_init(tfm_opt_threads(prog, "--threads", threads));
    tfm_err err = {0};
    tfm_filler f;
    if (tfm_filler_open(&f, model, adapter, &err) < 0)
        tfm_die(prog, &err);
    if (tfm_model_unchecked(model))
        fprintf(stderr, "%s: warning: %s has no checksum: its integrity is not checked\n", prog,
                model);
    const char *name = strcmp(input, "-") ? input : "stdin";
    FILE *fp = stdin;
    if (strcmp(input, "-") && !(fp = fopen(input, "rb"))) {
        tfm_err_errno(&err, "%s", input);
        tfm_die(prog, &err);
    }
    tfm_buf text = {0}, o = {0};
    if (tfm_read_all(fp, name, &text, &err) < 0)
        tfm_die(prog, &err);
    if (fp != stdin)
        fclose(fp);
    tfm_fill_out r = {0};
    long line = 0;
    for (size_t at = 0; at < text.len;) {
        const char *s = text.data + at;
        const char *nl = memchr(s, '\n', text.len - at);
        size_t n = nl ? (size_t)(nl - s) : text.len - at;
        at += n + (nl != NULL);
        line++;
        if (n && s[n - 1] == '\r')
            n--;
        size_t sp = 0;
        while (sp < n && (s[sp] == ' ' || s[sp] == '\t'))
            sp++;
        if (sp == n)
            continue;
        int rc = tfm_filler_run(&f, s, n, (int)k, &r, &err);
        if (rc < 0)
            tfm_fatal(prog, "%s:%ld: %s", name, line, err.msg);
        if (json)
            tfm_buf_printf(&o, "{\"line\": %ld, \"masks\": [", line);
        for (int m = 0; m < r.n_mask; m++) {
            if (json)
                tfm_buf_printf(&o, "%s{\"position\": %d, \"candidates\": [", m ? ", " : "",
                               r.pos[m]);
            else
                tfm_buf_printf(&o, "%ld\t%d", line, m + 1);
            for (int j = 0; j < r.k; j++) {
                uint32_t id = r.id[(size_t)m * r.k + j];
                double p = r.prob[(size_t)m * r.k + j];
                if (json) {
                    tfm_buf_printf(&o, "%s{\"token\": %u, \"token_str\": ", j ? ", " : "", id);
                    put_token(&o, f.tok, id, 1);
                    tfm_buf_puts(&o, ", \"score\": ");
                    tfm_buf_put_json_double(&o, 9, p);
                    tfm_buf_putc(&o, '}');
                } else {
                    tfm_buf_putc(&o, '\t');
                    put_token(&o, f.tok, id, 0);
                    tfm_buf_printf(&o, "\t%.6g", p);
                }
            }
            tfm_buf_puts(&o, json ? "]}" : "\n");
        }
        if (json)
            tfm_buf_puts(&o, "]}\n");
    }
    /* printed only once every line has its answer: a bad line (no mask,
     * too long, NaN) fails the run before any output, not after some */
    fwrite(o.data, 1, o.len, stdout);
    tfm_fill_out_free(&r);
    tfm_buf_free(&o);
    tfm_buf_free(&text);
    tfm_filler_close(&f);
    tfm_check_stdout(prog);
    return 0;
}
