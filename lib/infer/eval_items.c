/* tfm-eval choice and lastword inputs as sequences to score (infer/eval.h). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/eval.h"
#include "io/json.h"
#include "metrics/metrics.h"

void tfm_eval_items_free(tfm_eval_items *it)
{
    tfm_ids_free(&it->ids);
    free(it->seqs);
    free(it->line);
    free(it->first);
    free(it->count);
    free(it->label);
    free(it->end_bytes);
    free(it->picks);
    memset(it, 0, sizeof *it);
}

/* Room for one more item and for one more sequence (offsets into ids kept
 * in seqs[].ids until the array stops growing). */
static void grow_items(tfm_eval_items *it, size_t *cap, int choice)
{
    if (it->n < *cap)
        return;
    *cap = *cap ? 2 * *cap : 64;
    it->line = tfm_realloc(it->line, *cap * sizeof *it->line);
    if (choice) {
        it->first = tfm_realloc(it->first, *cap * sizeof *it->first);
        it->count = tfm_realloc(it->count, *cap * sizeof *it->count);
        it->label = tfm_realloc(it->label, *cap * sizeof *it->label);
    }
}

static void grow_seqs(tfm_eval_items *it, size_t *cap, size_t **off, int choice)
{
    if (it->n_seq + 1 < *cap)
        return;
    *cap = *cap ? 2 * *cap : 256;
    *off = tfm_realloc(*off, (*cap + 1) * sizeof **off);
    it->seqs = tfm_realloc(it->seqs, *cap * sizeof *it->seqs);
    if (choice)
        it->end_bytes = tfm_realloc(it->end_bytes, *cap * sizeof *it->end_bytes);
}

/* Item i's prompt: its demonstrations (picked now), then text. */
static void prompt_of(tfm_eval_items *it, const tfm_eval_items_opts *o, size_t i,
                      const char *text, size_t len, tfm_buf *out)
{
    tfm_buf_clear(out);
    if (it->k) {
        it->picks = tfm_realloc(it->picks, (i + 1) * (size_t)it->k * sizeof *it->picks);
        tfm_fewshot_pick(o->shots, i, it->picks + i * (size_t)it->k);
        tfm_fewshot_prompt(o->shots, it->picks + i * (size_t)it->k, out);
    }
    tfm_buf_append(out, text, len);
}

static void put_bos(const tfm_eval_items_opts *o, tfm_ids *ids)
{
    if (o->bos >= 0)
        tfm_ids_push(ids, (uint32_t)o->bos);
}

static void start(tfm_eval_items *it, const tfm_eval_items_opts *o)
{
    memset(it, 0, sizeof *it);
    it->k = o->shots ? o->shots->k : 0;
}

/* The sequences' ids, now that the array holds them all. */
static void finish(tfm_eval_items *it, const size_t *off)
{
    for (size_t i = 0; i < it->n_seq; i++)
        it->seqs[i].ids = it->ids.data + off[i];
}

/* One choice item (a parsed line): its sequences appended, or -1. */
static int choice_item(tfm_eval_items *it, const tfm_eval_items_opts *o, const tfm_json *root,
                       const char *name, long line, size_t *cap_items, size_t *cap_seq,
                       size_t **off, tfm_ids *ctx, tfm_buf *prompt, tfm_err *err)
{
    const tfm_json *c = tfm_json_get(root, "context");
    const tfm_json *e = tfm_json_get(root, "endings");
    const tfm_json *l = tfm_json_get(root, "label");
    if (root->type != TFM_JSON_OBJECT)
        return tfm_err_set(err, "%s:%ld: an item must be a JSON object, not %s", name, line,
                           tfm_json_type_name(root->type));
    if (!c || c->type != TFM_JSON_STRING)
        return tfm_err_set(err, "%s:%ld:%ld: \"context\" must be a string", name, line,
                           c ? c->col : root->col);
    if (!e || e->type != TFM_JSON_ARRAY || e->n < 2)
        return tfm_err_set(err, "%s:%ld:%ld: \"endings\" must be an array of at least two "
                           "strings", name, line, e ? e->col : root->col);
    if (!l || l->type != TFM_JSON_NUMBER || l->num != floor(l->num) || l->num < 0 ||
        l->num >= (double)e->n)
        return tfm_err_set(err, "%s:%ld:%ld: \"label\" must be the index of the right ending "
                           "(0 to %zu)", name, line, l ? l->col : root->col, e->n - 1);
    grow_items(it, cap_items, 1);
    size_t i = it->n++;
    it->first[i] = it->n_seq;
    it->count[i] = e->n;
    it->label[i] = (int64_t)l->num;
    it->line[i] = line;
    tfm_ids_clear(ctx);
    put_bos(o, ctx);
    prompt_of(it, o, i, c->str, c->len, prompt);
    tfm_tokenizer_encode(o->tok, o->scratch, prompt->data, prompt->len, 1, ctx);
    int cut = 0;
    for (size_t j = 0; j < e->n; j++) {
        const tfm_json *x = e->items[j];
        if (x->type != TFM_JSON_STRING)
            return tfm_err_set(err, "%s:%ld:%ld: ending %zu must be a string", name, line,
                               x->col, j);
        grow_seqs(it, cap_seq, off, 1);
        (*off)[it->n_seq] = it->ids.len;
        tfm_ids_append(&it->ids, ctx->data, ctx->len);
        size_t before = it->ids.len;
        tfm_tokenizer_encode(o->tok, o->scratch, x->str, x->len, 1, &it->ids);
        size_t nt = it->ids.len - before;
        if (nt == 0)
            return tfm_err_set(err, "%s:%ld:%ld: ending %zu is empty", name, line, x->col, j);
        if (nt >= (size_t)o->block_size)
            return tfm_err_set(err, "%s:%ld:%ld: ending %zu has %zu tokens: too long for the "
                               "model's context of %d", name, line, x->col, j, nt,
                               o->block_size);
        if (ctx->len == 0)
            return tfm_err_set(err, "%s:%ld:%ld: empty context and no end-of-text token to "
                               "put before the endings", name, line, c->col);
        it->seqs[it->n_seq] = (tfm_eval_seq){.n = ctx->len + nt, .n_target = nt};
        cut |= ctx->len + nt > (size_t)o->context;
        it->end_bytes[it->n_seq] = x->len;
        it->n_seq++;
    }
    it->n_cut += it->k && cut;
    return 0;
}

