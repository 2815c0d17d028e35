/* BERT's masked-LM task (optionally with next-sentence prediction): each
 * sequence is [CLS] A [SEP] B [SEP] with round(mask_prob·length) content
 * positions chosen (whole words with train.whole_word_mask) and corrupted
 * 80/10/10 (man/tfm-config.5, train.task).
 *
 * A and B come from text as google-research/bert's create_pretraining_data
 * builds them (data.text: documents of segments, train/data.h), except that
 * each sequence is drawn at random instead of walking the corpus: a document
 * (weighted by its tokens), a random starting segment, segments added until
 * the target length (and at least two), A the first 1..n-1 of them, B the
 * rest or, for NSP half the time, segments from a random other document;
 * the pair is then cut to block_size - 3 from the longer side, front or
 * back at random.  A document of one segment (data.documents line) is cut
 * at a random token instead, so IsNext pairs exist there too.  A token file
 * (data.train) has no boundaries: windows of the stream, A their first half.
 *
 * Every draw comes from the rng passed in, so a resumed run repeats the
 * pairs and masks bit for bit, and a sequence seen twice is masked afresh. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/task_internal.h"

/* One side's data: a token file, or text as documents. */
typedef struct corpus {
    tfm_tokens stream;
    tfm_docs docs;
} corpus;

typedef struct mlm_task {
    corpus train, val;
    int text;                 /* documents (data.text), else stream */
    int B, T, V, nsp;
    int64_t eval_batches;
    int32_t cls, sep, mask;
    unsigned char *special;   /* [V] 1: never drawn as a random token */
    unsigned char *head, *tail; /* [V] whole words: a word starts at a head
                                   token or after a tail token; NULL: off */
    double p_mask, p_tok, p_rand, p_short;
    int32_t *x, *y, *seg;     /* [B, T] */
    int *len;                 /* [B] */
    int32_t *labels;          /* [B] nsp: 0 B follows A, 1 B is random */
    int *word, *word_len;     /* [T] scratch: the candidate words of a row */
} mlm_task;

/* A and B as ranges of a corpus' ids. */
typedef struct pair {
    size_t a, b, la, lb;
    int label;
} pair;

static const tfm_tokens *ids_of(const mlm_task *L, const corpus *c)
{
    return L->text ? &c->docs.ids : &c->stream;
}

static int32_t random_token(const mlm_task *L, tfm_rng *rng)
{
    for (;;) {
        int32_t t = (int32_t)tfm_rng_below(rng, (uint64_t)L->V);
        if (!L->special[t])
            return t;
    }
}

/* The target content length: the whole context, or with p_short a uniform
 * length in [2, T - 3] (BERT's short sequences). */
static size_t target_length(const mlm_task *L, tfm_rng *rng)
{
    size_t content = (size_t)L->T - 3;
    if (L->p_short > 0 && tfm_rng_double(rng) < L->p_short)
        content = 2 + (size_t)tfm_rng_below(rng, content - 1);
    return content;
}

/* A token file: a window of `content` tokens, A its first half (rounded up),
 * B the rest or, for NSP half the time, tokens from a random offset. */
static void pair_stream(const mlm_task *L, const tfm_tokens *data, tfm_rng *rng, pair *p)
{
    size_t content = target_length(L, rng);
    p->la = (content + 1) / 2;
    p->lb = content - p->la;
    p->a = (size_t)tfm_rng_below(rng, data->n - content + 1);
    p->b = p->a + p->la;
    p->label = 0;
    if (L->nsp && tfm_rng_double(rng) < 0.5) {
        p->b = (size_t)tfm_rng_below(rng, data->n - p->lb + 1);
        p->label = 1;
    }
}

