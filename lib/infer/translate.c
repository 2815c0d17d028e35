/* Sources from text, the source tokenizer, greedy translation in memory. */
#include "config.h"

#include "infer/translate.h"

#include <stdlib.h>
#include <string.h>

#include "base/order.h"
#include "infer/generate.h"
#include "io/safetensors.h"
#include "text/utf8.h"

int tfm_lm_source_tokenizer(const tfm_lm *lm, tfm_tokenizer **out, tfm_err *err)
{
    *out = NULL;
    /* lm/lm.h keeps the open file private; its metadata is read here
     * until lm.c offers the source tokenizer itself */
    const tfm_safetensors *st = lm->file;
    size_t len = 0;
    const char *json = st ? tfm_safetensors_meta(st, "source_tokenizer", &len) : NULL;
    if (!json)
        return 0;
    char name[1100];
    snprintf(name, sizeof name, "%s:source_tokenizer", st->name ? st->name : "model");
    if (tfm_tokenizer_from_json(out, json, len, name, err) < 0)
        return -1;
    int sv = tfm_model_config_src_vocab(&lm->cfg);
    if (tfm_tokenizer_vocab_size(*out) > (uint32_t)sv) {
        tfm_err_set(err, "%s: the source tokenizer has %u tokens but the source vocabulary "
                         "only %d", name, tfm_tokenizer_vocab_size(*out), sv);
        tfm_tokenizer_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int tfm_lm_sources_open(tfm_lm_sources *s, const tfm_lm *lm, tfm_tok_scratch *lm_scratch,
                        tfm_err *err)
{
    memset(s, 0, sizeof *s);
    s->eos = -1;
    if (tfm_lm_source_tokenizer(lm, &s->owned, err) < 0)
        return -1;
    s->tok = s->owned ? s->owned : lm->tok;
    s->scratch = s->owned ? tfm_tok_scratch_new(s->owned) : lm_scratch;
    s->eos = s->tok ? tfm_translate_source_eos(s->tok) : -1;
    /* a file's own source tokenizer must say where a source ends */
    if (s->eos < 0 && !s->owned)
        s->eos = lm->eos;
    return 0;
}

void tfm_lm_sources_close(tfm_lm_sources *s)
{
    if (s->owned) {
        tfm_tok_scratch_free(s->scratch);
        tfm_tokenizer_free(s->owned);
    }
    memset(s, 0, sizeof *s);
    s->eos = -1;
}

static size_t source_len(const void *src, size_t i)
{
    return ((const tfm_ids *)src)[i].len;
}

int tfm_translate_greedy(const tfm_model_config *cfg, const tfm_weights *w, int64_t start,
                         uint32_t eos, const tfm_ids *src, size_t n, int batch,
                         double max_len_a, int max_len_b, tfm_ids *out, tfm_err *err)
{
    for (size_t i = 0; i < n; i++)
        tfm_ids_clear(&out[i]);
    if (cfg->kind != TFM_KIND_ENCODER_DECODER)
        return tfm_err_set(err, "translation needs model.kind encoder-decoder");
    /* a model view without a file or tokenizer: tfm_gen only reads these */
    tfm_lm lm;
    memset(&lm, 0, sizeof lm);
    lm.cfg = *cfg;
    lm.w = *w;
    lm.eos = eos;
    tfm_gen_opts o;
    tfm_gen_opts_default(&o);
    o.strategy = TFM_GEN_GREEDY;
    o.start = start;
    o.max_len_a = max_len_a;
    o.max_len_b = max_len_b;
    if (max_len_a <= 0 && max_len_b <= 0) {
        o.max_len_a = 1;
        o.max_len_b = 50;
    }
    o.max_tokens = 1 << 20;
    if (batch < 1)
        batch = 64;
    tfm_gen g;
    if (tfm_gen_init(&g, &lm, &o, batch, err) < 0)
        return -1;
    /* similar lengths together: a batch steps until its longest is done */
    size_t *order = tfm_malloc(sizeof *order * (n ? n : 1));
    tfm_order_by_key(order, n, source_len, src);
    tfm_ids *batch_src = tfm_malloc(sizeof *batch_src * (size_t)batch);
    tfm_gen_result *res = tfm_calloc((size_t)batch, sizeof *res);
    int rc = 0;
    for (size_t b0 = 0; b0 < n && rc == 0; b0 += (size_t)batch) {
        size_t nb = n - b0 < (size_t)batch ? n - b0 : (size_t)batch;
        for (size_t j = 0; j < nb; j++)
            batch_src[j] = src[order[b0 + j]];
        if (tfm_gen_run(&g, batch_src, nb, b0, res, NULL, NULL, err) < 0) {
            rc = -1;
            break;
        }
        for (size_t j = 0; j < nb; j++) {
            const tfm_gen_hyp *h = &res[j].hyps[0];
            tfm_ids_append(&out[order[b0 + j]], h->ids.data, h->ids.len);
            tfm_gen_result_free(&res[j]);
        }
    }
    if (rc < 0)
        for (size_t i = 0; i < n; i++)
            tfm_ids_free(&out[i]);
    free(res);
    free(batch_src);
    free(order);
    tfm_gen_free(&g);
    return rc;
}
