/* tfm-eval score, bleu, chrf and text: metrics of predictions made elsewhere, no
 * model.  Files -> lib/data/taskdata.h (one label, tag sequence, answer or
 * line each) -> lib/metrics/taskmetrics.h, bleu.h, textmetrics.h -> a summary on stderr and
 * TSV or one JSON object on stdout, as the other tfm-eval commands. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "metrics/bleu.h"
#include "data/taskdata.h"
#include "metrics/taskmetrics.h"
#include "metrics/textmetrics.h"
#include "text/utf8.h"

#include "eval.h"

static const char *prog = "tfm-eval";

static void __attribute__((noreturn)) usage(void)
{
    printf("Usage: %s score --task TASK --gold GOLD [options] [PRED]\n"
           "       %s bleu|chrf|text --ref REF [--ref REF2 ...] [options] [HYP]\n"
           "Score predictions made elsewhere (PRED or HYP, default: stdin).\n"
           "\n"
           "Commands:\n"
           "  score   classify: one label a line; accuracy, F1 (macro, micro, binary),\n"
           "            Matthews correlation\n"
           "          regress: one number a line; Pearson and Spearman correlation\n"
           "          tag: CoNLL (tag in the last column) or one tag sequence a line;\n"
           "            entity precision, recall, F1 (conlleval rules), token accuracy\n"
           "          span: one answer a line (GOLD: answers separated by tabs);\n"
           "            SQuAD v1.1 exact match and F1, in percent\n"
           "  bleu    corpus BLEU as sacrebleu (13a tokenizer, exp smoothing)\n"
           "  chrf    chrF2 as sacrebleu (character 6-grams, whitespace removed)\n"
           "  text    text-to-text outputs, in percent: exact (the same string once\n"
           "            leading and trailing whitespace is dropped), SQuAD exact match\n"
           "            and F1 (normalised), BLEU, chrF, and macro F1 when the first\n"
           "            references form a label set\n"
           "\n"
           "Options:\n"
           "      --task T         score: classify, regress, tag or span\n"
           "      --gold FILE      score: the right labels, in the same format\n"
           "      --pos-label L    classify: the positive label of the binary scores\n"
           "                       (default: 1, else true, when there are two labels)\n"
           "      --tag-format F   tag: auto (default), conll or lines\n"
           "      --ref FILE       bleu, chrf, text: a reference, one line per hypothesis\n"
           "                       (repeat for several references)\n"
           "      --lowercase      bleu, chrf: compare lowercased text\n"
           "      --sentence       bleu, chrf: a score per line too (sentence BLEU with\n"
           "                       effective order)\n"
           "      --max-labels N   text: the references are a label set when they have\n"
           "                       at most N distinct lines (default %d), each twice on\n"
           "                       average; 0: never\n"
           "      --json           one JSON object on stdout (default: TSV)\n"
           "      --threads N      accepted as by every tfm program; scoring uses one\n"
           "  -q, --quiet          no summary on stderr\n"
           "  -h, --help           this help\n"
           "\n"
           "Exit status: 0 success, 1 failure, 2 usage.\n",
           prog, prog, TFM_TEXT_MAX_LABELS);
    exit(0);
}

enum { OPT_TASK = 256, OPT_GOLD, OPT_POS, OPT_TAGFMT, OPT_REF, OPT_LC, OPT_SENT, OPT_JSON,
       OPT_THREADS, OPT_VERSION, OPT_MAX_LABELS };

static const struct option long_opts[] = {
    {"task", required_argument, 0, OPT_TASK},
    {"gold", required_argument, 0, OPT_GOLD},
    {"pos-label", required_argument, 0, OPT_POS},
    {"tag-format", required_argument, 0, OPT_TAGFMT},
    {"ref", required_argument, 0, OPT_REF},
    {"lowercase", no_argument, 0, OPT_LC},
    {"sentence", no_argument, 0, OPT_SENT},
    {"max-labels", required_argument, 0, OPT_MAX_LABELS},
    {"json", no_argument, 0, OPT_JSON},
    {"threads", required_argument, 0, OPT_THREADS},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

typedef struct mapp {
    const char *cmd, *task, *gold, *pos, *input, *name;
    const char **refs;
    int nrefs, lowercase, sentence, json, quiet;
    long max_labels; /* text; -1: not given */
    tfm_tag_format tag_format;
} mapp;

