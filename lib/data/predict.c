/* Fine-tuned models over encoded examples; see predict.h. */
#include "config.h"

#include "data/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/order.h"
#include "metrics/taskmetrics.h"
#include "lm/lm.h"

/* ---- batches ------------------------------------------------------------ */

void tfm_ft_batch(tfm_ft_batcher *bb, const tfm_ft_set *s, const size_t *rows, int n, int gold,
                  int regression, float lm_weight, tfm_batch *b)
{
    int T = 1;
    for (int i = 0; i < n; i++)
        if (s->row[rows[i]].len > T)
            T = s->row[rows[i]].len;
    size_t bt = (size_t)n * T;
    if (bt > bb->cap_bt) {
        bb->cap_bt = bt;
        bb->x = tfm_realloc(bb->x, bt * sizeof *bb->x);
        bb->seg = tfm_realloc(bb->seg, bt * sizeof *bb->seg);
        bb->y = tfm_realloc(bb->y, bt * sizeof *bb->y);
        bb->tags = tfm_realloc(bb->tags, bt * sizeof *bb->tags);
    }
    if ((size_t)n > bb->cap_b) {
        bb->cap_b = (size_t)n;
        bb->len = tfm_realloc(bb->len, (size_t)n * sizeof *bb->len);
        bb->cls = tfm_realloc(bb->cls, (size_t)n * sizeof *bb->cls);
        bb->labels = tfm_realloc(bb->labels, (size_t)n * sizeof *bb->labels);
        bb->start = tfm_realloc(bb->start, (size_t)n * sizeof *bb->start);
        bb->end = tfm_realloc(bb->end, (size_t)n * sizeof *bb->end);
        bb->values = tfm_realloc(bb->values, (size_t)n * sizeof *bb->values);
    }
    int lm = gold && lm_weight > 0.0f && s->decoder;
    for (int i = 0; i < n; i++) {
        const tfm_ft_row *r = &s->row[rows[i]];
        const uint32_t *ids = s->ids.data + r->off;
        int32_t *x = bb->x + (size_t)i * T, *g = bb->seg + (size_t)i * T;
        int32_t *y = bb->y + (size_t)i * T, *tg = bb->tags + (size_t)i * T;
        for (int t = 0; t < T; t++) {
            int in = t < r->len;
            x[t] = in ? (int32_t)ids[t] : 0; /* padding: masked, or after the read position */
            g[t] = in && s->has_seg ? s->seg[r->off + t] : 0;
            y[t] = t + 1 < r->len ? (int32_t)ids[t + 1] : -1;
            tg[t] = in && s->task == TFM_FT_TAG ? s->tag[r->off + t] : -1;
        }
        bb->len[i] = r->len;
        bb->cls[i] = r->cls_pos;
        bb->labels[i] = r->label;
        bb->values[i] = r->value;
        bb->start[i] = r->start;
        bb->end[i] = r->end;
    }
    *b = (tfm_batch){.inputs = bb->x, .B = n, .T = T};
    b->segments = s->has_seg ? bb->seg : NULL;
    b->lengths = s->decoder ? NULL : bb->len;
    if (s->task == TFM_FT_CLASSIFY)
        b->cls_pos = bb->cls;
    if (!gold)
        return;
    if (s->task == TFM_FT_CLASSIFY) {
        if (regression)
            b->values = bb->values;
        else
            b->labels = bb->labels;
    } else if (s->task == TFM_FT_TAG) {
        b->tags = bb->tags;
    } else {
        b->span_start = bb->start;
        b->span_end = bb->end;
    }
    if (lm) {
        b->targets = bb->y;
        b->lm_weight = lm_weight;
    }
}

void tfm_ft_batcher_free(tfm_ft_batcher *bb)
{
    free(bb->x);
    free(bb->seg);
    free(bb->y);
    free(bb->tags);
    free(bb->len);
    free(bb->cls);
    free(bb->labels);
    free(bb->start);
    free(bb->end);
    free(bb->values);
    memset(bb, 0, sizeof *bb);
}

/* ---- the forward -------------------------------------------------------- */

static size_t row_len(const void *set, size_t i)
{
    return (size_t)((const tfm_ft_set *)set)->row[i].len;
}

void tfm_ft_out_free(tfm_ft_out *o)
{
    free(o->cls);
    free(o->tag);
    free(o->span);
    memset(o, 0, sizeof *o);
}

