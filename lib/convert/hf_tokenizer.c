/* The tokenizer of a HuggingFace folder as transformers loads it
 * (convert/hf.h tfm_hf_tokenizer_beside). */
#include "config.h"

#include "convert/hf.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* HuggingFace's tokenizer_config.json beside a tokenizer without
 * tokenizer.json (which carries its own settings), at path: BertTokenizer's
 * do_lower_case, strip_accents and tokenize_chinese_chars for a vocab.txt
 * (do_basic_tokenize false and never_split are refused); T5Tokenizer's
 * extra_ids for a spiece.model (absent: 100, T5Tokenizer's default, in a
 * T5 folder; else none); GPT-2's add_prefix_space true is refused.  No
 * file: the defaults. */
static int hf_tokenizer_config(const char *path, tfm_tokenizer *tok, int t5, int64_t *added,
                               tfm_err *err)
{
    tfm_tok_kind kind = tfm_tokenizer_kind(tok);
    int64_t extra = t5 ? 100 : 0;
    int rc = -1, lower = 1, strip = -1, cjk = 1, basic = 1, prefix = 0;
    tfm_json_doc doc = {0};
    if (access(path, F_OK) == 0) {
        if (tfm_json_parse_file(&doc, path, 0, err) < 0 ||
            tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
            tfm_hf_bool(&doc, "do_lower_case", 1, &lower, err) < 0 ||
            tfm_hf_bool(&doc, "tokenize_chinese_chars", 1, &cjk, err) < 0 ||
            tfm_hf_bool(&doc, "do_basic_tokenize", 1, &basic, err) < 0 ||
            tfm_hf_bool(&doc, "add_prefix_space", 0, &prefix, err) < 0 ||
            tfm_hf_int(&doc, "extra_ids", 0, 1 << 20, extra, &extra, err) < 0)
            goto out;
        const tfm_json *j = tfm_json_get(doc.root, "strip_accents");
        if (j && j->type != TFM_JSON_NULL) {
            if (tfm_json_expect(&doc, j, TFM_JSON_BOOL, "strip_accents", err) < 0)
                goto out;
            strip = j->boolean;
        }
        j = tfm_json_get(doc.root, "never_split");
        if (kind == TFM_TOK_WORDPIECE && j && !tfm_hf_is_default(j)) {
            tfm_err_at(err, path, j->line, j->col, "never_split is not supported (tfm's "
                       "WordPiece splits every word as HF's fast tokenizer does)");
            goto out;
        }
        j = tfm_json_get(doc.root, "do_basic_tokenize");
        if (kind == TFM_TOK_WORDPIECE && !basic) {
            tfm_err_at(err, path, j->line, j->col, "do_basic_tokenize false is not supported "
                       "(tfm's WordPiece always splits on whitespace and punctuation first)");
            goto out;
        }
        j = tfm_json_get(doc.root, "add_prefix_space");
        if (kind == TFM_TOK_BPE && prefix) {
            tfm_err_at(err, path, j->line, j->col, "add_prefix_space true is not supported "
                       "(write a tokenizer.json with the ByteLevel pre-tokenizer's "
                       "add_prefix_space)");
            goto out;
        }
    }
    if (kind == TFM_TOK_WORDPIECE)
        tfm_tokenizer_set_bert_case(tok, lower, strip, cjk);
    *added = kind == TFM_TOK_UNIGRAM ? extra : 0;
    if (*added && tfm_tokenizer_add_extra_ids(tok, (uint32_t)extra, path, err) < 0)
        goto out;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* A special token as tokenizer_config.json names it: a string, or an
 * AddedToken object's "content"; NULL for none (null). */
static const tfm_json *hf_token_content(const tfm_json *j)
{
    if (j && j->type == TFM_JSON_OBJECT)
        j = tfm_json_get(j, "content");
    return j && j->type == TFM_JSON_STRING ? j : NULL;
}

/* 1 when the byte-level BPE tok puts a space before a text (ByteLevel's
 * add_prefix_space: "a" encodes as " a" does), else 0. */
static int bpe_prefix_space(const tfm_tokenizer *tok)
{
    tfm_tok_scratch *sc = tfm_tok_scratch_new(tok);
    tfm_ids a = {0}, b = {0};
    tfm_tokenizer_encode(tok, sc, "a", 1, 0, &a);
    tfm_tokenizer_encode(tok, sc, " a", 2, 0, &b);
    int same = a.len == b.len && !memcmp(a.data, b.data, a.len * sizeof *a.data);
    tfm_ids_free(&a);
    tfm_ids_free(&b);
    tfm_tok_scratch_free(sc);
    return same;
}

/* transformers 5's LlamaTokenizer (tokenizer_config.json's tokenizer_class
 * at path) keeps tokenizer.json's vocab and merges only and puts its own
 * Metaspace around them (prepend_scheme "first"; "always" with legacy
 * true, "never" with add_prefix_space false): tok is made so, or refused
 * when it is not a BPE model that can be (a byte-level one: transformers
 * would give other ids than the file says).  Another class or no file:
 * nothing. */
static int hf_llama_class(const char *path, tfm_tokenizer *tok, const char *tokfile,
                          tfm_err *err)
{
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc = {0};
    int rc = -1, legacy = 0, prefix = 1;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0 ||
        tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0)
        goto out;
    const tfm_json *c = tfm_json_get(doc.root, "tokenizer_class");
    if (!c || c->type != TFM_JSON_STRING ||
        (strcmp(c->str, "LlamaTokenizer") && strcmp(c->str, "LlamaTokenizerFast"))) {
        rc = 0;
        goto out;
    }
    const tfm_json *ap = tfm_json_get(doc.root, "add_prefix_space");
    if (tfm_hf_bool(&doc, "legacy", 0, &legacy, err) < 0 ||
        (ap && ap->type != TFM_JSON_NULL && tfm_hf_bool(&doc, "add_prefix_space", 1, &prefix,
                                                         err) < 0))
        goto out;
    const char *scheme = !prefix ? "never" : legacy ? "always" : "first";
    if (tfm_tokenizer_set_llama_metaspace(tok, scheme) < 0) {
        const char *tf = strrchr(tokfile, '/');
        tfm_err_at(err, path, c->line, c->col, "tokenizer_class %s contradicts %s: "
                   "transformers keeps only its vocab and merges and reads them as "
                   "sentencepiece's BPE (Metaspace, byte fallback, no normalizer), which its "
                   "%s is not (expected Llama 2's tokenizer.json, or the class its "
                   "tokenizer is)", c->str, tf ? tf + 1 : tokfile,
                   tfm_tokenizer_kind(tok) == TFM_TOK_UNIGRAM ? "normalizer" : "model");
        goto out;
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* tokenizer_config.json at path against the tokenizer read from tokfile:
 * the special tokens it names (bos_token ... mask_token,
 * additional_special_tokens) must be tokens, and added_tokens_decoder's
 * ids must hold its contents: transformers would add what is missing as
 * new ids, which the model and tfm do not have.  No file: nothing. */
static int hf_tokenizer_config_agrees(const char *path, const tfm_tokenizer *tok,
                                      const char *tokfile, tfm_err *err)
{
    static const char *const named[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};
    if (access(path, F_OK) != 0)
        return 0;
    const char *tf = strrchr(tokfile, '/');
    tf = tf ? tf + 1 : tokfile;
    tfm_json_doc doc = {0};
    int rc = -1;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0 ||
        tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0)
        goto out;
    const tfm_json *extra = tfm_json_get(doc.root, "additional_special_tokens");
    size_t n_extra = extra && extra->type == TFM_JSON_ARRAY ? extra->n : 0;
    for (size_t i = 0; i < sizeof named / sizeof *named + n_extra; i++) {
        const tfm_json *j = i < sizeof named / sizeof *named
                                ? tfm_json_get(doc.root, named[i])
                                : extra->items[i - sizeof named / sizeof *named];
        const tfm_json *c = hf_token_content(j);
        if (c && tfm_tokenizer_token_id(tok, c->str, c->len) < 0) {
            tfm_err_at(err, path, c->line, c->col, "%s '%s' is not a token of %s (expected one "
                       "it defines: transformers would give it a new id)",
                       i < sizeof named / sizeof *named ? named[i]
                                                       : "additional_special_tokens' entry",
                       c->str, tf);
            goto out;
        }
    }
    /* transformers 5 follows add_prefix_space here over tokenizer.json's
     * ByteLevel pre-tokenizer: ids would differ from tfm's */
    const tfm_json *ap = tfm_json_get(doc.root, "add_prefix_space");
    if (ap && ap->type == TFM_JSON_BOOL && tfm_tokenizer_kind(tok) == TFM_TOK_BPE &&
        ap->boolean != bpe_prefix_space(tok)) {
        tfm_err_at(err, path, ap->line, ap->col, "add_prefix_space %s contradicts %s, whose "
                   "byte-level pre-tokenizer %s a space before each text (expected the same "
                   "setting in both: transformers follows this file)", ap->str, tf,
                   ap->boolean ? "does not put" : "puts");
        goto out;
    }
    const tfm_json *dec = tfm_json_get(doc.root, "added_tokens_decoder");
    for (size_t i = 0; dec && dec->type == TFM_JSON_OBJECT && i < dec->n; i++) {
        const tfm_json *k = dec->keys[i], *c = hf_token_content(dec->items[i]);
        char *end;
        long long id = strtoll(k->str, &end, 10);
        if (!c || end == k->str || *end || id < 0 || id > INT32_MAX) {
            tfm_err_at(err, path, k->line, k->col, "added_tokens_decoder: expected an id "
                       "and {\"content\": TOKEN, ...}");
            goto out;
        }
        size_t len = 0;
        const char *have = (uint64_t)id < tfm_tokenizer_vocab_size(tok)
                               ? tfm_tokenizer_piece(tok, (uint32_t)id, &len) : NULL;
        if (!have || len != c->len || memcmp(have, c->str, len) != 0) {
            int64_t at = tfm_tokenizer_token_id(tok, c->str, c->len);
            if (at >= 0)
                tfm_err_at(err, path, k->line, k->col, "added_tokens_decoder gives '%s' the "
                           "id %lld but %s has it as %lld", c->str, id, tf, (long long)at);
            else
                tfm_err_at(err, path, k->line, k->col, "added_tokens_decoder's '%s' (id %lld) "
                           "is not a token of %s (expected its tokens at their ids)", c->str,
                           id, tf);
            goto out;
        }
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* The tokenizer beside a HuggingFace checkpoint: tokenizer.json (which says
 * whether it lowercases), else BERT's vocab.txt, else T5's spiece.model,
 * else GPT-2's vocab.json + merges.txt (or encoder.json + vocab.bpe), the
 * last three with tokenizer_config.json's settings (t5: a T5 folder's);
 * *tok = NULL when there is none. */
int tfm_hf_tokenizer_beside(const char *model_path, int vocab_size, int t5, tfm_tokenizer **tok,
                            tfm_err *err)
{
    char path[4200], load[4200], cfg[4200];
    *tok = NULL;
    tfm_hf_json_beside(model_path, "tokenizer.json", path, sizeof path);
    int plain = access(path, F_OK) == 0;
    if (!plain) {
        tfm_hf_json_beside(model_path, "vocab.txt", path, sizeof path);
        if (access(path, F_OK) != 0)
            tfm_hf_json_beside(model_path, "spiece.model", path, sizeof path);
        if (access(path, F_OK) != 0) {
            /* GPT-2's pairs: the tokenizer loader reads them from the folder */
            static const char *const pairs[2][2] = {{"vocab.json", "merges.txt"},
                                                   {"encoder.json", "vocab.bpe"}};
            int k = 0;
            for (; k < 2; k++) {
                char merges[4200];
                tfm_hf_json_beside(model_path, pairs[k][0], path, sizeof path);
                tfm_hf_json_beside(model_path, pairs[k][1], merges, sizeof merges);
                if (access(path, F_OK) == 0 && access(merges, F_OK) == 0)
                    break;
            }
            if (k == 2)
                return 0;
        }
    }
    /* the pairs by their folder; messages name the vocabulary's file */
    if (strstr(path, ".json") && !plain)
        tfm_hf_json_beside(model_path, ".", load, sizeof load);
    else
        snprintf(load, sizeof load, "%s", path);
    if (tfm_tokenizer_load(tok, load, err) < 0)
        return -1;
    tfm_hf_json_beside(model_path, "tokenizer_config.json", cfg, sizeof cfg);
    int64_t extra = 0;
    if ((!plain && hf_tokenizer_config(cfg, *tok, t5, &extra, err) < 0) ||
        (plain && hf_llama_class(cfg, *tok, path, err) < 0) ||
        hf_tokenizer_config_agrees(cfg, *tok, path, err) < 0) {
        tfm_tokenizer_free(*tok);
        *tok = NULL;
        return -1;
    }
    uint32_t tv = tfm_tokenizer_vocab_size(*tok);
    if (tv > (uint32_t)vocab_size) {
        tfm_tokenizer_free(*tok);
        *tok = NULL;
        if (extra)
            return tfm_err_set(err, "%s: the tokenizer has %u tokens (with %lld <extra_id_N> "
                               "sentinels, %s) but the model only %d", path, tv,
                               (long long)extra, access(cfg, F_OK) == 0
                                   ? "tokenizer_config.json's extra_ids"
                                   : "T5Tokenizer's default without tokenizer_config.json",
                               vocab_size);
        return tfm_err_set(err, "%s: the tokenizer has %u tokens but the model only %d", path,
                           tv, vocab_size);
    }
    return 0;
}