/* A file ("-": stdin) into b; its name for messages in *name. */
static void slurp(const char *path, tfm_buf *b, const char **name)
{
    tfm_err err = {0};
    int is_stdin = !strcmp(path, "-");
    *name = is_stdin ? "stdin" : path;
    FILE *fp = is_stdin ? stdin : fopen(path, "rb");
    if (!fp) {
        tfm_err_errno(&err, "%s", path);
        tfm_die(prog, &err);
    }
    if (tfm_read_all(fp, *name, b, &err) < 0)
        tfm_die(prog, &err);
    if (!is_stdin)
        fclose(fp);
    /* one rule for every text input (as JSON Lines and tfm-embed): labels,
     * answers and sentences compared byte by byte must be text */
    long line = 1;
    for (size_t pos = 0; pos < b->len; line++) {
        const char *s = b->data + pos, *nl = memchr(s, '\n', b->len - pos);
        size_t n = nl ? (size_t)(nl - s) : b->len - pos;
        if (!tfm_utf8_valid((const unsigned char *)s, n)) {
            tfm_err_at(&err, *name, line, 0, "invalid UTF-8");
            tfm_die(prog, &err);
        }
        pos += n + 1;
    }
}

/* JSON number, null when not finite (JSON has no NaN or infinity). */
static void json_num(tfm_buf *o, const char *key, double x)
{
    tfm_buf_printf(o, ",\"%s\":", key);
    if (isfinite(x))
        tfm_buf_printf(o, "%.10g", x);
    else
        tfm_buf_puts(o, "null");
}

static void json_str(tfm_buf *o, const char *key, const char *s)
{
    tfm_buf_printf(o, ",\"%s\":", key);
    if (s)
        tfm_buf_put_json_string(o, s, strlen(s));
    else
        tfm_buf_puts(o, "null");
}

/* TSV value: "-" when not finite, as the other commands print unknowns. */
static void tsv_num(tfm_buf *o, double x, int last)
{
    if (isfinite(x))
        tfm_buf_printf(o, "%.6g", x);
    else
        tfm_buf_putc(o, '-');
    tfm_buf_putc(o, last ? '\n' : '\t');
}

static void put_stdout(tfm_buf *o)
{
    fwrite(o->data, 1, o->len, stdout);
    tfm_buf_free(o);
}

/* Both files must have as many items as each other (data/taskdata.h). */
static void same_count(size_t n_pred, size_t n_gold, const char *pname, const char *gname,
                       const char *what)
{
    tfm_err err = {0};
    if (tfm_taskdata_same_count(n_pred, n_gold, pname, gname, what, &err) < 0)
        tfm_die(prog, &err);
}

/* ---- score ----------------------------------------------------------- */