int tfm_ft_out_check(const tfm_ft_out *out, const tfm_ft_set *s, const char *path,
                     tfm_err *err)
{
    const float *z = out->cls ? out->cls : out->tag ? out->tag : out->span;
    size_t n = out->cls   ? s->n_rows * (size_t)out->K
               : out->tag ? s->ids.len * (size_t)out->n_tags
                          : s->ids.len * 2;
    for (size_t i = 0; z && i < n; i++)
        if (!isfinite(z[i]))
            return tfm_err_set(err, "%s: the model's outputs are not finite (%s): its weights "
                               "are not finite (a diverged training run?)", path,
                               isnan(z[i]) ? "NaN" : "infinite");
    return 0;
}

int tfm_ft_run(tfm_model *m, const tfm_ft_set *s, int regression, int max_tokens, int max_rows,
               tfm_ft_out *out, double *loss, tfm_err *err)
{
    memset(out, 0, sizeof *out);
    const tfm_model_config *c = &m->cfg;
    size_t N = s->ids.len;
    if (s->task == TFM_FT_CLASSIFY) {
        out->K = c->n_classes;
        out->cls = tfm_malloc((s->n_rows ? s->n_rows : 1) * (size_t)out->K * sizeof *out->cls);
    } else if (s->task == TFM_FT_TAG) {
        out->n_tags = c->n_tags;
        out->tag = tfm_malloc((N ? N : 1) * (size_t)out->n_tags * sizeof *out->tag);
    } else {
        out->span = tfm_malloc((N ? N : 1) * 2 * sizeof *out->span);
    }
    if (max_tokens <= 0)
        max_tokens = 8192;
    if (max_rows <= 0)
        max_rows = 64;
    size_t *order = tfm_malloc((s->n_rows ? s->n_rows : 1) * sizeof *order);
    tfm_order_by_key(order, s->n_rows, row_len, s);
    size_t *rows = tfm_malloc((size_t)max_rows * sizeof *rows);
    tfm_ft_batcher bb = {0};
    tfm_head head = s->task == TFM_FT_CLASSIFY ? TFM_HEAD_CLASS
                    : s->task == TFM_FT_TAG    ? TFM_HEAD_TAG
                                               : TFM_HEAD_SPAN;
    double sum = 0, count = 0;
    int rc = 0;
    for (size_t first = 0; rc == 0 && first < s->n_rows;) {
        /* ascending lengths: the last row of a batch is its longest */
        int n = 0;
        while (first + (size_t)n < s->n_rows && n < max_rows &&
               (n == 0 || (long)(n + 1) * s->row[order[first + (size_t)n]].len <= max_tokens)) {
            rows[n] = order[first + (size_t)n];
            n++;
        }
        tfm_batch b;
        tfm_ft_batch(&bb, s, rows, n, loss != NULL, regression, 0.0f, &b);
        if ((rc = tfm_model_forward_batch(m, &b, NULL, err)) < 0)
            break;
        int R, C;
        const float *z = tfm_model_head_out(m, head, &R, &C);
        TFM_ASSERT(z);
        for (int i = 0; i < n; i++) {
            const tfm_ft_row *r = &s->row[rows[i]];
            if (head == TFM_HEAD_CLASS)
                memcpy(out->cls + rows[i] * (size_t)C, z + (size_t)i * C, (size_t)C * sizeof *z);
            else
                memcpy((head == TFM_HEAD_TAG ? out->tag : out->span) + r->off * (size_t)C,
                       z + (size_t)i * b.T * C, (size_t)r->len * C * sizeof *z);
        }
        if (loss) {
            double k = n;
            if (head == TFM_HEAD_TAG) {
                k = 0;
                for (size_t t = 0; t < (size_t)n * b.T; t++)
                    k += b.tags[t] >= 0;
            }
            sum += (double)m->head_loss[head] * k;
            count += k;
        }
        first += (size_t)n;
    }
    if (loss)
        *loss = count ? sum / count : NAN;
    tfm_ft_batcher_free(&bb);
    free(rows);
    free(order);
    if (rc < 0)
        tfm_ft_out_free(out);
    return rc;
}

/* ---- predictions -------------------------------------------------------- */

