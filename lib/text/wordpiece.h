/* WordPiece (BERT) tokenization: BERT's basic tokenizer (HuggingFace's
 * BertNormalizer + BertPreTokenizer), the greedy longest-match-first
 * WordPiece model with "##" continuations, its decoder, and a trainer that
 * grows a vocabulary by merging the most frequent pair (in the manner of
 * HuggingFace's; the alphabet and ties differ: wordpiece_train.c).
 *
 * Usage:
 *     tfm_wordpiece *wp;
 *     if (tfm_wordpiece_load_vocab_txt(&wp, "vocab.txt", &err)) ...;
 *     tfm_wordpiece_encode(wp, NULL, text, len, &ids);   // appends ids
 *     tfm_wordpiece_decode(wp, ids.data, ids.len, &text, &err);
 *     tfm_wordpiece_free(wp);
 *
 * The tokenizer facade (tokenizer.h) wraps a tfm_wordpiece: it handles
 * added/special tokens (splitting them out of the text before calling
 * tfm_wordpiece_encode on the pieces in between, and dropping them before
 * decoding when asked), and the surrounding tokenizer.json keys; this file
 * reads and writes the normalizer, pre_tokenizer, model, decoder and
 * post_processor pieces.
 *
 * Invalid UTF-8: HuggingFace only ever sees valid Unicode (Rust strings; the
 * Node binding decodes bytes with U+FFFD for each maximal invalid subpart,
 * as WHATWG's decoder does).  We do the same: each maximal invalid subpart
 * reads as U+FFFD, which clean_text then drops (without splitting the word).
 *
 * Ownership: a tfm_wordpiece owns its vocabulary; once built it is
 * read-only, and encode/decode may run on many threads at once, each with
 * its own tfm_wordpiece_scratch (or NULL: a scratch is then allocated per
 * call).  Strings passed in are copied. */
#ifndef TFM_TEXT_WORDPIECE_H
#define TFM_TEXT_WORDPIECE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "io/json.h"
#include "text/tokenizer.h"

/* ---- BERT basic tokenization (BertNormalizer + BertPreTokenizer) ---- */

typedef struct tfm_bert_norm {
    int clean_text;           /* drop NUL, U+FFFD, Cc/Cf/Co/Cn; whitespace -> ' ' */
    int handle_chinese_chars; /* spaces around CJK ideographs */
    int strip_accents;        /* NFD + drop Mn; -1 (JSON null): = lowercase */
    int lowercase;
} tfm_bert_norm;

/* BERT uncased: all on, strip_accents null. */
void tfm_bert_norm_default(tfm_bert_norm *n);

/* The words of a text after normalization and pre-tokenization: word i is
 * text.data[off[i] .. off[i] + len[i]).  Reused across calls (cleared by
 * tfm_bert_pretokenize); release with tfm_bert_words_free. */
typedef struct tfm_bert_words {
    tfm_buf text;
    uint32_t *off, *len;
    size_t n, cap;
} tfm_bert_words;

/* Replaces out's content with the words of text[0..len). */
void tfm_bert_pretokenize(const tfm_bert_norm *norm, const char *text, size_t len,
                          tfm_bert_words *out);
void tfm_bert_words_free(tfm_bert_words *w);
/* A character BERT's BasicTokenizer makes a word of its own: punctuation
 * (ASCII 33-47, 58-64, 91-96, 123-126, Unicode P*, HF's table) or a CJK
 * ideograph. */
int tfm_bert_char_alone(int32_t c);

/* The normalized text (BertNormalizer alone), appended to out. */
void tfm_bert_normalize(const tfm_bert_norm *norm, const char *text, size_t len,
                        tfm_buf *out);

/* ---- the WordPiece model ---- */

typedef struct tfm_wordpiece tfm_wordpiece;

/* vocab.txt as HF reads it: one token per line, id = line number from 0,
 * trailing whitespace ('\r' included) trimmed; an empty line is a token (the
 * empty string, never produced); no line after the last newline.  A token
 * listed twice is encoded as its last id.  BERT uncased normalization; unk
 * "[UNK]" (must be present).  Invalid UTF-8 is an error (file:line). */
int tfm_wordpiece_load_vocab_txt(tfm_wordpiece **out, const char *path, tfm_err *err);
int tfm_wordpiece_from_vocab_txt(tfm_wordpiece **out, const char *data, size_t len,
                                 const char *name, tfm_err *err);

/* From the pieces of a parsed tokenizer.json: `model` is the object with
 * "type": "WordPiece"; `normalizer` the BertNormalizer object, or NULL / a
 * JSON null for none (then no normalization at all and only whitespace and
 * punctuation splitting); `pre_tokenizer` likewise (NULL/null: no
 * pre-tokenization: the whole text is one word).  Errors name doc->name and
 * line:col. */
int tfm_wordpiece_from_json(tfm_wordpiece **out, const tfm_json_doc *doc,
                            const tfm_json *model, const tfm_json *normalizer,
                            const tfm_json *pre_tokenizer, tfm_err *err);

/* From a list of pieces (id = index; copied), with the given unk token
 * (must be among them) and normalization; prefix "##", 100 characters. */
int tfm_wordpiece_from_pieces(tfm_wordpiece **out, const char *const *pieces,
                              const size_t *lens, uint32_t n, const char *unk,
                              const tfm_bert_norm *norm, tfm_err *err);

/* Takes the decoder's options from a tokenizer.json "decoder" object
 * (type WordPiece; NULL or null keeps prefix "##" and cleanup on). */
int tfm_wordpiece_decoder_from_json(tfm_wordpiece *wp, const tfm_json_doc *doc,
                                    const tfm_json *decoder, tfm_err *err);