void tfm_eval_report_classify(const char *const *gold, const char *const *pred, size_t n,
                              const char *pos, int json, int quiet, tfm_buf *o)
{
    tfm_err err = {0};
    if (pos && tfm_metrics_check_label(gold, pred, n, pos, &err) < 0)
        tfm_die(prog, &err);
    tfm_classify_result r;
    tfm_metrics_classify(gold, pred, n, pos, &r);
    if (json) {
        tfm_buf_printf(o, "{\"task\":\"classify\",\"items\":%zu,\"labels\":%zu,\"correct\":%zu",
                       r.n, r.labels, r.correct);
        json_num(o, "accuracy", r.accuracy);
        json_num(o, "f1_macro", r.f1_macro);
        json_num(o, "f1_micro", r.f1_micro);
        json_num(o, "f1_weighted", r.f1_weighted);
        json_num(o, "mcc", r.mcc);
        json_str(o, "pos_label", pos);
        json_num(o, "precision_pos", pos ? r.precision_pos : NAN);
        json_num(o, "recall_pos", pos ? r.recall_pos : NAN);
        json_num(o, "f1_pos", pos ? r.f1_pos : NAN);
        tfm_buf_puts(o, "}\n");
    } else {
        tfm_buf_printf(o, "items\tlabels\taccuracy\tf1_macro\tf1_micro\tf1_weighted\tmcc"
                       "\tpos_label\tprecision_pos\trecall_pos\tf1_pos\n%zu\t%zu\t", r.n,
                       r.labels);
        tsv_num(o, r.accuracy, 0);
        tsv_num(o, r.f1_macro, 0);
        tsv_num(o, r.f1_micro, 0);
        tsv_num(o, r.f1_weighted, 0);
        tsv_num(o, r.mcc, 0);
        tfm_buf_printf(o, "%s\t", pos ? pos : "-");
        tsv_num(o, pos ? r.precision_pos : NAN, 0);
        tsv_num(o, pos ? r.recall_pos : NAN, 0);
        tsv_num(o, pos ? r.f1_pos : NAN, 1);
    }
    if (!quiet) {
        fprintf(stderr, "%s: accuracy %.4f (%zu/%zu), F1 macro %.4f, micro %.4f, weighted "
                "%.4f, MCC %.4f (%zu labels)\n", prog, r.accuracy, r.correct, r.n, r.f1_macro,
                r.f1_micro, r.f1_weighted, r.mcc, r.labels);
        if (pos)
            fprintf(stderr, "%s: label \"%s\": F1 %.4f, precision %.4f (%zu/%zu), recall "
                    "%.4f (%zu/%zu)\n", prog, pos, r.f1_pos, r.precision_pos, r.pos_tp,
                    r.pos_pred, r.recall_pos, r.pos_tp, r.pos_gold);
    }
}

void tfm_eval_report_regress(const double *gold, const double *pred, size_t n, int json,
                             int quiet, tfm_buf *o)
{
    double pr = tfm_metrics_pearson(gold, pred, n);
    double sp = tfm_metrics_spearman(gold, pred, n);
    if (json) {
        tfm_buf_printf(o, "{\"task\":\"regress\",\"items\":%zu", n);
        json_num(o, "pearson", pr);
        json_num(o, "spearman", sp);
        tfm_buf_puts(o, "}\n");
    } else {
        tfm_buf_printf(o, "items\tpearson\tspearman\n%zu\t", n);
        tsv_num(o, pr, 0);
        tsv_num(o, sp, 1);
    }
    if (!quiet) {
        fprintf(stderr, "%s: Pearson %.4f, Spearman %.4f (%zu items)\n", prog, pr, sp, n);
        if (!isfinite(pr))
            fprintf(stderr, "%s: a side is constant (or fewer than 2 items): correlation "
                    "undefined\n", prog);
    }
}

void tfm_eval_report_tag(const char *const *gold, const char *const *pred, const size_t *len,
                         size_t n_sent, int json, int quiet, tfm_buf *o)
{
    tfm_tag_result r;
    tfm_metrics_tag(gold, pred, len, n_sent, &r);
    if (json) {
        tfm_buf_printf(o, "{\"task\":\"tag\",\"sentences\":%zu,\"tokens\":%zu,"
                       "\"gold_entities\":%zu,\"pred_entities\":%zu,\"correct_entities\":%zu",
                       n_sent, r.tokens, r.gold_chunks, r.pred_chunks, r.correct_chunks);
        json_num(o, "precision", r.precision);
        json_num(o, "recall", r.recall);
        json_num(o, "f1", r.f1);
        json_num(o, "token_accuracy", r.token_accuracy);
        tfm_buf_puts(o, "}\n");
    } else {
        tfm_buf_printf(o, "sentences\ttokens\tgold_entities\tpred_entities\tcorrect_entities"
                       "\tprecision\trecall\tf1\ttoken_accuracy\n%zu\t%zu\t%zu\t%zu\t%zu\t",
                       n_sent, r.tokens, r.gold_chunks, r.pred_chunks, r.correct_chunks);
        tsv_num(o, r.precision, 0);
        tsv_num(o, r.recall, 0);
        tsv_num(o, r.f1, 0);
        tsv_num(o, r.token_accuracy, 1);
    }
    if (!quiet)
        fprintf(stderr, "%s: entities: F1 %.4f, precision %.4f (%zu/%zu), recall %.4f "
                "(%zu/%zu); token accuracy %.4f (%zu/%zu)\n", prog, r.f1, r.precision,
                r.correct_chunks, r.pred_chunks, r.recall, r.correct_chunks, r.gold_chunks,
                r.token_accuracy, r.correct_tokens, r.tokens);
}

