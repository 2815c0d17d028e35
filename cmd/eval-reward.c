/* tfm-eval reward: a reward model's scores (train.task reward;
 * lib/data/reward.h) of {"prompt", "chosen", "rejected"} pairs, one
 * chosen<TAB>rejected line each and the accuracy on stderr, or of
 * {"prompt", "completion"} answers, one score a line. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "data/chat.h"
#include "data/reward.h"
#include "eval.h"
#include "io/json.h"
#include "lm/info.h"
#include "tensor/gemm.h"
#include "train/run_config.h"

static const char *prog = "tfm-eval";

static void __attribute__((noreturn)) usage(void)
{
    printf("Usage: %s reward -m MODEL [options] [FILE]\n"
           "Score answers with a reward model trained by tfm-train (train.task reward):\n"
           "its one output on the last token of prompt + answer + end-of-text.\n"
           "\n"
           "Input (FILE, default stdin), JSON Lines, either\n"
           "  {\"prompt\": P, \"chosen\": C, \"rejected\": R}  pairs: one line\n"
           "      chosen_score<TAB>rejected_score each, then on stderr the accuracy (the\n"
           "      fraction whose chosen answer scores higher) and the mean margin\n"
           "  {\"prompt\": P, \"completion\": A}  answers: one score a line\n"
           "\n"
           "Options:\n"
           "  -m, --model FILE     the reward model file\n"
           "      --json           one JSON object a line ({\"chosen\", \"rejected\"} or\n"
           "                       {\"score\"}), then for pairs {\"accuracy\", \"margin\"}\n"
           "      --batch N        texts per forward pass at most (default 64)\n"
           "      --threads N      threads (default: TFM_NUM_THREADS or the usable CPUs)\n"
           "  -q, --quiet          no summary on stderr\n"
           "  -h, --help           this help\n"
           "\n"
           "Exit status: 0 success, 1 failure, 2 usage.\n",
           prog);
    exit(0);
}

enum { OPT_JSON = 256, OPT_BATCH, OPT_THREADS, OPT_VERSION };

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"json", no_argument, 0, OPT_JSON},
    {"batch", required_argument, 0, OPT_BATCH},
    {"threads", required_argument, 0, OPT_THREADS},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

/* Whether the first object of the text has a "chosen" key (pairs). */
static int is_pairs(const char *text, size_t len, const char *name)
{
    size_t pos = 0;
    long line = 0;
    while (pos < len) {
        const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + 1;
        line++;
        if (!memchr(s, '{', n))
            continue;
        tfm_json_doc doc;
        tfm_err err = {0};
        if (tfm_json_parse_line(&doc, s, n, name, line, &err) < 0)
            return 0; /* the reader names the line */
        int pairs = tfm_json_get(doc.root, "chosen") != NULL;
        tfm_json_doc_free(&doc);
        return pairs;
    }
    return 0;
}

