/* tfm-eval classify, tag and span: a fine-tuned model's predictions for
 * examples (lib/data/ftdata.h -> lib/data/predict.h), one per example on
 * stdout in input order; with gold data, score's metrics of them (the
 * reports of eval-metrics.c) on stderr and, with --json, as a last line. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/opt.h"
#include "eval.h"
#include "data/ftdata.h"
#include "data/predict.h"
#include "metrics/metrics.h"
#include "metrics/taskmetrics.h"
#include "lm/info.h"
#include "tensor/gemm.h"

static const char *prog = "tfm-eval";

static void __attribute__((noreturn)) usage(void)
{
    printf("Usage: %s classify|tag|span -m MODEL [options] [FILE]\n"
           "Predict with a model fine-tuned by tfm-train (train.task classify, tag or\n"
           "span; or a HuggingFace BertForSequenceClassification,\n"
           "BertForTokenClassification or BertForQuestionAnswering folder) for each\n"
           "example of FILE (default: stdin), in input order.\n"
           "\n"
           "Input (as training's data.text; the gold part may be left out):\n"
           "  classify  [label<TAB>]text or [label<TAB>]text_a<TAB>text_b lines, or JSON\n"
           "            lines {\"label\": ..., \"text\": ...} / {..., \"text_a\", \"text_b\"}\n"
           "  tag       CoNLL word[<TAB>tag] lines, a blank line between sentences, or\n"
           "            JSON lines {\"tokens\": [...], \"tags\": [...]}\n"
           "  span      JSON lines {\"context\", \"question\", \"answers\": {\"text\": [...],\n"
           "            \"answer_start\": [...]}}\n"
           "Output: classify label<TAB>probability (regression: the value; with\n"
           "--top-k K, the K likeliest label<TAB>probability pairs on the line); tag\n"
           "word<TAB>probability<TAB>tag lines, a blank line after each sentence; span\n"
           "answer<TAB>score.  Classify and span keep the input's lines: a blank one\n"
           "gives a blank one.  With gold data, score's metrics follow on stderr.\n"
           "\n"
           "Options:\n"
           "  -m, --model FILE     the fine-tuned model file\n"
           "      --adapter DIR    a LoRA adapter (PEFT's layout, as tfm-train writes it)\n"
           "                       merged into the model's weights at load\n"
           "      --json           one JSON object per example, then with gold data\n"
           "                       {\"metrics\": {...}} (the object of score --json)\n"
           "      --pos-label L    classify: the positive label of the binary scores\n"
           "  -k, --top-k K        classify: the K most probable labels (default 1; K at\n"
           "                       least the classes: all of them)\n"
           "      --max-answer N   span: the longest answer in tokens (default 30)\n"
           "      --batch N        rows per forward pass at most (default 64)\n"
           "      --threads N      threads (default: TFM_NUM_THREADS or the usable CPUs)\n"
           "  -q, --quiet          no metrics or notes on stderr\n"
           "  -h, --help           this help\n"
           "\n"
           "Exit status: 0 success, 1 failure, 2 usage.\n",
           prog);
    exit(0);
}

enum { OPT_JSON = 256, OPT_POS, OPT_MAXANS, OPT_BATCH, OPT_THREADS, OPT_VERSION, OPT_ADAPTER };

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"adapter", required_argument, 0, OPT_ADAPTER},
    {"json", no_argument, 0, OPT_JSON},
    {"pos-label", required_argument, 0, OPT_POS},
    {"top-k", required_argument, 0, 'k'},
    {"max-answer", required_argument, 0, OPT_MAXANS},
    {"batch", required_argument, 0, OPT_BATCH},
    {"threads", required_argument, 0, OPT_THREADS},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

typedef struct tapp {
    const char *model, *adapter, *input, *pos;
    int json, quiet, max_answer, top_k;
    tfm_predictor p;
    tfm_ft_data d;
    tfm_ft_set s;
    tfm_ft_pred pr;
    tfm_buf out;      /* stdout, written once everything succeeded */
} tapp;

/* A TSV field: tabs and line breaks become spaces. */
static void tsv_field(tfm_buf *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tfm_buf_putc(o, s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ? ' ' : s[i]);
}

static void json_double(tfm_buf *o, double v)
{
    if (isfinite(v))
        tfm_buf_printf(o, "%.8g", v);
    else
        tfm_buf_puts(o, "null");
}