void tfm_eval_report_span(const char *const *pred, size_t n, const char *const *gold,
                          const size_t *group, int json, int quiet, tfm_buf *o)
{
    double em, f1;
    tfm_metrics_span(pred, n, gold, group, &em, &f1);
    if (json) {
        tfm_buf_printf(o, "{\"task\":\"span\",\"items\":%zu", n);
        json_num(o, "exact_match", em);
        json_num(o, "f1", f1);
        tfm_buf_puts(o, "}\n");
    } else {
        tfm_buf_printf(o, "items\texact_match\tf1\n%zu\t", n);
        tsv_num(o, em, 0);
        tsv_num(o, f1, 1);
    }
    if (!quiet)
        fprintf(stderr, "%s: exact match %.2f, F1 %.2f (%zu items)\n", prog, em, f1, n);
}

static void score_classify(mapp *a, const tfm_taskdata *g, const tfm_taskdata *p)
{
    same_count(p->n, g->n, a->name, a->gold, "lines");
    const char *pos = a->pos ? a->pos : tfm_metrics_default_pos(g->item, p->item, g->n);
    tfm_buf o = {0};
    tfm_eval_report_classify(g->item, p->item, g->n, pos, a->json, a->quiet, &o);
    put_stdout(&o);
}

static void score_regress(mapp *a, const tfm_taskdata *g, const tfm_taskdata *p)
{
    same_count(p->n, g->n, a->name, a->gold, "lines");
    tfm_buf o = {0};
    tfm_eval_report_regress(g->value, p->value, g->n, a->json, a->quiet, &o);
    put_stdout(&o);
}

static void score_tag(mapp *a, const tfm_taskdata *g, const tfm_taskdata *p)
{
    same_count(p->n_group, g->n_group, a->name, a->gold, "sentences");
    tfm_err err = {0};
    if (tfm_taskdata_same_sentences(p, g, a->name, a->gold, &err) < 0)
        tfm_die(prog, &err);
    size_t *len = tfm_malloc((g->n_group + 1) * sizeof *len);
    for (size_t s = 0; s < g->n_group; s++)
        len[s] = g->group[s + 1] - g->group[s];
    tfm_buf o = {0};
    tfm_eval_report_tag(g->item, p->item, len, g->n_group, a->json, a->quiet, &o);
    free(len);
    put_stdout(&o);
}

static void score_span(mapp *a, const tfm_taskdata *g, const tfm_taskdata *p)
{
    same_count(p->n_group, g->n_group, a->name, a->gold, "lines");
    const char **pred = tfm_malloc(g->n_group * sizeof *pred);
    for (size_t i = 0; i < g->n_group; i++)
        pred[i] = p->item[p->group[i]];
    tfm_buf o = {0};
    tfm_eval_report_span(pred, g->n_group, g->item, g->group, a->json, a->quiet, &o);
    free(pred);
    put_stdout(&o);
}

