/* What span-corruption and denoise share (train/task_internal.h): a token
 * stream of raw text, windows of it, padded source/label batches and the
 * validation loss (prefix-lm's windows and validation loss too). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/task_internal.h"

int tfm_task_text_open(tfm_tokens *train, tfm_tokens *val, tfm_config *cfg,
                       const tfm_tokenizer *tok, size_t window, tfm_err *err)
{
    if (tfm_tokens_from_text(train, val, cfg->data.text, tok,
                             cfg->data.val[0] ? 0 : cfg->data.val_fraction, err) < 0)
        return -1;
    if (cfg->data.val[0] && tfm_tokens_from_text(val, NULL, cfg->data.val, tok, 0, err) < 0)
        return -1;
    if (tfm_task_check_vocab(train, val, cfg, tok, err) < 0)
        return -1;
    if (train->n < window)
        return tfm_err_set(err, "%s: %zu tokens, fewer than the %zu of a window (model."
                           "block_size %lld)", train->name, train->n, window,
                           (long long)cfg->model.block_size);
    if (val->n && val->n < window)
        return tfm_err_set(err, "%s: %zu validation tokens, fewer than the %zu of a window",
                           val->name, val->n, window);
    return 0;
}

void tfm_task_text_window(const tfm_tokens *data, size_t n, tfm_rng *rng, int32_t *out)
{
    size_t at = (size_t)tfm_rng_below(rng, data->n - n + 1);
    for (size_t i = 0; i < n; i++)
        out[i] = (int32_t)tfm_tokens_at(data, at + i);
}

void tfm_text_batch_init(tfm_text_batch *tb, int B, int S, int T, int32_t bos, int32_t pad)
{
    size_t BS = (size_t)B * (size_t)S, BT = (size_t)B * (size_t)T;
    *tb = (tfm_text_batch){.B = B, .S = S, .T = T, .bos = bos, .pad = pad};
    tb->rows_s = tfm_malloc(BS * sizeof *tb->rows_s);
    tb->rows_y = tfm_malloc(BT * sizeof *tb->rows_y);
    tb->src = tfm_malloc(BS * sizeof *tb->src);
    tb->x = tfm_malloc(BT * sizeof *tb->x);
    tb->y = tfm_malloc(BT * sizeof *tb->y);
    tb->src_len = tfm_malloc(2 * (size_t)B * sizeof *tb->src_len);
    tb->tgt_len = tb->src_len + B;
}

void tfm_text_batch_free(tfm_text_batch *tb)
{
    free(tb->rows_s);
    free(tb->rows_y);
    free(tb->src);
    free(tb->x);
    free(tb->y);
    free(tb->src_len);
    memset(tb, 0, sizeof *tb);
}

size_t tfm_text_batch_finish(tfm_text_batch *tb, tfm_batch *b)
{
    int S = 0, T = 0;
    size_t count = 0;
    for (int r = 0; r < tb->B; r++) {
        S = tb->src_len[r] > S ? tb->src_len[r] : S;
        T = tb->tgt_len[r] > T ? tb->tgt_len[r] : T;
        count += (size_t)tb->tgt_len[r];
    }
    for (int r = 0; r < tb->B; r++) {
        const int32_t *s0 = tb->rows_s + (size_t)r * tb->S, *y0 = tb->rows_y + (size_t)r * tb->T;
        int32_t *s = tb->src + (size_t)r * S, *x = tb->x + (size_t)r * T,
                *y = tb->y + (size_t)r * T;
        int ns = tb->src_len[r], nt = tb->tgt_len[r];
        for (int j = 0; j < S; j++)
            s[j] = j < ns ? s0[j] : tb->pad;
        x[0] = tb->bos;
        for (int j = 0; j < T; j++) {
            if (j > 0)
                x[j] = j < nt ? y0[j - 1] : tb->pad;
            y[j] = j < nt ? y0[j] : -1;
        }
    }
    *b = (tfm_batch){.inputs = tb->x, .targets = tb->y, .B = tb->B, .T = T, .src = tb->src,
                     .S = S, .src_lengths = tb->src_len};
    return count;
}

int tfm_task_text_loss(void *impl, tfm_text_draw draw, const tfm_tokens *val, int64_t n_batches,
                       tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    double sum = 0;
    for (int64_t i = 0; i < n_batches; i++) {
        tfm_batch b;
        draw(impl, val, &rng, &b);
        float l;
        if (tfm_model_forward_batch(m, &b, &l, err) < 0)
            return -1;
        sum += l;
    }
    s->loss = sum / (double)n_batches;
    return 0;
}
