/* Beam search; the rules are stated in beam.h. */
#include "config.h"

#include "infer/beam.h"

#include <math.h>
#include <string.h>

void tfm_beam_opts_default(tfm_beam_opts *o)
{
    o->beam = 4;
    o->nbest = 1;
    o->alpha = 0.6f;
    o->max_len = 50;
    o->eos = -1;
}

const char *tfm_finish_name(tfm_finish f)
{
    switch (f) {
    case TFM_FINISH_EOS: return "eos";
    case TFM_FINISH_LENGTH: return "length";
    case TFM_FINISH_STOP: return "stop";
    }
    return "?";
}

typedef struct hyp {
    uint32_t *tokens;
    float *logprobs;
    size_t len;
    double sum;
    int slot;
} hyp;

typedef struct cand {
    double sum;
    int parent;
    uint32_t tok;
    float lp;
} cand;

/* Higher sum first; then lower parent, then lower token: a total order so
 * results do not depend on the scan. */
static int cand_better(const cand *a, const cand *b)
{
    if (a->sum != b->sum)
        return a->sum > b->sum;
    if (a->parent != b->parent)
        return a->parent < b->parent;
    return a->tok < b->tok;
}

static double norm_score(double sum, size_t len, float alpha)
{
    return len ? sum / pow((double)len, alpha) : sum;
}

/* Adds toks[0..len) (+ `last` when given) to the finished list, which keeps
 * the `cap` best, best first; an equal score does not displace an earlier one. */
static void fin_add(tfm_beam_result *r, size_t cap, const hyp *h,
                    const cand *last, float alpha, tfm_finish why)
{
    size_t len = h->len + (last != NULL);
    double sum = last ? last->sum : h->sum;
    double score = norm_score(sum, len, alpha);
    size_t pos = r->n;
    while (pos > 0 && r->hyps[pos - 1].score < score)
        pos--;
    if (pos >= cap)
        return;
    if (r->n == cap) {
        free(r->hyps[cap - 1].tokens);
        free(r->hyps[cap - 1].logprobs);
        r->n--;
    }
    memmove(&r->hyps[pos + 1], &r->hyps[pos], (r->n - pos) * sizeof *r->hyps);
    tfm_beam_hyp *f = &r->hyps[pos];
    f->tokens = tfm_malloc(sizeof *f->tokens * (len ? len : 1));
    f->logprobs = tfm_malloc(sizeof *f->logprobs * (len ? len : 1));
    memcpy(f->tokens, h->tokens, sizeof *f->tokens * h->len);
    memcpy(f->logprobs, h->logprobs, sizeof *f->logprobs * h->len);
    if (last) {
        f->tokens[h->len] = last->tok;
        f->logprobs[h->len] = last->lp;
    }
    f->len = len;
    f->sum = sum;
    f->score = score;
    f->finish = why;
    r->n++;
}