static void cmd_score(mapp *a)
{
    static const char *const tasks[] = {"classify", "regress", "tag", "span"};
    int t = -1;
    for (int k = 0; k < 4; k++)
        if (!strcmp(a->task, tasks[k]))
            t = k;
    if (t < 0)
        tfm_usage_error(prog, "unknown --task '%s' (classify, regress, tag, span)", a->task);
    if (a->pos && t != 0)
        tfm_usage_error(prog, "--pos-label is for --task classify");
    if (a->tag_format != TFM_TAGS_AUTO && t != 2)
        tfm_usage_error(prog, "--tag-format is for --task tag");
    if (!strcmp(a->gold, "-") && !strcmp(a->input, "-"))
        tfm_usage_error(prog, "--gold and the predictions cannot both be stdin");
    tfm_buf gb = {0}, pb = {0};
    const char *gname;
    slurp(a->gold, &gb, &gname);
    slurp(a->input, &pb, &a->name);
    a->gold = gname;
    tfm_taskdata g, p;
    tfm_err err = {0};
    int rc;
    switch (t) {
    case 0:
        rc = tfm_taskdata_labels(&g, gb.data, gb.len, a->gold, &err);
        if (rc == 0 && (rc = tfm_taskdata_labels(&p, pb.data, pb.len, a->name, &err)) < 0)
            tfm_taskdata_free(&g);
        break;
    case 1:
        rc = tfm_taskdata_values(&g, gb.data, gb.len, a->gold, &err);
        if (rc == 0 && (rc = tfm_taskdata_values(&p, pb.data, pb.len, a->name, &err)) < 0)
            tfm_taskdata_free(&g);
        break;
    case 2:
        rc = tfm_taskdata_tags(&g, gb.data, gb.len, a->gold, a->tag_format, &err);
        if (rc == 0 &&
            (rc = tfm_taskdata_tags(&p, pb.data, pb.len, a->name, a->tag_format, &err)) < 0)
            tfm_taskdata_free(&g);
        break;
    default:
        rc = tfm_taskdata_answers(&g, gb.data, gb.len, a->gold, 1, &err);
        if (rc == 0 && (rc = tfm_taskdata_answers(&p, pb.data, pb.len, a->name, 0, &err)) < 0)
            tfm_taskdata_free(&g);
        break;
    }
    if (rc < 0)
        tfm_die(prog, &err);
    size_t ng = t == 2 || t == 3 ? g.n_group : g.n;
    if (ng == 0)
        tfm_fatal(prog, "%s: empty: nothing to score", a->gold);
    switch (t) {
    case 0: score_classify(a, &g, &p); break;
    case 1: score_regress(a, &g, &p); break;
    case 2: score_tag(a, &g, &p); break;
    default: score_span(a, &g, &p); break;
    }
    tfm_taskdata_free(&g);
    tfm_taskdata_free(&p);
    tfm_buf_free(&gb);
    tfm_buf_free(&pb);
}

/* ---- bleu, chrf ------------------------------------------------------ */

/* The hypotheses (a line each) and the --ref files, as many lines each. */
typedef struct hyprefs {
    tfm_buf hb, *rb;
    tfm_taskdata h, *r;
} hyprefs;

static void hyprefs_read(mapp *a, hyprefs *x)
{
    tfm_err err = {0};
    memset(x, 0, sizeof *x);
    slurp(a->input, &x->hb, &a->name);
    if (tfm_taskdata_answers(&x->h, x->hb.data, x->hb.len, a->name, 0, &err) < 0)
        tfm_die(prog, &err);
    if (x->h.n == 0)
        tfm_fatal(prog, "%s: empty input: no hypotheses", a->name);
    x->rb = tfm_calloc((size_t)a->nrefs, sizeof *x->rb);
    x->r = tfm_calloc((size_t)a->nrefs, sizeof *x->r);
    for (int k = 0; k < a->nrefs; k++) {
        const char *rname;
        slurp(a->refs[k], &x->rb[k], &rname);
        if (tfm_taskdata_answers(&x->r[k], x->rb[k].data, x->rb[k].len, rname, 0, &err) < 0)
            tfm_die(prog, &err);
        same_count(x->r[k].n, x->h.n, rname, a->name, "lines");
    }
}

static void hyprefs_free(const mapp *a, hyprefs *x)
{
    for (int k = 0; k < a->nrefs; k++) {
        tfm_taskdata_free(&x->r[k]);
        tfm_buf_free(&x->rb[k]);
    }
    free(x->r);
    free(x->rb);
    tfm_taskdata_free(&x->h);
    tfm_buf_free(&x->hb);
}