/* p[0..K) = softmax(z); returns the argmax. */
static int softmax(const float *z, int K, double *p)
{
    int best = 0;
    double mx = z[0], sum = 0;
    for (int k = 1; k < K; k++)
        if (z[k] > mx) {
            mx = z[k];
            best = k;
        }
    for (int k = 0; k < K; k++)
        sum += p[k] = exp((double)z[k] - mx);
    for (int k = 0; k < K; k++)
        p[k] /= sum;
    return best;
}

/* out[i] = log-softmax of z[i·stride] over i < n. */
static void log_softmax(const float *z, int n, int stride, double *out)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        if (z[(size_t)i * stride] > mx)
            mx = z[(size_t)i * stride];
    for (int i = 0; i < n; i++)
        sum += exp((double)z[(size_t)i * stride] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++)
        out[i] = (double)z[(size_t)i * stride] - lse;
}

/* The outputs a prediction chooses among: the label set's (a model given
 * more classes than its data has labels never predicts the extra ones). */
static int known(int K, const tfm_ft_labels *l)
{
    return l->n && l->n < (size_t)K ? (int)l->n : K;
}

static void predict_classify(const tfm_ft_set *s, const tfm_ft_out *o, const tfm_ft_labels *l,
                             tfm_ft_pred *p)
{
    int K = known(o->K, l), stride = o->K;
    double *pr = tfm_malloc((size_t)K * sizeof *pr), *acc = tfm_malloc((size_t)K * sizeof *acc);
    for (size_t e = 0; e < s->n_ex; e++) {
        size_t r0 = s->ex_row[e], r1 = s->ex_row[e + 1];
        if (l->regression) {
            double v = 0;
            for (size_t r = r0; r < r1; r++)
                v += o->cls[r];
            p->value[e] = v / (double)(r1 - r0);
            continue;
        }
        memset(acc, 0, (size_t)K * sizeof *acc);
        for (size_t r = r0; r < r1; r++) {
            softmax(o->cls + r * (size_t)stride, K, pr);
            for (int k = 0; k < K; k++)
                acc[k] += pr[k] / (double)(r1 - r0);
        }
        int best = 0;
        for (int k = 1; k < K; k++)
            if (acc[k] > acc[best])
                best = k;
        for (int k = 0; k < K; k++)
            p->probs[e * (size_t)K + (size_t)k] = (float)acc[k];
        p->label[e] = best;
        p->prob[e] = (float)acc[best];
    }
    free(pr);
    free(acc);
}

static void predict_tag(const tfm_ft_set *s, const tfm_ft_out *o, const tfm_ft_labels *l,
                        tfm_ft_pred *p)
{
    int K = known(o->n_tags, l), stride = o->n_tags;
    long fallback = tfm_ft_label_id(l, "O");
    if (fallback < 0)
        fallback = 0;
    double *pr = tfm_malloc((size_t)K * sizeof *pr);
    for (size_t e = 0; e < s->n_ex; e++) {
        const tfm_ft_row *r = &s->row[s->ex_row[e]];
        for (size_t w = s->ex_word[e]; w < s->ex_word[e + 1]; w++) {
            long pos = s->word_pos[w];
            if (pos < 0) {
                p->tag[w] = (int32_t)fallback;
                p->tag_prob[w] = 0.0f;
                continue;
            }
            int best = softmax(o->tag + (r->off + (size_t)pos) * stride, K, pr);
            p->tag[w] = best;
            p->tag_prob[w] = (float)pr[best];
        }
    }
    free(pr);
}