void tfm_wordpiece_free(tfm_wordpiece *wp);

/* Largest id + 1.  (HF's get_vocab_size counts distinct pieces instead; the
 * two differ only for a vocab.txt with duplicate lines.) */
uint32_t tfm_wordpiece_vocab_size(const tfm_wordpiece *wp);
/* NULL for an id outside the vocabulary (or a hole in a JSON vocab). */
const char *tfm_wordpiece_piece(const tfm_wordpiece *wp, uint32_t id, size_t *len);
int64_t tfm_wordpiece_id(const tfm_wordpiece *wp, const char *piece, size_t len);
uint32_t tfm_wordpiece_unk_id(const tfm_wordpiece *wp);
const tfm_bert_norm *tfm_wordpiece_norm(const tfm_wordpiece *wp);

/* Per-thread scratch for encoding. */
typedef struct tfm_wordpiece_scratch tfm_wordpiece_scratch;
tfm_wordpiece_scratch *tfm_wordpiece_scratch_new(void);
void tfm_wordpiece_scratch_free(tfm_wordpiece_scratch *s);

/* Normalizes, pre-tokenizes and appends the ids of text[0..len) to out (no
 * [CLS]/[SEP]; special-token text is ordinary text here).  Never fails. */
void tfm_wordpiece_encode(const tfm_wordpiece *wp, tfm_wordpiece_scratch *s,
                          const char *text, size_t len, tfm_ids *out);
/* The same, appending to start and end each id's byte span [start, end) in
 * text: the original characters its normalized bytes came from (an [UNK]
 * word: the whole word), as HF's offsets. */
void tfm_wordpiece_encode_spans(const tfm_wordpiece *wp, tfm_wordpiece_scratch *s,
                                const char *text, size_t len, tfm_ids *out, tfm_ids *start,
                                tfm_ids *end);
/* One already pre-tokenized word (normalized UTF-8) → ids. */
void tfm_wordpiece_encode_word(const tfm_wordpiece *wp, const char *word, size_t len,
                               tfm_ids *out);

/* HF's WordPiece decoder (prefix "##", cleanup on): pieces joined with a
 * space unless "##"-continued, then each piece cleaned up (" ." -> "." ...).
 * An id outside the vocabulary is an error naming it. */
int tfm_wordpiece_decode(const tfm_wordpiece *wp, const uint32_t *ids, size_t n,
                         tfm_buf *out, tfm_err *err);
/* The same on pieces (the facade's path for added tokens not in the vocab). */
void tfm_wordpiece_decode_pieces(const char *const *pieces, const size_t *lens, size_t n,
                                 const char *prefix, int cleanup, tfm_buf *out);

/* The same with wp's decoder options (from tfm_wordpiece_decoder_from_json). */
void tfm_wordpiece_decode_pieces_wp(const tfm_wordpiece *wp, const char *const *pieces,
                                    const size_t *lens, size_t n, tfm_buf *out);

/* ---- tokenizer.json pieces (each a JSON value, no trailing comma) ---- */
void tfm_wordpiece_normalizer_json(const tfm_wordpiece *wp, tfm_buf *out);
void tfm_wordpiece_pre_tokenizer_json(const tfm_wordpiece *wp, tfm_buf *out);
void tfm_wordpiece_model_json(const tfm_wordpiece *wp, tfm_buf *out);
void tfm_wordpiece_decoder_json(const tfm_wordpiece *wp, tfm_buf *out);
/* BertProcessing with the vocabulary's [CLS]/[SEP], or "null" when absent. */
void tfm_wordpiece_post_processor_json(const tfm_wordpiece *wp, tfm_buf *out);

/* ---- training ---- */

/* Streaming: feed text (each piece a whole line or document), then finish.
 * Memory grows with the number of distinct words.  opts->kind is ignored;
 * vocab_size 0 means 30000; min_frequency: pairs seen fewer times are never
 * merged; specials NULL means [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0..4, in
 * the order given, duplicates dropped); lowercase -1 means yes (and accents
 * are stripped whenever lowercasing); threads > 1 counts big feeds in
 * parallel (same result).  The first special that is "[UNK]" or contains
 * "unk" (any case) becomes the model's unknown token, else "[UNK]" is
 * appended.  The specials and the whole alphabet are always kept, so a tiny
 * vocab_size can be exceeded.  Words over 100 characters are not counted.
 * Tie-breaking and the algorithm: see wordpiece_train.c. */
typedef struct tfm_wordpiece_trainer tfm_wordpiece_trainer;
/* How the next merge is chosen, among pairs seen min_frequency times:
 * COUNT (the default, as HuggingFace's WordPiece trainer scores): the most
 * frequent pair; RATIO: the highest count(ab)/(count(a)·count(b)), which favours rare
 * pairs and learns few whole words. */
typedef enum tfm_wordpiece_score { TFM_WP_SCORE_COUNT, TFM_WP_SCORE_RATIO } tfm_wordpiece_score;
tfm_wordpiece_trainer *tfm_wordpiece_trainer_new(const tfm_tok_train_opts *opts);
void tfm_wordpiece_trainer_set_score(tfm_wordpiece_trainer *t, tfm_wordpiece_score score);
void tfm_wordpiece_trainer_feed(tfm_wordpiece_trainer *t, const char *text, size_t len);
/* Adds a word count directly (already normalized and pre-tokenized). */
void tfm_wordpiece_trainer_add_word(tfm_wordpiece_trainer *t, const char *word,
                                    size_t len, uint64_t count);
int tfm_wordpiece_trainer_finish(tfm_wordpiece_trainer *t, tfm_wordpiece **out,
                                 tfm_err *err);
void tfm_wordpiece_trainer_free(tfm_wordpiece_trainer *t);

#endif