int tfm_beam_search(const tfm_beam_model *model, const tfm_beam_opts *o,
                    const float *first, tfm_beam_result *out, tfm_err *err)
{
    memset(out, 0, sizeof *out);
    if (o->beam < 1)
        return tfm_err_set(err, "beam size must be at least 1");
    if (o->nbest < 1 || o->nbest > o->beam)
        return tfm_err_set(err, "nbest must be between 1 and the beam size (%d)", o->beam);
    if (o->max_len < 1)
        return tfm_err_set(err, "max tokens must be at least 1");

    const size_t B = (size_t)o->beam, V = model->vocab, L = (size_t)o->max_len;
    const size_t nc = 2 * B;
    int rc = -1;
    hyp *live = tfm_calloc(B, sizeof *live), *next = tfm_calloc(B, sizeof *next);
    for (size_t i = 0; i < B; i++) {
        live[i].tokens = tfm_malloc(sizeof(uint32_t) * L);
        live[i].logprobs = tfm_malloc(sizeof(float) * L);
        next[i].tokens = tfm_malloc(sizeof(uint32_t) * L);
        next[i].logprobs = tfm_malloc(sizeof(float) * L);
    }
    float *lp = tfm_malloc(sizeof *lp * B * V);
    memcpy(lp, first, sizeof *lp * V);
    cand *cands = tfm_malloc(sizeof *cands * nc);
    uint32_t *toks = tfm_malloc(sizeof *toks * B);
    int *slots = tfm_malloc(sizeof *slots * B);
    int *parent_used = tfm_malloc(sizeof *parent_used * B);
    int *claimed = tfm_malloc(sizeof *claimed * B);
    int *free_slots = tfm_malloc(sizeof *free_slots * B);
    out->hyps = tfm_calloc((size_t)o->nbest, sizeof *out->hyps);

    size_t nl = 1;
    live[0].len = 0;
    live[0].sum = 0;
    live[0].slot = 0;

    for (size_t t = 0;; t++) {
        /* the 2B best extensions of the live hypotheses */
        size_t n = 0;
        for (size_t i = 0; i < nl; i++) {
            const float *row = lp + i * V;
            for (size_t v = 0; v < V; v++) {
                if (isinf(row[v]) || isnan(row[v]))
                    continue;
                cand c = {live[i].sum + row[v], (int)i, (uint32_t)v, row[v]};
                if (n == nc && !cand_better(&c, &cands[n - 1]))
                    continue;
                size_t pos = n < nc ? n++ : nc - 1;
                while (pos > 0 && cand_better(&c, &cands[pos - 1])) {
                    cands[pos] = cands[pos - 1];
                    pos--;
                }
                cands[pos] = c;
            }
        }
        /* scan them: end-of-text finishes, the rest live on */
        size_t nn = 0;
        for (size_t k = 0; k < n && nn < B; k++) {
            const cand *c = &cands[k];
            const hyp *p = &live[c->parent];
            if (o->eos >= 0 && c->tok == (uint32_t)o->eos) {
                fin_add(out, (size_t)o->nbest, p, c, o->alpha, TFM_FINISH_EOS);
                continue;
            }
            hyp *h = &next[nn++];
            memcpy(h->tokens, p->tokens, sizeof *h->tokens * p->len);
            memcpy(h->logprobs, p->logprobs, sizeof *h->logprobs * p->len);
            h->tokens[p->len] = c->tok;
            h->logprobs[p->len] = c->lp;
            h->len = p->len + 1;
            h->sum = c->sum;
            h->slot = p->slot; /* the parent's slot for now */
        }
        /* swap live <-> next */
        hyp *tmp = live;
        live = next;
        next = tmp;
        nl = nn;

        if (nl == 0)
            break;
        if (t + 1 >= L) {
            for (size_t i = 0; i < nl; i++)
                fin_add(out, (size_t)o->nbest, &live[i], NULL, o->alpha,
                        TFM_FINISH_LENGTH);
            break;
        }
        if (out->n == (size_t)o->nbest) {
            double worst = out->hyps[out->n - 1].score, best_bound = -INFINITY;
            for (size_t i = 0; i < nl; i++) {
                /* S / l^alpha is monotone in l: its best reachable value is
                 * at one of the two ends */
                double a = norm_score(live[i].sum, live[i].len + 1, o->alpha);
                double b = norm_score(live[i].sum, L, o->alpha);
                double bound = a > b ? a : b;
                if (bound > best_bound)
                    best_bound = bound;
            }
            if (best_bound <= worst)
                break;
        }

        /* Give every live hypothesis a slot holding its parent's cache: the
         * first child of a parent keeps the parent's slot, the others take
         * slots no surviving parent uses (so no copy overwrites a source). */
        memset(parent_used, 0, sizeof *parent_used * B);
        memset(claimed, 0, sizeof *claimed * B);
        for (size_t i = 0; i < nl; i++)
            parent_used[live[i].slot] = 1;
        size_t nfree = 0;
        for (size_t s = 0; s < B; s++)
            if (!parent_used[s])
                free_slots[nfree++] = (int)s;
        for (size_t i = 0; i < nl; i++) {
            int ps = live[i].slot;
            if (!claimed[ps]) {
                claimed[ps] = 1;
                continue;
            }
            TFM_ASSERT(nfree > 0);
            int s = free_slots[--nfree];
            if (model->copy_slot(model->ctx, s, ps, err) < 0)
                goto done;
            live[i].slot = s;
        }
        for (size_t i = 0; i < nl; i++) {
            toks[i] = live[i].tokens[live[i].len - 1];
            slots[i] = live[i].slot;
        }
        if (model->step(model->ctx, nl, toks, slots, lp, err) < 0)
            goto done;
        out->steps++;
    }
    rc = 0;
done:
    if (rc < 0)
        tfm_beam_result_free(out);
    for (size_t i = 0; i < B; i++) {
        free(live[i].tokens);
        free(live[i].logprobs);
        free(next[i].tokens);
        free(next[i].logprobs);
    }
    free(live);
    free(next);
    free(lp);
    free(cands);
    free(toks);
    free(slots);
    free(parent_used);
    free(claimed);
    free(free_slots);
    return rc;
}

void tfm_beam_result_free(tfm_beam_result *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->hyps[i].tokens);
        free(r->hyps[i].logprobs);
    }
    free(r->hyps);
    memset(r, 0, sizeof *r);
}