static void predict_span(const tfm_ft_set *s, const tfm_ft_out *o, int max_answer,
                         tfm_ft_pred *p)
{
    size_t longest = 1;
    for (size_t r = 0; r < s->n_rows; r++)
        if ((size_t)s->row[r].len > longest)
            longest = (size_t)s->row[r].len;
    double *ls = tfm_malloc(longest * sizeof *ls), *le = tfm_malloc(longest * sizeof *le);
    for (size_t e = 0; e < s->n_ex; e++) {
        double best = -INFINITY;
        size_t bs = 0, be = 0;
        for (size_t ri = s->ex_row[e]; ri < s->ex_row[e + 1]; ri++) {
            const tfm_ft_row *r = &s->row[ri];
            log_softmax(o->span + r->off * 2, r->len, 2, ls);
            log_softmax(o->span + r->off * 2 + 1, r->len, 2, le);
            int c0 = r->ctx_pos, c1 = r->ctx_pos + r->ctx_len;
            for (int a = c0; a < c1; a++)
                for (int b = a; b < c1 && b - a < max_answer; b++)
                    if (ls[a] + le[b] > best) {
                        best = ls[a] + le[b];
                        bs = r->ctx_tok + (size_t)(a - c0);
                        be = r->ctx_tok + (size_t)(b - c0);
                    }
        }
        /* the tokens' bytes, widened to whole words as run_squad does */
        size_t t0 = s->ex_tok[e], c0 = s->ex_context[e];
        long st = s->tok_start[t0 + bs], en = s->tok_end[t0 + be];
        tfm_squad_whole_words(s->context + c0, s->ex_context[e + 1] - c0, &st, &en);
        p->start[e] = st;
        p->end[e] = en;
        p->score[e] = best;
    }
    free(ls);
    free(le);
}

void tfm_ft_predict(const tfm_ft_set *s, const tfm_ft_out *o, const tfm_ft_labels *l,
                    int max_answer, tfm_ft_pred *p)
{
    memset(p, 0, sizeof *p);
    size_t n = s->n_ex ? s->n_ex : 1;
    p->n = s->n_ex;
    if (s->task == TFM_FT_CLASSIFY) {
        p->label = tfm_calloc(n, sizeof *p->label);
        p->prob = tfm_calloc(n, sizeof *p->prob);
        p->value = tfm_calloc(n, sizeof *p->value);
        p->n_class = l->regression ? 0 : known(o->K, l);
        p->probs = tfm_calloc(n * (size_t)(p->n_class ? p->n_class : 1), sizeof *p->probs);
        predict_classify(s, o, l, p);
    } else if (s->task == TFM_FT_TAG) {
        p->n_word = s->ex_word[s->n_ex];
        p->tag = tfm_calloc(p->n_word ? p->n_word : 1, sizeof *p->tag);
        p->tag_prob = tfm_calloc(p->n_word ? p->n_word : 1, sizeof *p->tag_prob);
        predict_tag(s, o, l, p);
    } else {
        p->start = tfm_calloc(n, sizeof *p->start);
        p->end = tfm_calloc(n, sizeof *p->end);
        p->score = tfm_calloc(n, sizeof *p->score);
        predict_span(s, o, max_answer < 1 ? 1 : max_answer, p);
    }
}

void tfm_ft_pred_free(tfm_ft_pred *p)
{
    free(p->label);
    free(p->prob);
    free(p->probs);
    free(p->value);
    free(p->tag);
    free(p->tag_prob);
    free(p->start);
    free(p->end);
    free(p->score);
    memset(p, 0, sizeof *p);
}

int tfm_ft_pred_top(const tfm_ft_pred *p, size_t e, int k, int32_t *top)
{
    if (k > p->n_class)
        k = p->n_class;
    const float *pr = p->probs + e * (size_t)p->n_class;
    /* insertion into the k best so far: k and the classes are few */
    int n = 0;
    for (int c = 0; c < p->n_class; c++) {
        int i = n < k ? n++ : k;
        if (i == k && !(pr[c] > pr[top[k - 1]]))
            continue;
        if (i == k)
            i = k - 1;
        while (i > 0 && pr[c] > pr[top[i - 1]]) {
            top[i] = top[i - 1];
            i--;
        }
        top[i] = c;
    }
    return n;
}

/* ---- the validation metric ---------------------------------------------- */

static int chunk_tags(const tfm_ft_labels *l)
{
    for (size_t i = 0; i < l->n; i++) {
        const char *t = l->name[i];
        if (strchr("BIES", t[0]) && t[0] && t[1] == '-')
            return 1;
    }
    return 0;
}

int tfm_ft_metric_names(tfm_ft_task task, const tfm_ft_labels *l, const char **names)
{
    if (task == TFM_FT_CLASSIFY && l->regression) {
        names[0] = "pearson";
        return 1;
    }
    if (task == TFM_FT_CLASSIFY) {
        names[0] = "accuracy";
        names[1] = "macro_f1";
        return 2;
    }
    if (task == TFM_FT_TAG && chunk_tags(l)) {
        names[0] = "entity_f1";
        names[1] = "token_accuracy";
        return 2;
    }
    if (task == TFM_FT_TAG) {
        names[0] = "token_accuracy";
        return 1;
    }
    names[0] = "squad_f1";
    names[1] = "squad_em";
    return 2;
}

