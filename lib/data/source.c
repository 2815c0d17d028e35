/* A translation source from text or ids (data/source.h). */
#include "config.h"

#include "data/source.h"

#include "text/utf8.h"

int64_t tfm_translate_source_eos(const tfm_tokenizer *src_tok)
{
    return tfm_tokenizer_specials(src_tok)->eos;
}

int tfm_translate_source(const tfm_tokenizer *tok, tfm_tok_scratch *scratch, const char *text,
                         size_t len, int bos, int limit, int truncate, int encoder,
                         tfm_ids *out, size_t *dropped, tfm_err *err)
{
    return tfm_translate_source_split(tok, scratch, text, len, bos, limit, truncate, encoder, 0,
                                      out, dropped, err);
}

int tfm_translate_source_split(const tfm_tokenizer *tok, tfm_tok_scratch *scratch,
                               const char *text, size_t len, int bos, int limit, int truncate,
                               int encoder, int split_special, tfm_ids *out, size_t *dropped,
                               tfm_err *err)
{
    tfm_ids_clear(out);
    if (dropped)
        *dropped = 0;
    const int64_t eos = tfm_translate_source_eos(tok);
    if (eos < 0)
        return tfm_err_set(err, "the source tokenizer has no end-of-text token, which ends "
                                "every source");
    if (!tfm_utf8_valid((const unsigned char *)text, len))
        return tfm_err_set(err, "invalid UTF-8");
    if (tfm_tokenizer_check_kept(tok, text, len, err) < 0)
        return -1;
    if (bos) {
        const int64_t b = tfm_tokenizer_specials(tok)->bos;
        if (b < 0)
            return tfm_err_set(err, "the source tokenizer has no beginning-of-text token, "
                                    "which begins every source (model.source_bos)");
        tfm_ids_push(out, (uint32_t)b);
    }
    /* special-token text stays text: training data is read that way */
    tfm_tokenizer_encode(tok, scratch, text, len, split_special, out);
    tfm_ids_push(out, (uint32_t)eos);
    return tfm_translate_fit(out, (uint32_t)eos, limit, truncate, encoder, dropped, err);
}

int tfm_translate_fit(tfm_ids *src, uint32_t eos, int limit, int truncate, int encoder,
                      size_t *dropped, tfm_err *err)
{
    if (dropped)
        *dropped = 0;
    if (limit < 1)
        limit = 1;
    if (src->len <= (size_t)limit)
        return 0;
    if (!truncate)
        return tfm_err_set(err, "the %s is %zu tokens (end-of-text included), longer than "
                                "the %s context (%d)", encoder ? "source" : "input",
                           src->len, encoder ? "encoder's" : "model's", limit);
    if (dropped)
        *dropped = src->len - (size_t)limit;
    src->data[limit - 1] = eos;
    src->len = (size_t)limit;
    return 0;
}