/* The document holding token i. */
static size_t doc_at(const tfm_docs *D, size_t i)
{
    size_t lo = 0, hi = D->n_doc; /* D->seg[D->doc[lo]] <= i < that of hi */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (D->seg[D->doc[mid]] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Heads among n fair coin flips. */
static size_t coin_flips(tfm_rng *rng, size_t n)
{
    size_t h = 0;
    for (; n >= 64; n -= 64)
        h += (size_t)__builtin_popcountll(tfm_rng_u64(rng));
    if (n)
        h += (size_t)__builtin_popcountll(tfm_rng_u64(rng) & ((UINT64_C(1) << n) - 1));
    return h;
}

/* create_pretraining_data's truncate_seq_pair: while A + B is longer than
 * max, one token goes from the longer side (B on a tie), from its front or
 * back by a coin flip.  Which side loses how many follows from the lengths
 * alone, so only the front/back split is drawn: a binomial per side. */
static void truncate_pair(pair *p, size_t max, tfm_rng *rng)
{
    if (p->la + p->lb <= max)
        return;
    size_t e = p->la + p->lb - max, ta = 0, tb = 0;
    size_t d = p->la > p->lb ? p->la - p->lb : p->lb - p->la;
    size_t first = d < e ? d : e;
    if (p->la > p->lb)
        ta = first;
    else
        tb = first;
    /* once level, the sides alternate, B first */
    tb += (e - first + 1) / 2;
    ta += (e - first) / 2;
    p->a += coin_flips(rng, ta);
    p->la -= ta;
    p->b += coin_flips(rng, tb);
    p->lb -= tb;
}

/* Text: A and B from documents (see the top of the file). */
static void pair_docs(const mlm_task *L, const tfm_docs *D, tfm_rng *rng, pair *p)
{
    size_t target = target_length(L, rng);
    size_t j = doc_at(D, (size_t)tfm_rng_below(rng, D->ids.n));
    size_t s0 = D->doc[j], s_end = D->doc[j + 1];
    if (s_end - s0 >= 2) {
        /* a chunk of at least two segments, so that B can follow A */
        size_t first = s0 + (size_t)tfm_rng_below(rng, s_end - s0 - 1), s = first;
        do
            s++;
        while (s < s_end && (s - first < 2 || D->seg[s] - D->seg[first] < target));
        size_t cut = first + 1 + (size_t)tfm_rng_below(rng, s - first - 1);
        p->a = D->seg[first];
        p->la = D->seg[cut] - p->a;
        p->b = D->seg[cut];
        p->lb = D->seg[s] - p->b;
    } else {
        /* one segment: a window of it, cut at a random token */
        size_t a = D->seg[s0], n = D->seg[s0 + 1] - a;
        if (n > target) {
            a += (size_t)tfm_rng_below(rng, n - target + 1);
            n = target;
        }
        size_t cut = 1 + (size_t)tfm_rng_below(rng, n - 1);
        p->a = a;
        p->la = cut;
        p->b = a + cut;
        p->lb = n - cut;
    }
    p->label = 0;
    if (L->nsp && tfm_rng_double(rng) < 0.5) {
        /* B: from a random segment of another document, up to the rest of
         * the target (at least one segment) */
        size_t k = (size_t)tfm_rng_below(rng, D->n_doc - 1);
        k += k >= j;
        size_t first = D->doc[k] + (size_t)tfm_rng_below(rng, D->doc[k + 1] - D->doc[k]);
        size_t s = first, want = target > p->la ? target - p->la : 0;
        do
            s++;
        while (s < D->doc[k + 1] && D->seg[s] - D->seg[first] < want);
        p->b = D->seg[first];
        p->lb = D->seg[s] - p->b;
        p->label = 1;
    }
    truncate_pair(p, (size_t)L->T - 3, rng);
}

/* Lays out row r as [CLS] A [SEP] B [SEP] and masks it; returns the
 * positions chosen. */
static int fill_row(mlm_task *L, const tfm_tokens *data, const pair *p, tfm_rng *rng, int r)
{
    int T = L->T, na = (int)p->la, nb = (int)p->lb, content = na + nb;
    int32_t *x = L->x + (size_t)r * T, *y = L->y + (size_t)r * T, *seg = L->seg + (size_t)r * T;
    int n = 0;
    x[n] = L->cls;
    seg[n++] = 0;
    for (int i = 0; i < na; i++) {
        x[n] = (int32_t)tfm_tokens_at(data, p->a + (size_t)i);
        seg[n++] = 0;
    }
    x[n] = L->sep;
    seg[n++] = 0;
    for (int i = 0; i < nb; i++) {
        x[n] = (int32_t)tfm_tokens_at(data, p->b + (size_t)i);
        seg[n++] = 1;
    }
    x[n] = L->sep;
    seg[n++] = 1;
    L->len[r] = n;
    for (int t = 0; t < T; t++)
        y[t] = -1;
    for (int t = n; t < T; t++)
        x[t] = seg[t] = 0;
    L->labels[r] = p->label;
    /* the candidates: content positions, or whole words, which never
     * reach across a [SEP] */
    int nw = 0;
    for (int t = 1; t < n - 1; t++) {
        if (t == na + 1)
            continue;
        if (nw && L->head && t != na + 2 && t > 1 && !L->head[x[t]] && !L->tail[x[t - 1]]) {
            L->word_len[nw - 1]++;
            continue;
        }
        L->word[nw] = t;
        L->word_len[nw++] = 1;
    }
    /* words in random order (a partial Fisher-Yates shuffle) until k
     * positions are chosen; as create_pretraining_data, a word that would
     * overshoot k is passed over.  Each position of a word is corrupted on
     * its own draw, as BERT's whole-word masking does. */
    int k = (int)lrint(L->p_mask * content);
    k = k < 1 ? 1 : k > content ? content : k;
    int chosen = 0;
    for (int i = 0; i < nw && chosen < k; i++) {
        int j = i + (int)tfm_rng_below(rng, (uint64_t)(nw - i));
        int w = L->word[j], wl = L->word_len[j];
        L->word[j] = L->word[i];
        L->word_len[j] = L->word_len[i];
        L->word[i] = w;
        L->word_len[i] = wl;
        if (chosen + wl > k)
            continue;
        for (int q = w; q < w + wl; q++) {
            y[q] = x[q];
            double u = tfm_rng_double(rng);
            if (u < L->p_tok)
                x[q] = L->mask;
            else if (u >= 1.0 - L->p_rand)
                x[q] = random_token(L, rng);
        }
        chosen += wl;
    }
    return chosen;
}

static void draw(mlm_task *L, const corpus *c, tfm_rng *rng, tfm_batch *b)
{
    const tfm_tokens *data = ids_of(L, c);
    for (int r = 0; r < L->B; r++) {
        pair p;
        if (L->text)
            pair_docs(L, &c->docs, rng, &p);
        else
            pair_stream(L, data, rng, &p);
        fill_row(L, data, &p, rng, r);
    }
    *b = (tfm_batch){.inputs = L->x, .targets = L->y, .B = L->B, .T = L->T,
                     .segments = L->seg, .lengths = L->len,
                     .labels = L->nsp ? L->labels : NULL};
}

static int mlm_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    mlm_task *L = impl;
    draw(L, &L->train, rng, b);
    /* every position is read, whether or not it counts in the loss */
    *n_tokens = 0;
    for (int r = 0; r < L->B; r++)
        *n_tokens += (size_t)L->len[r];
    return 0;
}

/* The MLM loss over every chosen position of eval_batches batches drawn
 * from seed, the share of them predicted right (argmax) and, with NSP, the
 * share of next-sentence labels predicted right. */
static int mlm_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    mlm_task *L = impl;
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    double loss = 0;
    long n = 0, right = 0, nsp_n = 0, nsp_right = 0;
    for (int64_t i = 0; i < L->eval_batches; i++) {
        tfm_batch b;
        draw(L, &L->val, &rng, &b);
        if (tfm_model_forward_batch(m, &b, NULL, err) < 0)
            return -1;
        int rows, V;
        const float *z = tfm_model_head_out(m, TFM_HEAD_LM, &rows, &V);
        /* the rows are the positions with targets, in order */
        long k = 0;
        for (size_t p = 0; p < (size_t)L->B * L->T; p++) {
            if (L->y[p] < 0)
                continue;
            const float *row = z + (size_t)k++ * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best])
                    best = v;
            right += best == L->y[p];
        }
        TFM_ASSERT(k == rows);
        if (L->nsp) {
            int B, K;
            const float *c = tfm_model_head_out(m, TFM_HEAD_CLASS, &B, &K);
            for (int r = 0; c && K == 2 && r < B && r < L->B; r++, nsp_n++)
                nsp_right += (c[(size_t)r * 2 + 1] > c[(size_t)r * 2]) == (L->labels[r] == 1);
        }
        loss += (double)m->head_loss[TFM_HEAD_LM] * (double)rows;
        n += rows;
    }
    s->loss = n ? loss / (double)n : 0.0;
    s->metric = n ? (double)right / (double)n : 0.0;
    s->metric_name = "masked_accuracy";
    s->values[0] = s->metric;
    if (L->nsp)
        s->values[1] = nsp_n ? (double)nsp_right / (double)nsp_n : 0.0;
    return 0;
}