static void cmd_translation(mapp *a, int chrf)
{
    hyprefs x;
    hyprefs_read(a, &x);
    const tfm_taskdata h = x.h, *r = x.r;
    const char **rs = tfm_malloc((size_t)a->nrefs * sizeof *rs);
    size_t *rl = tfm_malloc((size_t)a->nrefs * sizeof *rl);
    tfm_bleu_stats bs = {0};
    tfm_chrf_stats cs = {0};
    tfm_buf per = {0}; /* --sentence: the per-line part of the output */
    if (a->sentence && !a->json)
        tfm_buf_puts(&per, chrf ? "line\tchrf\n"
                                : "line\tbleu\tp1\tp2\tp3\tp4\tbp\tsys_len\tref_len\n");
    for (size_t i = 0; i < h.n; i++) {
        for (int k = 0; k < a->nrefs; k++) {
            rs[k] = r[k].item[i];
            rl[k] = strlen(rs[k]);
        }
        const char *hy = h.item[i];
        size_t hl = strlen(hy);
        if (chrf) {
            tfm_chrf_stats one = {0};
            tfm_chrf_add(&one, hy, hl, rs, rl, a->nrefs, a->lowercase);
            tfm_chrf_stats_merge(&cs, &one);
            if (!a->sentence)
                continue;
            double s = tfm_chrf_compute(&one);
            if (a->json)
                tfm_buf_printf(&per, "%s{\"line\":%ld,\"chrf\":%.10g}", i ? "," : "",
                               h.line[i], s);
            else
                tfm_buf_printf(&per, "%ld\t%.6g\n", h.line[i], s);
        } else {
            tfm_bleu_stats one = {0};
            tfm_bleu_add(&one, hy, hl, rs, rl, a->nrefs, a->lowercase);
            tfm_bleu_stats_merge(&bs, &one);
            if (!a->sentence)
                continue;
            tfm_bleu_score sc;
            tfm_bleu_compute(&one, 1, &sc);
            if (a->json)
                tfm_buf_printf(&per, "%s{\"line\":%ld,\"bleu\":%.10g,\"precisions\":[%.10g,"
                               "%.10g,%.10g,%.10g],\"bp\":%.10g,\"sys_len\":%.0f,"
                               "\"ref_len\":%.0f}", i ? "," : "", h.line[i], sc.bleu,
                               sc.precisions[0], sc.precisions[1], sc.precisions[2],
                               sc.precisions[3], sc.bp, sc.sys_len, sc.ref_len);
            else
                tfm_buf_printf(&per, "%ld\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.0f\t%.0f\n",
                               h.line[i], sc.bleu, sc.precisions[0], sc.precisions[1],
                               sc.precisions[2], sc.precisions[3], sc.bp, sc.sys_len,
                               sc.ref_len);
        }
    }
    tfm_buf sig = {0}, sent_sig = {0}, o = {0};
    if (chrf) {
        tfm_chrf_signature(&sig, a->nrefs, a->lowercase);
        double s = tfm_chrf_compute(&cs);
        if (a->json) {
            tfm_buf_printf(&o, "{\"metric\":\"chrF2\",\"lines\":%zu,\"chrf\":%.10g", h.n, s);
            json_str(&o, "signature", tfm_buf_cstr(&sig));
            if (a->sentence)
                tfm_buf_printf(&o, ",\"sentences\":[%.*s]", (int)per.len, per.data);
            tfm_buf_puts(&o, "}\n");
        } else if (a->sentence) {
            tfm_buf_append(&o, per.data, per.len);
        } else {
            tfm_buf_printf(&o, "lines\tchrf\tsignature\n%zu\t%.6g\t%s\n", h.n, s,
                           tfm_buf_cstr(&sig));
        }
        if (!a->quiet)
            fprintf(stderr, "%s: chrF2 = %.2f (%zu lines)\n%s: %s\n", prog, s, h.n, prog,
                    tfm_buf_cstr(&sig));
    } else {
        tfm_bleu_signature(&sig, a->nrefs, a->lowercase, 0);
        tfm_bleu_signature(&sent_sig, a->nrefs, a->lowercase, 1);
        tfm_bleu_score sc;
        tfm_bleu_compute(&bs, 0, &sc);
        double ratio = sc.ref_len > 0 ? sc.sys_len / sc.ref_len : 0;
        if (a->json) {
            tfm_buf_printf(&o, "{\"metric\":\"BLEU\",\"lines\":%zu,\"bleu\":%.10g,"
                           "\"precisions\":[%.10g,%.10g,%.10g,%.10g],\"bp\":%.10g,"
                           "\"ratio\":%.10g,\"sys_len\":%.0f,\"ref_len\":%.0f", h.n, sc.bleu,
                           sc.precisions[0], sc.precisions[1], sc.precisions[2],
                           sc.precisions[3], sc.bp, ratio, sc.sys_len, sc.ref_len);
            json_str(&o, "signature", tfm_buf_cstr(&sig));
            if (a->sentence) {
                json_str(&o, "sentence_signature", tfm_buf_cstr(&sent_sig));
                tfm_buf_printf(&o, ",\"sentences\":[%.*s]", (int)per.len, per.data);
            }
            tfm_buf_puts(&o, "}\n");
        } else if (a->sentence) {
            tfm_buf_append(&o, per.data, per.len);
        } else {
            tfm_buf_printf(&o, "lines\tbleu\tp1\tp2\tp3\tp4\tbp\tratio\tsys_len\tref_len"
                           "\tsignature\n%zu\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.0f"
                           "\t%.0f\t%s\n", h.n, sc.bleu, sc.precisions[0], sc.precisions[1],
                           sc.precisions[2], sc.precisions[3], sc.bp, ratio, sc.sys_len,
                           sc.ref_len, tfm_buf_cstr(&sig));
        }
        if (!a->quiet) {
            /* sacrebleu's score line */
            fprintf(stderr, "%s: BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f "
                    "hyp_len = %.0f ref_len = %.0f)\n%s: %s\n", prog, sc.bleu,
                    sc.precisions[0], sc.precisions[1], sc.precisions[2], sc.precisions[3],
                    sc.bp, ratio, sc.sys_len, sc.ref_len, prog, tfm_buf_cstr(&sig));
            if (a->sentence)
                fprintf(stderr, "%s: per line: %s\n", prog, tfm_buf_cstr(&sent_sig));
        }
    }
    put_stdout(&o);
    tfm_buf_free(&per);
    tfm_buf_free(&sig);
    tfm_buf_free(&sent_sig);
    free(rs);
    free(rl);
    hyprefs_free(a, &x);
}

