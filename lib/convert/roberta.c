/* HuggingFace RoBERTa and XLM-RoBERTa checkpoints (convert/convert.h):
 * BERT's encoder (convert/bert.c reads them, kind TFM_BERT_ROBERTA) with
 * positions numbered from padding_idx + 1 (the rows before dropped, as
 * BART's 2), one token type (folded into the positions), the heads under
 * lm_head.* and classifier.{dense,out_proj}, and a tokenizer that wraps a
 * text in <s> ... </s> as its post-processor says: RoBERTa's byte-level
 * BPE, XLM-R's SentencePiece Unigram, both from tokenizer.json. */
#include "config.h"

#include "convert/bert.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *roberta_detect(const tfm_safetensors *st)
{
    return tfm_bert_detect(st, TFM_BERT_ROBERTA);
}

static int roberta_describe(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                            tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    return tfm_bert_describe(st, pre, TFM_BERT_ROBERTA, c, g, eos, err);
}

static int roberta_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    return tfm_bert_weights(b, TFM_BERT_ROBERTA, err);
}

static int roberta_task(const tfm_safetensors *st, const char *pre, tfm_buf *out, tfm_err *err)
{
    return tfm_bert_task(st, pre, TFM_BERT_ROBERTA, out, err);
}

/* A post-processor's special token (a TemplateProcessing piece
 * {"SpecialToken": {"id": TOKEN}}, or RobertaProcessing's [TOKEN, id])
 * as an id of tok; -1 when it is none. */
static int64_t special_of(const tfm_tokenizer *tok, const tfm_json *j)
{
    if (j && j->type == TFM_JSON_OBJECT)
        j = tfm_json_get(tfm_json_get(j, "SpecialToken"), "id");
    else if (j && j->type == TFM_JSON_ARRAY && j->n == 2)
        j = j->items[0];
    if (!j || j->type != TFM_JSON_STRING)
        return -1;
    return tfm_tokenizer_token_id(tok, j->str, j->len);
}

/* The wrap a post-processor gives a single text: RobertaProcessing's (and
 * BertProcessing's) cls and sep, TemplateProcessing's single [special, A,
 * special], a Sequence's first of those.  0 and nothing set when it has
 * none (HF adds none either), -1 when it names tokens tok lacks. */
static int post_wrap(const tfm_json_doc *doc, const tfm_json *pp, int64_t *cls, int64_t *sep,
                     const tfm_tokenizer *tok, tfm_err *err)
{
    const tfm_json *t = pp && pp->type == TFM_JSON_OBJECT ? tfm_json_get(pp, "type") : NULL;
    if (!t || t->type != TFM_JSON_STRING)
        return 0;
    if (!strcmp(t->str, "Sequence")) {
        const tfm_json *list = tfm_json_get(pp, "processors");
        for (size_t i = 0; list && list->type == TFM_JSON_ARRAY && i < list->n; i++) {
            int rc = post_wrap(doc, list->items[i], cls, sep, tok, err);
            if (rc)
                return rc;
        }
        return 0;
    }
    const tfm_json *a = NULL, *b = NULL;
    if (!strcmp(t->str, "RobertaProcessing") || !strcmp(t->str, "BertProcessing")) {
        a = tfm_json_get(pp, "cls");
        b = tfm_json_get(pp, "sep");
    } else if (!strcmp(t->str, "TemplateProcessing")) {
        const tfm_json *s = tfm_json_get(pp, "single");
        if (!s || s->type != TFM_JSON_ARRAY || s->n != 3 ||
            !tfm_json_get(s->items[1], "Sequence"))
            return tfm_err_at(err, doc->name, pp->line, pp->col, "post_processor: a single "
                              "text's template must be [special, A, special] (RoBERTa's <s> A "
                              "</s>)");
        a = s->items[0];
        b = s->items[2];
    } else {
        return 0;
    }
    *cls = special_of(tok, a);
    *sep = special_of(tok, b);
    if (*cls < 0 || *sep < 0)
        return tfm_err_at(err, doc->name, pp->line, pp->col, "post_processor %s: its special "
                          "tokens are not the tokenizer's", t->str);
    return 1;
}

/* <s> ... </s> as tokenizer.json's post-processor says; without a
 * tokenizer.json (vocab.json + merges.txt), RobertaTokenizer's own: <s>
 * and </s>. */
static int roberta_tokenizer(const tfm_safetensors *st, tfm_tokenizer *tok, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(st->name, "tokenizer.json", path, sizeof path);
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    int64_t cls = sp->bos, sep = sp->eos;
    if (access(path, F_OK) == 0) {
        tfm_json_doc doc;
        if (tfm_json_parse_file(&doc, path, 0, err) < 0)
            return -1;
        cls = sep = -1;
        int rc = post_wrap(&doc, tfm_json_get(doc.root, "post_processor"), &cls, &sep, tok, err);
        tfm_json_doc_free(&doc);
        if (rc <= 0)
            return rc;
    }
    if (cls < 0 || sep < 0)
        return 0;
    return tfm_tokenizer_set_wrap(tok, cls, sep) < 0
               ? tfm_err_set(err, "%s: the <s> and </s> ids are not the tokenizer's", path)
               : 0;
}

static const char *const roberta_types[] = {"roberta", "xlm-roberta", NULL};

const tfm_convert_family tfm_convert_roberta = {
    .name = "roberta",
    .id = TFM_HF_ROBERTA,
    .reads = "RoBERTa and XLM-RoBERTa (roberta, xlm-roberta)",
    .what = "RoBERTa",
    .model_types = roberta_types,
    .detect = roberta_detect,
    .config = roberta_describe,
    .weights = roberta_weights,
    .task = roberta_task,
    .tokenizer = roberta_tokenizer,
};