static int mlm_metrics(void *impl, const char **names)
{
    names[0] = "masked_accuracy";
    names[1] = "nsp_accuracy";
    return ((mlm_task *)impl)->nsp ? 2 : 1;
}

static int mlm_has_val(void *impl)
{
    mlm_task *L = impl;
    return ids_of(L, &L->val)->n > 0;
}

static void mlm_describe(void *impl, char *buf, size_t size)
{
    mlm_task *L = impl;
    const char *what = L->nsp ? (L->head ? "masked LM of whole words + next sentence"
                                         : "masked LM + next sentence")
                              : (L->head ? "masked LM of whole words" : "masked LM");
    if (L->text)
        snprintf(buf, size, "%zu documents (%zu segments, %zu tokens) for training, %zu "
                            "documents (%zu tokens) for validation (%s)",
                 L->train.docs.n_doc, L->train.docs.n_seg, L->train.docs.ids.n,
                 L->val.docs.n_doc, L->val.docs.ids.n, what);
    else
        snprintf(buf, size, "%zu training tokens, %zu validation tokens (%s)",
                 L->train.stream.n, L->val.stream.n, what);
}

static void corpus_free(corpus *c)
{
    tfm_tokens_free(&c->stream);
    tfm_docs_free(&c->docs);
}

static void mlm_free(void *impl)
{
    mlm_task *L = impl;
    corpus_free(&L->train);
    corpus_free(&L->val);
    free(L->special);
    free(L->head);
    free(L->tail);
    free(L->x);
    free(L->y);
    free(L->seg);
    free(L->len);
    free(L->labels);
    free(L->word);
    free(L->word_len);
    free(L);
}