/* "{...}\n" from a report becomes the value of "metrics". */
static void metrics_line(tapp *a, tfm_buf *m)
{
    if (!a->json)
        return;
    while (m->len && m->data[m->len - 1] == '\n')
        m->len--;
    tfm_buf_puts(&a->out, "{\"metrics\":");
    tfm_buf_append(&a->out, m->data, m->len);
    tfm_buf_puts(&a->out, "}\n");
}

/* TSV output line N belongs to input line N: a blank input line holds no
 * example and gets a blank output line, so that `paste` lines them up
 * (JSON output names the line instead).  *next: the next line to write. */
static void align_line(tapp *a, long *next, long line)
{
    if (a->json)
        return;
    for (; *next < line; (*next)++)
        tfm_buf_putc(&a->out, '\n');
    *next = line + 1;
}

static void out_classify(tapp *a)
{
    const tfm_ft_labels *l = &a->p.labels;
    const tfm_ft_data *d = &a->d;
    long next = 1;
    int32_t *top = tfm_malloc(sizeof *top * (size_t)(a->pr.n_class ? a->pr.n_class : 1));
    for (size_t e = 0; e < d->n; e++) {
        align_line(a, &next, d->ex[e].line);
        if (a->json) {
            tfm_buf_printf(&a->out, "{\"line\":%ld,", d->ex[e].line);
            if (l->regression) {
                tfm_buf_puts(&a->out, "\"value\":");
                json_double(&a->out, a->pr.value[e]);
            } else {
                const char *lab = l->name[a->pr.label[e]];
                tfm_buf_puts(&a->out, "\"label\":");
                tfm_buf_put_json_string(&a->out, lab, strlen(lab));
                tfm_buf_puts(&a->out, ",\"probability\":");
                json_double(&a->out, a->pr.prob[e]);
                if (a->top_k > 1) {
                    int n = tfm_ft_pred_top(&a->pr, e, a->top_k, top);
                    tfm_buf_puts(&a->out, ",\"top\":[");
                    for (int i = 0; i < n; i++) {
                        const char *t = l->name[top[i]];
                        tfm_buf_puts(&a->out, i ? ",{\"label\":" : "{\"label\":");
                        tfm_buf_put_json_string(&a->out, t, strlen(t));
                        tfm_buf_puts(&a->out, ",\"probability\":");
                        json_double(&a->out, a->pr.probs[e * (size_t)a->pr.n_class + top[i]]);
                        tfm_buf_putc(&a->out, '}');
                    }
                    tfm_buf_putc(&a->out, ']');
                }
            }
            tfm_buf_puts(&a->out, "}\n");
        } else if (l->regression) {
            tfm_buf_printf(&a->out, "%.6g\n", a->pr.value[e]);
        } else {
            /* the first pair is the prediction (its label is the first of
             * the top ones: the same rule picks both) */
            int n = tfm_ft_pred_top(&a->pr, e, a->top_k, top);
            for (int i = 0; i < n; i++) {
                const char *t = l->name[top[i]];
                if (i)
                    tfm_buf_putc(&a->out, '\t');
                tsv_field(&a->out, t, strlen(t));
                tfm_buf_printf(&a->out, "\t%.6g", a->pr.probs[e * (size_t)a->pr.n_class + top[i]]);
            }
            tfm_buf_putc(&a->out, '\n');
        }
    }
    free(top);
    if (!d->gold)
        return;
    tfm_buf m = {0};
    if (l->regression) {
        double *gold = tfm_malloc(d->n * sizeof *gold);
        for (size_t e = 0; e < d->n; e++)
            gold[e] = strtod(d->ex[e].label, NULL);
        tfm_eval_report_regress(gold, a->pr.value, d->n, 1, a->quiet, &m);
        free(gold);
    } else {
        const char **gold = tfm_malloc(d->n * sizeof *gold), **pred = tfm_malloc(d->n * sizeof *pred);
        for (size_t e = 0; e < d->n; e++) {
            gold[e] = d->ex[e].label;
            pred[e] = l->name[a->pr.label[e]];
        }
        const char *pos = a->pos ? a->pos : tfm_metrics_default_pos(gold, pred, d->n);
        tfm_eval_report_classify(gold, pred, d->n, pos, 1, a->quiet, &m);
        free(gold);
        free(pred);
    }
    metrics_line(a, &m);
    tfm_buf_free(&m);
}

