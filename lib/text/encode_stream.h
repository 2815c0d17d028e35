/* Encoding and decoding of unbounded token streams, for tfm-tokenize and any
 * program that turns a corpus into ids.
 *
 * An encoder takes text in pieces of any size (feed), cuts it into rounds of
 * about threads x chunk bytes at boundaries where cutting cannot change the
 * ids, encodes the parts of a round on several threads and writes their
 * output in input order.  Memory stays bounded by the round size (plus the
 * longest line in per-line mode), whatever the input's length.
 *
 *     tfm_encoder *e;
 *     tfm_encoder_new(&e, tok, &opts, "out.ids", &err);   // NULL: stdout
 *     while ((n = fread(buf, 1, sizeof buf, fp)) > 0)
 *         if (tfm_encoder_feed(e, buf, n, &err)) ...;
 *     tfm_encoder_finish(e, &err);
 *     tfm_encoder_free(e);
 *
 * Output formats (one sequence per input line unless `document`):
 *   ids     ids separated by spaces, one line per sequence
 *   pieces  vocabulary pieces separated by spaces; bytes < 0x21, 0x7f and
 *           '\' are written as \xHH / \\ so a line stays one line
 *   jsonl   {"ids":[...]} per sequence; with add_special also "type_ids"
 *   npy     one flat little-endian array, <u2 when the vocabulary has at
 *           most 65536 entries, else <u4.  Per-line: each line's ids
 *           followed by a separator (eos if the tokenizer has one, else the
 *           ids of "\n"), unless add_special already ended the sequence.
 *
 * add_special: with [CLS]/[SEP] (BERT): [CLS] A [SEP], and for a line
 * "A<TAB>B" the pair [CLS] A [SEP] B [SEP] with type ids 0.. 1..; otherwise,
 * with a template's first token (specials.prefix: Llama 3's
 * <|begin_of_text|>) the sequence starts with it, else with an eos (GPT-2's
 * <|endoftext|>) the sequence is followed by eos.  In
 * document mode the whole stream is the one sequence (no pairs).
 *
 * Document mode cuts only at a position p where text[p-1] is an ASCII
 * graphic character and text[p] ASCII whitespace, a line break only after
 * a letter or digit (tfm_enc_safe_cut).  For GPT-2's, Llama 3's and Qwen2's
 * pre-tokenizers no pre-token spans such a p (Llama 3's keeps line breaks
 * with the punctuation before them) and no match before p looks past it
 * (the one lookahead, \s+(?!\S), cannot start on a non-space);
 * BERT splits there anyway; so ids equal whole-document encoding.  Input
 * without such a position (e.g. one huge word) is held whole, and so is the
 * whole document for a tokenizer where a probe shows that cuts change the
 * ids (ByteLevel add_prefix_space, a missing pre-tokenizer).
 *
 * Ownership: the encoder borrows tok (which must outlive it) and owns its
 * buffers and its output: a file is written under a temporary name and
 * renamed by tfm_encoder_finish; freeing an unfinished encoder removes it. */
#ifndef TFM_TEXT_ENCODE_STREAM_H
#define TFM_TEXT_ENCODE_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "text/tokenizer.h"

typedef enum tfm_enc_format {
    TFM_ENC_IDS,
    TFM_ENC_PIECES,
    TFM_ENC_JSONL,
    TFM_ENC_NPY,
} tfm_enc_format;

typedef struct tfm_enc_opts {
    tfm_enc_format format;
    int document;      /* the whole input is one sequence; newlines are text */
    int add_special;
    int split_special; /* special-token text in the input becomes its id */
    int threads;       /* >= 1 */
    size_t chunk;      /* bytes per thread per round; 0: 1 MiB */
    struct tfm_progress *progress; /* optional (borrowed): updated with the
                                      MB encoded after each round */
    /* Subword regularization (Unigram tokenizers only, per line, not with
     * document): sample > 0 draws each line's segmentation with smoothing
     * alpha = sample_alpha (tfm_tokenizer_encode_sample) from an RNG seeded
     * by seed and the line's number, so the output is the same for any
     * thread count; nbest > 0 writes each line's nbest best segmentations
     * (ids, pieces: a line each; jsonl: {"nbest":[[...],...]}; not npy or
     * add_special). */
    int sample;
    float sample_alpha;
    uint64_t seed;
    size_t nbest;
} tfm_enc_opts;