static const tfm_task_ops mlm_ops = {
    .name = "mlm",
    .describe = mlm_describe,
    .has_val = mlm_has_val,
    .next = mlm_next,
    .evaluate = mlm_evaluate,
    .metrics = mlm_metrics,
    .free = mlm_free,
};

static const tfm_task_ops mlm_nsp_ops = {
    .name = "mlm+nsp",
    .describe = mlm_describe,
    .has_val = mlm_has_val,
    .next = mlm_next,
    .evaluate = mlm_evaluate,
    .metrics = mlm_metrics,
    .free = mlm_free,
};

/* An id from the config, else the tokenizer's special. */
static int special_id(int64_t cfg_id, int64_t tok_id, const char *key, const char *name,
                      int V, const char *tok_name, int32_t *out, tfm_err *err)
{
    int64_t id = cfg_id >= 0 ? cfg_id : tok_id;
    if (id < 0 && tok_name)
        return tfm_err_set(err, "train.task mlm needs the id of %s, and tokenizer %s has no "
                                "%s: set %s or use a tokenizer that has it", name, tok_name,
                           name, key);
    if (id < 0)
        return tfm_err_set(err, "train.task mlm needs the id of %s: set %s or use a "
                                "tokenizer that has it", name, key);
    if (id >= V)
        return tfm_err_set(err, "%s %lld is outside the vocabulary (size %d)", key,
                           (long long)id, V);
    *out = (int32_t)id;
    return 0;
}

static int check_model(const tfm_config *cfg, int nsp, tfm_err *err)
{
    const char *task = nsp ? "mlm+nsp" : "mlm";
    if (cfg->model.kind != TFM_KIND_ENCODER)
        return tfm_err_set(err, "train.task %s needs model.kind encoder", task);
    if (!cfg->model.mlm_head)
        return tfm_err_set(err, "train.task %s needs model.mlm_head: true", task);
    if (cfg->model.segments < 2)
        return tfm_err_set(err, "train.task %s needs model.segments: 2 (sentences A and B)",
                           task);
    if (cfg->model.block_size < 5)
        return tfm_err_set(err, "train.task %s needs model.block_size of at least 5 "
                                "([CLS] A [SEP] B [SEP])", task);
    if (nsp && !(cfg->model.pooler && cfg->model.classes == 2 && cfg->model.nsp))
        return tfm_err_set(err, "train.task mlm+nsp needs model.pooler: true, model.classes: 2 "
                                "and model.nsp: true");
    if (!nsp && cfg->model.classes)
        return tfm_err_set(err, "train.task mlm with model.classes %lld: the classifier would "
                                "get no labels (train.task mlm+nsp trains the NSP head)",
                           (long long)cfg->model.classes);
    return 0;
}

/* What every draw relies on: a document, two tokens in each (A and B), and
 * for NSP another document to take B from.  part names a split's half. */