int tfm_ft_metrics(const tfm_ft_data *d, const tfm_ft_set *s, const tfm_ft_pred *p,
                   const tfm_ft_labels *l, double *values)
{
    size_t n = s->n_ex;
    if (s->task == TFM_FT_CLASSIFY && l->regression) {
        double *gold = tfm_malloc((n ? n : 1) * sizeof *gold);
        for (size_t e = 0; e < n; e++)
            gold[e] = s->row[s->ex_row[e]].value;
        values[0] = tfm_metrics_pearson(gold, p->value, n);
        free(gold);
        return 1;
    }
    if (s->task == TFM_FT_CLASSIFY) {
        const char **gold = tfm_malloc((n ? n : 1) * sizeof *gold);
        const char **pred = tfm_malloc((n ? n : 1) * sizeof *pred);
        for (size_t e = 0; e < n; e++) {
            int32_t g = s->row[s->ex_row[e]].label, q = p->label[e];
            gold[e] = g >= 0 && (size_t)g < l->n ? l->name[g] : "";
            pred[e] = q >= 0 && (size_t)q < l->n ? l->name[q] : "";
        }
        tfm_classify_result r;
        tfm_metrics_classify(gold, pred, n, NULL, &r);
        free(gold);
        free(pred);
        values[0] = n ? r.accuracy : NAN;
        values[1] = n ? r.f1_macro : NAN;
        return 2;
    }
    if (s->task == TFM_FT_TAG) {
        size_t nw = s->ex_word[n];
        const char **gold = tfm_malloc((nw ? nw : 1) * sizeof *gold);
        const char **pred = tfm_malloc((nw ? nw : 1) * sizeof *pred);
        size_t *len = tfm_malloc((n ? n : 1) * sizeof *len);
        for (size_t e = 0; e < n; e++) {
            const tfm_ft_example *x = &d->ex[s->ex0 + e];
            len[e] = x->n_words;
            for (size_t i = 0; i < x->n_words; i++) {
                size_t w = s->ex_word[e] + i;
                gold[w] = d->tag[x->word0 + i];
                pred[w] = l->name[p->tag[w]];
            }
        }
        tfm_tag_result r;
        tfm_metrics_tag(gold, pred, len, n, &r);
        free(gold);
        free(pred);
        free(len);
        if (chunk_tags(l)) {
            values[0] = r.f1;
            values[1] = r.token_accuracy;
            return 2;
        }
        values[0] = r.token_accuracy;
        return 1;
    }
    double f1 = 0, em = 0;
    for (size_t e = 0; e < n; e++) {
        const tfm_ft_example *x = &d->ex[s->ex0 + e];
        const char *pr = x->a + p->start[e];
        size_t pn = (size_t)(p->end[e] - p->start[e]);
        double best = 0;
        int exact = 0;
        for (size_t k = 0; k < x->n_ans; k++) {
            const tfm_ft_answer *a = &d->ans[x->ans0 + k];
            double f = tfm_squad_f1(pr, pn, a->text, a->len);
            best = f > best ? f : best;
            exact |= tfm_squad_exact(pr, pn, a->text, a->len);
        }
        if (x->n_ans == 0) /* unanswerable, as SQuAD v2 (and tfm_metrics_span) */
            best = exact = tfm_squad_no_answer(pr, pn);
        f1 += best;
        em += exact;
    }
    values[0] = n ? 100.0 * f1 / (double)n : NAN;
    values[1] = n ? 100.0 * em / (double)n : NAN;
    return 2;
}

double tfm_ft_metric(const tfm_ft_data *d, const tfm_ft_set *s, const tfm_ft_pred *p,
                     const tfm_ft_labels *l, const char **name)
{
    const char *names[4];
    double values[4];
    tfm_ft_metric_names(s->task, l, names);
    tfm_ft_metrics(d, s, p, l, values);
    *name = names[0];
    return values[0];
}

/* ---- a model for prediction --------------------------------------------- */

const char *tfm_ft_task_name(tfm_ft_task t)
{
    return t == TFM_FT_CLASSIFY ? "classify" : t == TFM_FT_TAG ? "tag" : "span";
}