typedef struct tfm_enc_stats {
    uint64_t bytes, sequences, tokens;
    /* characters the tokenizer dropped (tfm_tokenizer_dropped: a char
     * model without an unknown token), and the first of them */
    uint64_t dropped;
    char first_dropped[64];
} tfm_enc_stats;

typedef struct tfm_encoder tfm_encoder;

/* Whether opts make sense together and (tok not NULL) with tok: sampling
 * and n-best need a Unigram tokenizer, per line; a sentencepiece BPE
 * model's ALPHA is a probability (at most 1) and it has no n-best; per-line
 * npy needs a separator (an end-of-sequence token, or a newline that
 * encodes to ids that decode to a line break).  A message naming the
 * options; tfm_encoder_new checks the same. */
int tfm_enc_opts_check(const tfm_tokenizer *tok, const tfm_enc_opts *opts, tfm_err *err);
/* path: the output file; NULL or "-" is stdout (for npy, spooled until the
 * end since the header holds the length). */
int tfm_encoder_new(tfm_encoder **out, const tfm_tokenizer *tok,
                    const tfm_enc_opts *opts, const char *path, tfm_err *err);
int tfm_encoder_feed(tfm_encoder *e, const char *data, size_t len, tfm_err *err);
/* Reads fd to its end and feeds it; per line, the end of the file also ends
 * its last line (as if it ended with a newline).  When the input pauses (a terminal, or a
 * pipe with one line at a time) the lines read so far are encoded and the
 * output flushed at once, so interactive use sees no read-ahead lag. */
int tfm_encoder_feed_fd(tfm_encoder *e, int fd, const char *name, tfm_err *err);
/* Encodes what is left, completes the output (npy header, closing document
 * line) and commits it (rename into place). */
int tfm_encoder_finish(tfm_encoder *e, tfm_err *err);
const tfm_enc_stats *tfm_encoder_stats(const tfm_encoder *e);
void tfm_encoder_free(tfm_encoder *e);

/* Largest p in [1, len) at which a document may be cut (see above), or 0. */
size_t tfm_enc_safe_cut(const char *text, size_t len);
/* Smallest such p in [from, len), or 0. */
size_t tfm_enc_safe_cut_after(const char *text, size_t len, size_t from);

/* Decoding.  Text input: each line holds ids separated by spaces, tabs or
 * commas (the ids and jsonl formats of the encoder are accepted: a line
 * starting with '{' takes its "ids" array), and becomes one line of text.
 * An id outside the vocabulary fails as "name:line:col: id N is outside the
 * vocabulary (size V)".  When the input pauses, the output is flushed, so
 * a line sent alone through a pipe is answered at once. */
int tfm_decode_stream(const tfm_tokenizer *tok, FILE *in, const char *in_name,
                      FILE *out, const char *out_name, int skip_special,
                      tfm_err *err);
/* Decodes an array of ids as one text; `name` and the element index appear in
 * the error for an id out of range. */
/* Decodes a 1-D integer .npy array (any integer dtype; negative values are
 * out of range) as one text. */
struct tfm_npy;
int tfm_decode_npy(const tfm_tokenizer *tok, const struct tfm_npy *a,
                   const char *name, FILE *out, const char *out_name,
                   int skip_special, tfm_err *err);
int tfm_decode_array(const tfm_tokenizer *tok, const uint32_t *ids, size_t n,
                     const char *name, FILE *out, const char *out_name,
                     int skip_special, tfm_err *err);

#endif