static int check_docs(const tfm_docs *D, int nsp, const char *part, tfm_err *err)
{
    const char *name = D->ids.name;
    if (D->n_doc == 0)
        return tfm_err_set(err, "%s: no text%s (empty, or only blank lines)", name, part);
    for (size_t j = 0; j < D->n_doc; j++) {
        size_t a, b;
        tfm_docs_span(D, j, &a, &b);
        if (b - a < 2)
            return tfm_err_set(err, "%s:%zu: a document of one token: [CLS] A [SEP] B [SEP] "
                                    "needs at least two (join it to a neighbour or remove it)",
                               name, D->line[j]);
    }
    if (nsp && D->n_doc < 2)
        return tfm_err_set(err, "%s: one document%s: train.task mlm+nsp takes B from another "
                                "document half the time and needs two or more (blank lines "
                                "separate documents)", name, part);
    return 0;
}

/* Text: data.text's documents (and data.val's, else the last
 * data.val_fraction of them). */
static int load_docs(mlm_task *L, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    tfm_docs_format f =
        cfg->data.documents == TFM_CONFIG_DOCS_LINE ? TFM_DOCS_LINE : TFM_DOCS_BLANK_LINE;
    tfm_docs *train = &L->train.docs, *val = &L->val.docs;
    if (cfg->data.val[0]) {
        if (tfm_docs_from_text(train, NULL, cfg->data.text, f, tok, 0, err) < 0 ||
            tfm_docs_from_text(val, NULL, cfg->data.val, f, tok, 0, err) < 0 ||
            check_docs(train, L->nsp, "", err) < 0 || check_docs(val, L->nsp, "", err) < 0)
            return -1;
    } else if (tfm_docs_from_text(train, val, cfg->data.text, f, tok, cfg->data.val_fraction,
                                  err) < 0 ||
               check_docs(train, L->nsp, val->n_doc ? " before the validation part" : "",
                          err) < 0 ||
               (val->n_doc &&
                check_docs(val, L->nsp, " in the validation part (data.val_fraction)", err) < 0))
        return -1;
    return tfm_task_check_vocab(&train->ids, &val->ids, cfg, tok, err);
}