static void out_tag(tapp *a)
{
    const tfm_ft_labels *l = &a->p.labels;
    const tfm_ft_data *d = &a->d;
    for (size_t e = 0; e < d->n; e++) {
        const tfm_ft_example *x = &d->ex[e];
        size_t w0 = a->s.ex_word[e];
        if (a->json) {
            tfm_buf_printf(&a->out, "{\"line\":%ld,\"tokens\":[", x->line);
            for (size_t i = 0; i < x->n_words; i++) {
                const char *w = d->word[x->word0 + i];
                tfm_buf_puts(&a->out, i ? "," : "");
                tfm_buf_put_json_string(&a->out, w, strlen(w));
            }
            tfm_buf_puts(&a->out, "],\"tags\":[");
            for (size_t i = 0; i < x->n_words; i++) {
                const char *t = l->name[a->pr.tag[w0 + i]];
                tfm_buf_puts(&a->out, i ? "," : "");
                tfm_buf_put_json_string(&a->out, t, strlen(t));
            }
            tfm_buf_puts(&a->out, "],\"probabilities\":[");
            for (size_t i = 0; i < x->n_words; i++) {
                tfm_buf_puts(&a->out, i ? "," : "");
                json_double(&a->out, a->pr.tag_prob[w0 + i]);
            }
            tfm_buf_puts(&a->out, "]}\n");
            continue;
        }
        for (size_t i = 0; i < x->n_words; i++) {
            const char *w = d->word[x->word0 + i], *t = l->name[a->pr.tag[w0 + i]];
            tsv_field(&a->out, w, strlen(w));
            tfm_buf_printf(&a->out, "\t%.6g\t", a->pr.tag_prob[w0 + i]);
            tsv_field(&a->out, t, strlen(t));
            tfm_buf_putc(&a->out, '\n');
        }
        tfm_buf_putc(&a->out, '\n');
    }
    if (!d->gold)
        return;
    const char **pred = tfm_malloc((d->n_word ? d->n_word : 1) * sizeof *pred);
    size_t *len = tfm_malloc(d->n * sizeof *len);
    for (size_t e = 0; e < d->n; e++) {
        len[e] = d->ex[e].n_words;
        for (size_t i = 0; i < len[e]; i++)
            pred[d->ex[e].word0 + i] = l->name[a->pr.tag[a->s.ex_word[e] + i]];
    }
    tfm_buf m = {0};
    tfm_eval_report_tag(d->tag, pred, len, d->n, 1, a->quiet, &m);
    metrics_line(a, &m);
    tfm_buf_free(&m);
    free(pred);
    free(len);
}

static void out_span(tapp *a)
{
    const tfm_ft_data *d = &a->d;
    char **pred = tfm_malloc(d->n * sizeof *pred);
    long next = 1;
    for (size_t e = 0; e < d->n; e++) {
        const tfm_ft_example *x = &d->ex[e];
        align_line(a, &next, x->line);
        long s0 = a->pr.start[e], s1 = a->pr.end[e];
        const char *ans = x->a + s0;
        size_t n = (size_t)(s1 - s0);
        pred[e] = tfm_strndup(ans, n);
        if (a->json) {
            tfm_buf_printf(&a->out, "{\"line\":%ld,", x->line);
            if (x->id) {
                tfm_buf_puts(&a->out, "\"id\":");
                tfm_buf_put_json_string(&a->out, x->id, strlen(x->id));
                tfm_buf_putc(&a->out, ',');
            }
            tfm_buf_puts(&a->out, "\"answer\":");
            tfm_buf_put_json_string(&a->out, ans, n);
            tfm_buf_printf(&a->out, ",\"answer_start\":%zu,\"score\":",
                           tfm_metrics_utf8_chars(x->a, (size_t)s0));
            json_double(&a->out, a->pr.score[e]);
            tfm_buf_puts(&a->out, "}\n");
        } else {
            tsv_field(&a->out, ans, n);
            tfm_buf_printf(&a->out, "\t%.6g\n", a->pr.score[e]);
        }
    }
    if (d->gold) {
        const char **gold = tfm_malloc((d->n_ans ? d->n_ans : 1) * sizeof *gold);
        size_t *group = tfm_malloc((d->n + 1) * sizeof *group);
        for (size_t k = 0; k < d->n_ans; k++)
            gold[k] = d->ans[k].text;
        for (size_t e = 0; e < d->n; e++)
            group[e] = d->ex[e].ans0;
        group[d->n] = d->n_ans;
        tfm_buf m = {0};
        tfm_eval_report_span((const char *const *)pred, d->n, gold, group, 1, a->quiet, &m);
        metrics_line(a, &m);
        tfm_buf_free(&m);
        free(gold);
        free(group);
    }
    for (size_t e = 0; e < d->n; e++)
        free(pred[e]);
    free(pred);
}