void tfm_ft_enc_opts_from_keys(tfm_ft_enc_opts *o, const tfm_model_keys *model,
                               const tfm_data_keys *data, const tfm_tokenizer *tok)
{
    const tfm_tok_specials *sp = tok ? tfm_tokenizer_specials(tok) : NULL;
    memset(o, 0, sizeof *o);
    o->decoder = model->kind == TFM_KIND_DECODER;
    o->max_len = (int)model->block_size;
    o->segments = model->segments >= 2;
    o->truncate_error = data->truncate == TFM_CONFIG_TRUNCATE_ERROR;
    o->cls = data->cls_id >= 0 ? data->cls_id : sp ? sp->cls : -1;
    o->sep = data->sep_id >= 0 ? data->sep_id : sp ? sp->sep : -1;
    o->eos = sp ? sp->eos : -1;
    o->both_orders = data->symmetric;
    o->doc_stride = (int)data->doc_stride;
}

static int task_of_keys(const tfm_model_file_keys *k, tfm_ft_task *t)
{
    switch (k->task) {
    case TFM_CONFIG_TASK_CLASSIFY: *t = TFM_FT_CLASSIFY; return 0;
    case TFM_CONFIG_TASK_TAG: *t = TFM_FT_TAG; return 0;
    case TFM_CONFIG_TASK_SPAN: *t = TFM_FT_SPAN; return 0;
    default: return -1;
    }
}

int tfm_predictor_open(tfm_predictor *p, const char *path, const char *adapter,
                       tfm_ft_task task, tfm_err *err)
{
    memset(p, 0, sizeof *p);
    tfm_model_file_keys k;
    if (tfm_model_load_keys_adapter(path, adapter, &k, &p->m, &p->tok, err) < 0)
        return -1;
    tfm_ft_task have;
    tfm_buf meta = {0};
    int rc = -1;
    tfm_data_keys_defaults(&p->data);
    if (k.stored && tfm_data_keys_of_file(path, &p->data, err) < 0)
        goto out;
    if (task_of_keys(&k, &have) < 0) {
        /* a pre-trained model (lm, mlm, HF BERT): what is missing is the head */
        static const char *const head[] = {"classifier", "token classifier", "span head"};
        tfm_err_set(err, "%s has no %s head (a pre-trained model): fine-tune it with "
                    "train.task %s first", path, head[task], tfm_ft_task_name(task));
        goto out;
    }
    if (have != task) {
        tfm_err_set(err, "%s was fine-tuned with train.task %s, not %s: fine-tune it with "
                    "train.task %s", path, tfm_ft_task_name(have), tfm_ft_task_name(task),
                    tfm_ft_task_name(task));
        goto out;
    }
    if (!p->tok) {
        tfm_err_set(err, "%s has no tokenizer", path);
        goto out;
    }
    int found = tfm_lm_file_meta(path, "task", &meta, err);
    if (found < 0)
        goto out;
    if (!found) {
        tfm_err_set(err, "%s: no \"task\" in __metadata__ (the label set of a fine-tuned "
                    "model)", path);
        goto out;
    }
    char name[1100];
    snprintf(name, sizeof name, "%s:task", path);
    if (tfm_ft_labels_parse(&p->labels, task, meta.data, meta.len, name, err) < 0)
        goto out;
    int K = task == TFM_FT_CLASSIFY ? p->m.cfg.n_classes : task == TFM_FT_TAG ? p->m.cfg.n_tags
                                                                              : 0;
    if (task != TFM_FT_SPAN && (p->labels.regression ? K != 1 : (size_t)K < p->labels.n)) {
        tfm_err_set(err, "%s: %zu labels but %d outputs", path, p->labels.n, K);
        goto out;
    }
    p->task = task;
    tfm_ft_enc_opts_from_keys(&p->enc, &k.model, &p->data, p->tok);
    tfm_model_set_inference(&p->m);
    tfm_model_set_training(&p->m, 0);
    rc = 0;
out:
    tfm_buf_free(&meta);
    if (rc < 0)
        tfm_predictor_close(p);
    return rc;
}

void tfm_predictor_close(tfm_predictor *p)
{
    if (p->m.params)
        tfm_model_free(&p->m);
    if (p->tok)
        tfm_tokenizer_free(p->tok);
    tfm_ft_labels_free(&p->labels);
    memset(p, 0, sizeof *p);
}