int tfm_eval_reward_main(int argc, char **argv)
{
    const char *model = NULL, *input = "-";
    long batch = 64, threads = 0;
    int json = 0, quiet = 0, c;
    while ((c = getopt_long(argc, argv, "m:qh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case OPT_JSON: json = 1; break;
        case OPT_BATCH: batch = tfm_opt_long(prog, "--batch", optarg, 1, 4096); break;
        case OPT_THREADS: threads = tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case 'q': quiet = 1; break;
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
    tfm_config cfg;
    tfm_model m;
    tfm_tokenizer *tok = NULL;
    if (tfm_model_load(model, &cfg, &m, &tok, &err) < 0)
        tfm_die(prog, &err);
    if (tfm_reward_model_check(&m.cfg, model, &err) < 0)
        tfm_die(prog, &err);
    if (!tok)
        tfm_fatal(prog, "%s has no tokenizer to read text with", model);
    tfm_model_set_training(&m, 0);
    tfm_model_set_inference(&m);
    const char *name = strcmp(input, "-") ? input : "stdin";
    FILE *fp = strcmp(input, "-") ? fopen(input, "rb") : stdin;
    if (!fp) {
        tfm_err_errno(&err, "%s", input);
        tfm_die(prog, &err);
    }
    tfm_buf text = {0};
    if (tfm_read_all(fp, name, &text, &err) < 0)
        tfm_die(prog, &err);
    if (fp != stdin)
        fclose(fp);
    int pairs = is_pairs(text.data ? text.data : "", text.len, name);
    tfm_chat_data d;
    if (tfm_chat_read(&d, text.data ? text.data : "", text.len, name, pairs, &err) < 0)
        tfm_die(prog, &err);
    tfm_buf_free(&text);
    size_t per = pairs ? 2 : 1, n = d.n * per;
    uint32_t **ids = tfm_calloc(n, sizeof *ids);
    int *len = tfm_calloc(n, sizeof *len);
    tfm_tok_scratch *sc = tfm_tok_scratch_new(tok);
    tfm_ids a = {0}, b = {0};
    int T = m.cfg.block_size;
    size_t cut = 0;
    for (size_t i = 0; i < d.n; i++) {
        const tfm_chat_example *e = &d.ex[i];
        if (!pairs && e->format != TFM_CHAT_PROMPT_COMPLETION)
            tfm_fatal(prog, "%s:%ld: expected {\"prompt\", \"completion\"} strings or "
                      "{\"prompt\", \"chosen\", \"rejected\"}", d.name, e->line);
        if (pairs)
            tfm_pref_encode(e, tok, sc, &a, &b);
        else
            tfm_pref_encode_one(e, tok, sc, &a);
        for (size_t k = 0; k < per; k++) {
            const tfm_ids *v = k ? &b : &a;
            size_t L = v->len < (size_t)T ? v->len : (size_t)T;
            cut += L < v->len;
            ids[i * per + k] = tfm_malloc(L * sizeof **ids);
            memcpy(ids[i * per + k], v->data, L * sizeof **ids);
            len[i * per + k] = (int)L;
        }
    }
    tfm_ids_free(&a);
    tfm_ids_free(&b);
    tfm_tok_scratch_free(sc);
    /* chosen and rejected side by side: reorder for the scores' lines */
    float *score = tfm_malloc((n ? n : 1) * sizeof *score);
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    int32_t pad = sp->pad >= 0 ? (int32_t)sp->pad : sp->eos >= 0 ? (int32_t)sp->eos : 0;
    if (tfm_reward_score(&m, (const uint32_t *const *)ids, len, n, (int)batch, pad, score,
                         &err) < 0)
        tfm_die(prog, &err);
    tfm_buf out = {0};
    size_t right = 0;
    double margin = 0;
    for (size_t i = 0; i < d.n; i++) {
        if (pairs) {
            double rc = score[2 * i], rr = score[2 * i + 1];
            right += rc > rr;
            margin += rc - rr;
            tfm_buf_printf(&out, json ? "{\"chosen\": %.7g, \"rejected\": %.7g}\n"
                                      : "%.7g\t%.7g\n", rc, rr);
        } else {
            tfm_buf_printf(&out, json ? "{\"score\": %.7g}\n" : "%.7g\n", score[i]);
        }
    }
    double acc = d.n ? (double)right / (double)d.n : 0, mg = d.n ? margin / (double)d.n : 0;
    if (pairs && json)
        tfm_buf_printf(&out, "{\"accuracy\": %.6g, \"margin\": %.6g}\n", acc, mg);
    fwrite(out.data, 1, out.len, stdout);
    tfm_check_stdout(prog);
    if (!quiet && cut)
        fprintf(stderr, "%s: %zu text%s cut to the model's context of %d tokens\n", prog, cut,
                cut == 1 ? "" : "s", T);
    if (!quiet && pairs)
        fprintf(stderr, "%s: reward accuracy %.4f (%zu/%zu pairs), mean margin %.4f\n", prog,
                acc, right, d.n, mg);
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(len);
    free(score);
    tfm_buf_free(&out);
    tfm_chat_data_free(&d);
    tfm_tokenizer_free(tok);
    tfm_model_free(&m);
    return 0;
}