int tfm_eval_task_main(int argc, char **argv)
{
    tapp a = {.input = "-", .max_answer = 30, .top_k = 1};
    long batch = 64, threads = 0;
    int c;
    while ((c = getopt_long(argc, argv, "m:k:qh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': a.model = optarg; break;
        case OPT_ADAPTER: a.adapter = optarg; break;
        case OPT_JSON: a.json = 1; break;
        case OPT_POS: a.pos = optarg; break;
        case 'k': a.top_k = (int)tfm_opt_long(prog, "--top-k", optarg, 1, 1 << 20); break;
        case OPT_MAXANS: a.max_answer = (int)tfm_opt_long(prog, "--max-answer", optarg, 1, 1 << 20); break;
        case OPT_BATCH: batch = tfm_opt_long(prog, "--batch", optarg, 1, 4096); break;
        case OPT_THREADS: threads = tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case 'q': a.quiet = 1; break;
        case 'h': usage();
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, long_opts);
        }
    }
    if (optind >= argc)
        tfm_usage_error(prog, "missing command");
    const char *cmd = argv[optind++];
    tfm_ft_task task = !strcmp(cmd, "classify") ? TFM_FT_CLASSIFY
                       : !strcmp(cmd, "tag")    ? TFM_FT_TAG
                                                : TFM_FT_SPAN;
    if (optind < argc)
        a.input = argv[optind++];
    if (optind < argc)
        tfm_usage_error(prog, "one input file at most");
    if (!a.model)
        tfm_usage_error(prog, "missing -m MODEL");
    if (a.pos && task != TFM_FT_CLASSIFY)
        tfm_usage_error(prog, "--pos-label is for classify");
    if (a.top_k != 1 && task != TFM_FT_CLASSIFY)
        tfm_usage_error(prog, "--top-k is for classify");
    if (a.max_answer != 30 && task != TFM_FT_SPAN)
        tfm_usage_error(prog, "--max-answer is for span");

    tfm_blas_init(tfm_opt_threads(prog, "--threads", threads));
    tfm_err err = {0};
    if (tfm_predictor_open(&a.p, a.model, a.adapter, task, &err) < 0)
        tfm_die(prog, &err);
    if (tfm_model_unchecked(a.model))
        fprintf(stderr, "%s: warning: %s has no checksum: its integrity is not checked\n", prog,
                a.model);
    tfm_ft_read_opts ro = {.need_gold = 0, .pairs = a.p.labels.pairs};
    if (tfm_ft_read_file(&a.d, task, a.input, &ro, &err) < 0)
        tfm_die(prog, &err);
    if (task == TFM_FT_CLASSIFY && a.d.pairs != a.p.labels.pairs)
        tfm_fatal(prog, "%s:%ld: %s, but %s reads %s", a.d.name, a.d.ex[0].line,
                  a.d.pairs ? "a pair of texts" : "one text", a.model,
                  a.p.labels.pairs ? "pairs of texts (text_a, text_b)" : "one text");
    if (tfm_ft_encode(&a.s, &a.d, 0, a.d.n, a.p.tok, &a.p.labels, &a.p.enc, &err) < 0)
        tfm_die(prog, &err);
    tfm_ft_out out;
    if (tfm_ft_run(&a.p.m, &a.s, a.p.labels.regression, 0, (int)batch, &out, NULL, &err) < 0 ||
        tfm_ft_out_check(&out, &a.s, a.model, &err) < 0)
        tfm_die(prog, &err);
    tfm_ft_predict(&a.s, &out, &a.p.labels, a.max_answer, &a.pr);
    tfm_ft_out_free(&out);
    if (a.s.truncated && !a.quiet)
        fprintf(stderr, "%s: %zu of %zu example%s cut to the model's context of %d tokens "
                "(data.truncate head)\n", prog, a.s.truncated, a.d.n, a.d.n == 1 ? "" : "s",
                a.p.enc.max_len);
    if (task == TFM_FT_CLASSIFY)
        out_classify(&a);
    else if (task == TFM_FT_TAG)
        out_tag(&a);
    else
        out_span(&a);
    fwrite(a.out.data, 1, a.out.len, stdout);
    tfm_buf_free(&a.out);
    tfm_ft_pred_free(&a.pr);
    tfm_ft_set_free(&a.s);
    tfm_ft_data_free(&a.d);
    tfm_predictor_close(&a.p);
    tfm_check_stdout(prog);
    return 0;
}