static int load_stream(mlm_task *L, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    if (cfg->data.documents != TFM_CONFIG_DOCS_BLANK_LINE)
        return tfm_err_set(err, "data.documents is for data.text: a token file (data.train) "
                                "has no document boundaries and is cut into windows");
    if (tfm_task_load_stream(&L->train.stream, &L->val.stream, cfg, tok, err) < 0)
        return -1;
    size_t need = (size_t)cfg->model.block_size - 3;
    const tfm_tokens *tr = &L->train.stream, *va = &L->val.stream;
    if (tr->n < need)
        return tfm_err_set(err, "%s: %zu tokens, fewer than block_size - 3 = %zu", tr->name,
                           tr->n, need);
    if (va->n && va->n < need)
        return tfm_err_set(err, "%s: %zu tokens, fewer than block_size - 3 = %zu", va->name,
                           va->n, need);
    return 0;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Where words start (train.whole_word_mask): WordPiece continues a word
 * with "##" pieces; other tokenizers (byte-level BPE, chars) start one at a
 * token whose text begins with whitespace (GPT-2's "Ġ") or follows one that
 * ends with it.  Specials stand alone. */
static int word_tables(mlm_task *L, const tfm_tokenizer *tok, const char *tok_name, tfm_err *err)
{
    if (!tok)
        return tfm_err_set(err, "train.whole_word_mask needs data.tokenizer to tell where "
                                "words start");
    int V = L->V, wp = tfm_tokenizer_kind(tok) == TFM_TOK_WORDPIECE;
    uint32_t tv = tfm_tokenizer_vocab_size(tok);
    L->head = tfm_malloc((size_t)V);
    L->tail = tfm_malloc((size_t)V);
    tfm_buf b = {0};
    size_t words = 0;
    for (int i = 0; i < V; i++) {
        L->head[i] = L->tail[i] = 1;
        if ((uint32_t)i >= tv || L->special[i])
            continue;
        if (wp) {
            size_t n;
            const char *piece = tfm_tokenizer_piece(tok, (uint32_t)i, &n);
            L->head[i] = !(piece && n >= 2 && piece[0] == '#' && piece[1] == '#');
            L->tail[i] = 0;
        } else {
            uint32_t id = (uint32_t)i;
            tfm_buf_clear(&b);
            if (tfm_tokenizer_decode(tok, &id, 1, 1, &b, NULL) == 0 && b.len) {
                L->head[i] = is_space(b.data[0]);
                L->tail[i] = is_space(b.data[b.len - 1]);
            }
        }
        words += !L->head[i];
    }
    tfm_buf_free(&b);
    /* a vocabulary whose tokens all start words has no words to keep whole */
    if (words == 0)
        return tfm_err_set(err, "train.whole_word_mask: no token of tokenizer %s continues a "
                                "word (%s)", tok_name,
                           wp ? "no \"##\" pieces" : "no token without leading whitespace");
    return 0;
}

static int load(mlm_task *L, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    if (cfg->train.mask_token_prob + cfg->train.random_token_prob > 1.0)
        return tfm_err_set(err, "train.mask_token_prob (%g) + train.random_token_prob (%g) "
                                "exceed 1", cfg->train.mask_token_prob,
                           cfg->train.random_token_prob);
    L->text = cfg->data.text[0] != 0;
    if (check_model(cfg, L->nsp, err) < 0 ||
        (L->text ? load_docs(L, cfg, tok, err) : load_stream(L, cfg, tok, err)) < 0)
        return -1;
    int V = (int)cfg->model.vocab_size;
    const tfm_tok_specials *sp = tok ? tfm_tokenizer_specials(tok) : NULL;
    const char *tok_name = tok ? cfg->data.tokenizer : NULL;
    if (special_id(cfg->data.cls_id, sp ? sp->cls : -1, "data.cls_id", "[CLS]", V, tok_name,
                   &L->cls, err) < 0 ||
        special_id(cfg->data.sep_id, sp ? sp->sep : -1, "data.sep_id", "[SEP]", V, tok_name,
                   &L->sep, err) < 0 ||
        special_id(cfg->data.mask_id, sp ? sp->mask : -1, "data.mask_id", "[MASK]", V,
                   tok_name, &L->mask, err) < 0)
        return -1;
    L->special = tfm_calloc((size_t)V, 1);
    for (int64_t i = 0; i < cfg->data.n_special && i < V; i++)
        L->special[i] = 1;
    L->special[L->cls] = L->special[L->sep] = L->special[L->mask] = 1;
    if (sp) {
        const int64_t ids[] = {sp->unk, sp->pad, sp->bos, sp->eos};
        for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
            if (ids[i] >= 0 && ids[i] < V)
                L->special[ids[i]] = 1;
    }
    int n_special = 0;
    for (int i = 0; i < V; i++)
        n_special += L->special[i];
    if (n_special == V)
        return tfm_err_set(err, "every id of the vocabulary (%d) is special: no random "
                                "replacement token to draw", V);
    L->V = V;
    L->T = (int)cfg->model.block_size;
    if (cfg->train.whole_word_mask && word_tables(L, tok, cfg->data.tokenizer, err) < 0)
        return -1;
    return 0;
}

int tfm_task_mlm_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    mlm_task *L = tfm_malloc(sizeof *L);
    memset(L, 0, sizeof *L);
    L->nsp = cfg->train.task == TFM_CONFIG_TASK_MLM_NSP;
    if (load(L, cfg, tok, err) < 0) {
        mlm_free(L);
        return -1;
    }
    L->B = (int)cfg->train.batch_size;
    L->eval_batches = cfg->train.eval_batches;
    L->p_mask = cfg->train.mask_prob;
    L->p_tok = cfg->train.mask_token_prob;
    L->p_rand = cfg->train.random_token_prob;
    L->p_short = cfg->train.short_seq_prob;
    size_t bt = (size_t)L->B * L->T;
    L->x = tfm_malloc(bt * sizeof *L->x);
    L->y = tfm_malloc(bt * sizeof *L->y);
    L->seg = tfm_malloc(bt * sizeof *L->seg);
    L->len = tfm_malloc((size_t)L->B * sizeof *L->len);
    L->labels = tfm_malloc((size_t)L->B * sizeof *L->labels);
    L->word = tfm_malloc((size_t)L->T * sizeof *L->word);
    L->word_len = tfm_malloc((size_t)L->T * sizeof *L->word_len);
    t->ops = L->nsp ? &mlm_nsp_ops : &mlm_ops;
    t->impl = L;
    return 0;
}