/* ---- text ------------------------------------------------------------ */

static void cmd_text(mapp *a)
{
    hyprefs x;
    hyprefs_read(a, &x);
    const tfm_taskdata h = x.h, *r = x.r;
    /* line i's references side by side, as tfm_metrics_text reads them */
    size_t nr = (size_t)a->nrefs;
    const char **ref = tfm_malloc(h.n * nr * sizeof *ref);
    size_t *group = tfm_malloc((h.n + 1) * sizeof *group);
    for (size_t i = 0; i < h.n; i++) {
        group[i] = i * nr;
        for (size_t k = 0; k < nr; k++)
            ref[i * nr + k] = r[k].item[i];
    }
    group[h.n] = h.n * nr;
    tfm_text_result t;
    tfm_metrics_text(h.item, h.n, ref, group,
                     a->max_labels >= 0 ? (size_t)a->max_labels : TFM_TEXT_MAX_LABELS, &t);
    tfm_buf o = {0};
    if (a->json) {
        tfm_buf_printf(&o, "{\"metric\":\"text\",\"lines\":%zu,\"exact_count\":%zu", t.n,
                       t.exact_count);
        json_num(&o, "exact", t.exact);
        json_num(&o, "squad_em", t.squad_em);
        json_num(&o, "squad_f1", t.squad_f1);
        json_num(&o, "bleu", t.bleu);
        json_num(&o, "chrf", t.chrf);
        tfm_buf_printf(&o, ",\"labels\":%zu", t.labels);
        json_num(&o, "f1_macro", t.f1_macro);
        tfm_buf_puts(&o, "}\n");
    } else {
        tfm_buf_printf(&o, "lines\texact\tsquad_em\tsquad_f1\tbleu\tchrf\tlabels\tf1_macro\n"
                       "%zu\t", t.n);
        tsv_num(&o, t.exact, 0);
        tsv_num(&o, t.squad_em, 0);
        tsv_num(&o, t.squad_f1, 0);
        tsv_num(&o, t.bleu, 0);
        tsv_num(&o, t.chrf, 0);
        tfm_buf_printf(&o, "%zu\t", t.labels);
        tsv_num(&o, t.f1_macro, 1);
    }
    if (!a->quiet) {
        fprintf(stderr, "%s: exact %.2f (%zu/%zu), SQuAD EM %.2f, F1 %.2f, BLEU %.2f, chrF2 "
                "%.2f", prog, t.exact, t.exact_count, t.n, t.squad_em, t.squad_f1, t.bleu,
                t.chrf);
        if (t.labels)
            fprintf(stderr, ", macro F1 %.2f (%zu labels)", t.f1_macro, t.labels);
        fputc('\n', stderr);
    }
    put_stdout(&o);
    free(ref);
    free(group);
    hyprefs_free(a, &x);
}

