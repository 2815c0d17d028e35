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
    o->forced_last = -1;
    o->len_extra = 0;
    o->lenpen = TFM_LENPEN_POWER;
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

double tfm_beam_score(double sum, size_t len, float alpha, tfm_lenpen lenpen)
{
    if (lenpen == TFM_LENPEN_GNMT)
        return sum / pow((5.0 + (double)len) / 6.0, alpha);
    return len ? sum / pow((double)len, alpha) : sum;
}

/* Adds toks[0..len) (+ `last` when given) to the finished list, which keeps
 * the `cap` best, best first; an equal score does not displace an earlier one. */
static void fin_add(tfm_beam_result *r, size_t cap, const hyp *h,
                    const cand *last, const tfm_beam_opts *o, tfm_finish why)
{
    size_t len = h->len + (last != NULL);
    double sum = last ? last->sum : h->sum;
    double score = tfm_beam_score(sum, len + (size_t)o->len_extra, o->alpha, o->lenpen);
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

/* One search's state between steps. */
typedef struct search {
    hyp *live, *next;
    size_t nl;          /* live hypotheses */
    size_t L;           /* new tokens at most */
    size_t t;           /* steps taken */
    int slot0;
    const float *lp;    /* [nl][V]: next-token log-probs of the live ones */
    int done;
    tfm_beam_result *out;
} search;

/* Scratch shared by the searches (used by one at a time). */
typedef struct shared {
    cand *cands;        /* [2B] */
    int *parent_used, *claimed, *free_slots; /* [B] */
} shared;

/* Extends s's live hypotheses by one token each from s->lp: the 2B best
 * extensions are scanned in order, end-of-text finishes, the rest live on;
 * then decides whether s is done. */
static void search_select(search *s, const tfm_beam_opts *o, size_t V, shared *sh)
{
    const size_t B = (size_t)o->beam, nc = 2 * B;
    cand *cands = sh->cands;
    size_t n = 0;
    /* the step that reaches the length limit, with a forced last token:
     * every other token's log p is -inf and its own 0 in the search's sum
     * (HF's ForcedEOSTokenLogitsProcessor sets both; lp keeps the model's
     * log p for the output) */
    const int forced = o->forced_last >= 0 && (size_t)o->forced_last < V && s->t + 1 >= s->L;
    for (size_t i = 0; i < s->nl; i++) {
        const float *row = s->lp + i * V;
        for (size_t v = 0; v < V; v++) {
            if (isinf(row[v]) || isnan(row[v]) || (forced && v != (size_t)o->forced_last))
                continue;
            cand c = {s->live[i].sum + (forced ? 0.0 : row[v]), (int)i, (uint32_t)v, row[v]};
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
    size_t nn = 0;
    for (size_t k = 0; k < n && nn < B; k++) {
        const cand *c = &cands[k];
        const hyp *p = &s->live[c->parent];
        if (o->eos >= 0 && c->tok == (uint32_t)o->eos) {
            fin_add(s->out, (size_t)o->nbest, p, c, o, TFM_FINISH_EOS);
            continue;
        }
        hyp *h = &s->next[nn++];
        memcpy(h->tokens, p->tokens, sizeof *h->tokens * p->len);
        memcpy(h->logprobs, p->logprobs, sizeof *h->logprobs * p->len);
        h->tokens[p->len] = c->tok;
        h->logprobs[p->len] = c->lp;
        h->len = p->len + 1;
        h->sum = c->sum;
        h->slot = p->slot; /* the parent's slot for now */
    }
    hyp *tmp = s->live;
    s->live = s->next;
    s->next = tmp;
    s->nl = nn;

    if (s->nl == 0) {
        s->done = 1;
        return;
    }
    if (s->t + 1 >= s->L) {
        for (size_t i = 0; i < s->nl; i++)
            fin_add(s->out, (size_t)o->nbest, &s->live[i], NULL, o, TFM_FINISH_LENGTH);
        s->done = 1;
        return;
    }
    if (s->out->n == (size_t)o->nbest) {
        double worst = s->out->hyps[s->out->n - 1].score, best_bound = -INFINITY;
        for (size_t i = 0; i < s->nl; i++) {
            /* the score is monotone in the length: its best reachable value
             * is at one of the two ends */
            const size_t x = (size_t)o->len_extra;
            double a = tfm_beam_score(s->live[i].sum, s->live[i].len + 1 + x, o->alpha,
                                      o->lenpen);
            double b = tfm_beam_score(s->live[i].sum, s->L + x, o->alpha, o->lenpen);
            double bound = a > b ? a : b;
            if (bound > best_bound)
                best_bound = bound;
        }
        if (best_bound <= worst)
            s->done = 1;
    }
}

/* Gives every live hypothesis of s a slot holding its parent's cache: the
 * first child of a parent keeps the parent's slot, the others take slots
 * no surviving parent uses (so no copy overwrites a source). */
static int search_assign(search *s, const tfm_beam_model *model, size_t B, shared *sh,
                         tfm_err *err)
{
    memset(sh->parent_used, 0, sizeof *sh->parent_used * B);
    memset(sh->claimed, 0, sizeof *sh->claimed * B);
    for (size_t i = 0; i < s->nl; i++)
        sh->parent_used[s->live[i].slot - s->slot0] = 1;
    size_t nfree = 0;
    for (size_t k = 0; k < B; k++)
        if (!sh->parent_used[k])
            sh->free_slots[nfree++] = s->slot0 + (int)k;
    for (size_t i = 0; i < s->nl; i++) {
        int ps = s->live[i].slot;
        if (!sh->claimed[ps - s->slot0]) {
            sh->claimed[ps - s->slot0] = 1;
            continue;
        }
        TFM_ASSERT(nfree > 0);
        int d = sh->free_slots[--nfree];
        if (model->copy_slot(model->ctx, d, ps, err) < 0)
            return -1;
        s->live[i].slot = d;
    }
    return 0;
}

int tfm_beam_search_many(const tfm_beam_model *model, const tfm_beam_opts *o,
                         const tfm_beam_task *tasks, size_t n, tfm_beam_result *out,
                         tfm_err *err)
{
    memset(out, 0, sizeof *out * n);
    if (o->beam < 1)
        return tfm_err_set(err, "beam size must be at least 1");
    if (o->nbest < 1 || o->nbest > o->beam)
        return tfm_err_set(err, "nbest must be between 1 and the beam size (%d)", o->beam);
    for (size_t i = 0; i < n; i++)
        if ((tasks[i].max_len ? tasks[i].max_len : o->max_len) < 1)
            return tfm_err_set(err, "max tokens must be at least 1");

    const size_t B = (size_t)o->beam, V = model->vocab;
    int rc = -1;
    search *ss = tfm_calloc(n ? n : 1, sizeof *ss);
    for (size_t i = 0; i < n; i++) {
        search *s = &ss[i];
        s->L = (size_t)(tasks[i].max_len ? tasks[i].max_len : o->max_len);
        s->slot0 = tasks[i].slot0;
        s->live = tfm_calloc(B, sizeof *s->live);
        s->next = tfm_calloc(B, sizeof *s->next);
        for (size_t k = 0; k < B; k++) {
            s->live[k].tokens = tfm_malloc(sizeof(uint32_t) * s->L);
            s->live[k].logprobs = tfm_malloc(sizeof(float) * s->L);
            s->next[k].tokens = tfm_malloc(sizeof(uint32_t) * s->L);
            s->next[k].logprobs = tfm_malloc(sizeof(float) * s->L);
        }
        s->nl = 1;
        s->live[0].slot = s->slot0;
        s->lp = tasks[i].first;
        s->out = &out[i];
        out[i].hyps = tfm_calloc((size_t)o->nbest, sizeof *out[i].hyps);
    }
    shared sh = {
        .cands = tfm_malloc(sizeof *sh.cands * 2 * B),
        .parent_used = tfm_malloc(sizeof(int) * B),
        .claimed = tfm_malloc(sizeof(int) * B),
        .free_slots = tfm_malloc(sizeof(int) * B),
    };
    float *lp = tfm_malloc(sizeof *lp * (n ? n : 1) * B * V);
    uint32_t *toks = tfm_malloc(sizeof *toks * (n ? n : 1) * B);
    int *slots = tfm_malloc(sizeof *slots * (n ? n : 1) * B);
    size_t *row0 = tfm_malloc(sizeof *row0 * (n ? n : 1));

    for (;;) {
        /* every search selects from its rows of the last step (or its
         * first), then the survivors' tokens go into one step */
        size_t rows = 0;
        for (size_t i = 0; i < n; i++) {
            search *s = &ss[i];
            if (s->done)
                continue;
            search_select(s, o, V, &sh);
            s->t++;
            if (s->done)
                continue;
            if (search_assign(s, model, B, &sh, err) < 0)
                goto done;
            row0[i] = rows;
            for (size_t k = 0; k < s->nl; k++) {
                toks[rows] = s->live[k].tokens[s->live[k].len - 1];
                slots[rows] = s->live[k].slot;
                rows++;
            }
        }
        if (rows == 0)
            break;
        if (model->step(model->ctx, rows, toks, slots, lp, err) < 0)
            goto done;
        for (size_t i = 0; i < n; i++)
            if (!ss[i].done) {
                ss[i].lp = lp + row0[i] * V;
                out[i].steps++;
            }
    }
    rc = 0;
done:
    for (size_t i = 0; i < n; i++) {
        search *s = &ss[i];
        if (rc < 0)
            tfm_beam_result_free(&out[i]);
        for (size_t k = 0; k < B; k++) {
            free(s->live[k].tokens);
            free(s->live[k].logprobs);
            free(s->next[k].tokens);
            free(s->next[k].logprobs);
        }
        free(s->live);
        free(s->next);
    }
    free(ss);
    free(sh.cands);
    free(sh.parent_used);
    free(sh.claimed);
    free(sh.free_slots);
    free(lp);
    free(toks);
    free(slots);
    free(row0);
    return rc;
}

int tfm_beam_search(const tfm_beam_model *model, const tfm_beam_opts *o,
                    const float *first, tfm_beam_result *out, tfm_err *err)
{
    tfm_beam_task task = {first, 0, o->max_len};
    if (o->max_len < 1) {
        memset(out, 0, sizeof *out);
        return tfm_err_set(err, "max tokens must be at least 1");
    }
    return tfm_beam_search_many(model, o, &task, 1, out, err);
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