int tfm_eval_choice_read(tfm_eval_items *it, const char *data, size_t len, const char *name,
                         const tfm_eval_items_opts *o, tfm_err *err)
{
    start(it, o);
    tfm_ids ctx = {0};
    tfm_buf prompt = {0};
    size_t *off = NULL, cap_items = 0, cap_seq = 0;
    long line = 0;
    int rc = 0;
    for (size_t pos = 0; pos < len && rc == 0;) {
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        line++;
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
            k++;
        if (k == n)
            continue;
        tfm_json_doc doc;
        rc = tfm_json_parse_line(&doc, s, n, name, line, err);
        if (rc == 0)
            rc = choice_item(it, o, doc.root, name, line, &cap_items, &cap_seq, &off, &ctx,
                             &prompt, err);
        tfm_json_doc_free(&doc);
    }
    if (rc == 0 && it->n == 0)
        rc = tfm_err_set(err, "%s: empty input: no items", name);
    if (rc == 0)
        finish(it, off);
    free(off);
    tfm_ids_free(&ctx);
    tfm_buf_free(&prompt);
    if (rc < 0)
        tfm_eval_items_free(it);
    return rc;
}

int tfm_eval_lastword_read(tfm_eval_items *it, const char *data, size_t len, const char *name,
                           const tfm_eval_items_opts *o, tfm_err *err)
{
    start(it, o);
    tfm_buf prompt = {0};
    size_t *off = NULL, cap_items = 0, cap_seq = 0;
    long line = 0;
    int rc = 0;
    for (size_t pos = 0; pos < len && rc == 0;) {
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        line++;
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
            n--;
        if (n == 0)
            continue;
        long k = tfm_eval_last_word(s, n);
        if (k < 0) {
            rc = tfm_err_set(err, "%s:%ld: no space in the passage: the final word follows "
                             "the last space", name, line);
            break;
        }
        grow_items(it, &cap_items, 0);
        grow_seqs(it, &cap_seq, &off, 0);
        size_t i = it->n;
        it->line[i] = line;
        off[i] = it->ids.len;
        put_bos(o, &it->ids);
        prompt_of(it, o, i, s, (size_t)k, &prompt);
        tfm_tokenizer_encode(o->tok, o->scratch, prompt.data, prompt.len, 1, &it->ids);
        size_t nctx = it->ids.len - off[i];
        if (nctx == 0) {
            rc = tfm_err_set(err, "%s:%ld: nothing before the final word and no end-of-text "
                             "token to put there", name, line);
            break;
        }
        /* the target keeps its space, as the word would be written */
        tfm_tokenizer_encode(o->tok, o->scratch, s + k, n - (size_t)k, 1, &it->ids);
        tfm_eval_seq *q = &it->seqs[i];
        *q = (tfm_eval_seq){.n = it->ids.len - off[i], .n_target = it->ids.len - off[i] - nctx};
        if (q->n_target >= (size_t)o->block_size) {
            rc = tfm_err_set(err, "%s:%ld: the final word has %zu tokens: too long for the "
                             "model's context of %d", name, line, q->n_target, o->block_size);
            break;
        }
        it->n_cut += it->k && q->n > (size_t)o->context;
        it->n = ++it->n_seq;
    }
    if (rc == 0 && it->n == 0)
        rc = tfm_err_set(err, "%s: empty input: no passages", name);
    if (rc == 0)
        finish(it, off);
    free(off);
    tfm_buf_free(&prompt);
    if (rc < 0)
        tfm_eval_items_free(it);
    return rc;
}

void tfm_eval_choice_tally(const tfm_eval_items *it, tfm_eval_tally *t)
{
    memset(t, 0, sizeof *t);
    t->n = it->n;
    t->best = tfm_malloc((it->n ? it->n : 1) * 3 * sizeof *t->best);
    for (size_t i = 0; i < it->n; i++) {
        int *best = t->best + 3 * i;
        const size_t first = it->first[i];
        tfm_eval_choice_pick(it->seqs + first, it->end_bytes + first, it->count[i], best);
        for (int m = 0; m < 3; m++)
            t->right[m] += best[m] == it->label[i];
    }
    for (int m = 0; m < 3; m++) {
        t->acc[m] = (double)t->right[m] / (double)it->n;
        t->acc_se[m] = tfm_metrics_stderr(t->right[m], it->n);
    }
}

void tfm_eval_lastword_tally(const tfm_eval_items *it, tfm_eval_tally *t)
{
    memset(t, 0, sizeof *t);
    t->n = it->n;
    for (size_t i = 0; i < it->n; i++) {
        t->right[0] += it->seqs[i].greedy != 0;
        t->logprob += it->seqs[i].logprob;
        t->targets += it->seqs[i].n_target;
    }
    t->acc[0] = (double)t->right[0] / (double)it->n;
    t->acc_se[0] = tfm_metrics_stderr(t->right[0], it->n);
    t->word_perplexity = exp(-t->logprob / (double)it->n);
}

void tfm_eval_tally_free(tfm_eval_tally *t)
{
    free(t->best);
    memset(t, 0, sizeof *t);
}