int tfm_eval_metrics_main(int argc, char **argv)
{
    mapp a = {.input = "-", .max_labels = -1};
    a.refs = tfm_calloc((size_t)argc, sizeof *a.refs);
    int c;
    while ((c = getopt_long(argc, argv, "qh", long_opts, NULL)) != -1) {
        switch (c) {
        case OPT_TASK: a.task = optarg; break;
        case OPT_GOLD: a.gold = optarg; break;
        case OPT_POS: a.pos = optarg; break;
        case OPT_TAGFMT:
            if (!strcmp(optarg, "auto"))
                a.tag_format = TFM_TAGS_AUTO;
            else if (!strcmp(optarg, "conll"))
                a.tag_format = TFM_TAGS_CONLL;
            else if (!strcmp(optarg, "lines"))
                a.tag_format = TFM_TAGS_LINES;
            else
                tfm_usage_error(prog, "--tag-format must be auto, conll or lines");
            break;
        case OPT_REF: a.refs[a.nrefs++] = optarg; break;
        case OPT_LC: a.lowercase = 1; break;
        case OPT_SENT: a.sentence = 1; break;
        case OPT_MAX_LABELS:
            a.max_labels = tfm_opt_long(prog, "--max-labels", optarg, 0, 1L << 20);
            break;
        case OPT_JSON: a.json = 1; break;
        /* tfm(7) promises --threads everywhere; these metrics are cheap
         * and run on one, so the value is only checked */
        case OPT_THREADS: tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case 'q': a.quiet = 1; break;
        case 'h': usage();
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, long_opts); /* getopt said what */
        }
    }
    if (optind >= argc)
        tfm_usage_error(prog, "missing command");
    a.cmd = argv[optind++];
    if (optind < argc)
        a.input = argv[optind++];
    if (optind < argc)
        tfm_usage_error(prog, "one input file at most");
    int score = !strcmp(a.cmd, "score");
    if (score) {
        if (!a.task)
            tfm_usage_error(prog, "score: missing --task (classify, regress, tag, span)");
        if (!a.gold)
            tfm_usage_error(prog, "score: missing --gold FILE");
        if (a.nrefs || a.lowercase || a.sentence)
            tfm_usage_error(prog, "--ref, --lowercase and --sentence are for bleu and chrf");
        if (a.max_labels >= 0)
            tfm_usage_error(prog, "--max-labels is for text");
        cmd_score(&a);
    } else {
        if (!a.nrefs)
            tfm_usage_error(prog, "%s: missing --ref FILE", a.cmd);
        int from_stdin = !strcmp(a.input, "-");
        for (int k = 0; k < a.nrefs; k++)
            from_stdin += !strcmp(a.refs[k], "-");
        if (from_stdin > 1)
            tfm_usage_error(prog, "only one of the hypotheses and references can be stdin");
        if (a.task || a.gold || a.pos || a.tag_format != TFM_TAGS_AUTO)
            tfm_usage_error(prog, "--task, --gold, --pos-label and --tag-format are for score");
        int text = !strcmp(a.cmd, "text");
        if (text && (a.lowercase || a.sentence))
            tfm_usage_error(prog, "--lowercase and --sentence are for bleu and chrf");
        if (!text && a.max_labels >= 0)
            tfm_usage_error(prog, "--max-labels is for text");
        if (text)
            cmd_text(&a);
        else
            cmd_translation(&a, !strcmp(a.cmd, "chrf"));
    }
    free(a.refs);
    if (fflush(stdout) != 0 || ferror(stdout))
        tfm_fatal(prog, "writing stdout failed");
    return 0;
}
