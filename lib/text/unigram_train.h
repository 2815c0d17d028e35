/* Training a SentencePiece Unigram model (Kudo 2018), as sentencepiece's
 * unigram trainer (spm_train --model_type=unigram) does it:
 *
 *   1. each line is normalized as nmt_nfkc (sentencepiece's nmt rules,
 *      NFKC, extra spaces removed, "▁" prefixed, spaces as "▁": see
 *      unigram.h); lines over max_sentence_length bytes (default 4192,
 *      spm_train's) are skipped and counted (tfm_tok_trainer_skipped);
 *   2. required characters: the most frequent ones until they cover
 *      character_coverage (default 0.9995) of the text; the others read as
 *      U+2585, which no piece holds (they encode as <unk> or bytes);
 *   3. seeds: every character, and the most frequent substrings of 2 to
 *      16 characters by frequency x length (1M seeds in all), found with a
 *      suffix array over the normalized text: those that occur at least
 *      twice and are followed by two different characters, a line break
 *      counting as one (sentencepiece's suffix tree nodes); a piece holds "▁" only at its start, and does
 *      not mix scripts (letters with digits or punctuation, Latin with
 *      Greek...; kana count as Han); score = log of its share;
 *   4. the text is split into words (each from a "▁") and counted; EM on
 *      the word counts: the E-step sums each piece's expected count over
 *      the lattice of each word (forward-backward), the M-step drops pieces
 *      expected fewer than 0.5 times and scores the others
 *      digamma(count) - digamma(total) (the Bayesian EM); after two such
 *      rounds the pieces are pruned to max(1.1 x the target, 0.75 x their
 *      number) by the loss in likelihood of removing each (the piece's
 *      Viterbi count re-assigned to its second-best segmentation, the
 *      new total counted as sentencepiece 0.1.97 does: as if re-assigned
 *      to every piece of the model), until at most 1.1 x the target remain;
 *   5. the final vocabulary: the required characters, then the best
 *      scoring pieces up to vocab_size, best first.
 *
 * Ids: the specials in the order given (default <unk> <s> </s>, as
 * spm_train's; T5's are <pad> </s> <unk>), the one whose name holds "unk"
 * being the unknown piece (<unk> is added after them if none does); then
 * the user symbols (user-defined pieces: never split, matched before
 * normalization); with byte_fallback the 256 pieces <0x00>..<0xFF>; then
 * the trained pieces; then extra_ids sentinels <extra_id_{N-1}> ..
 * <extra_id_0> (T5: the highest id is <extra_id_0>).  vocab_size counts
 * all of them.
 *
 * The expected counts are summed in fixed point (integers), so the model is
 * the same for any thread count.  Memory: the normalized text (held whole;
 * tfm-tokenize's --sample-lines bounds it) and about 30 bytes per
 * character while the seeds are found. */
#ifndef TFM_TEXT_UNIGRAM_TRAIN_H
#define TFM_TEXT_UNIGRAM_TRAIN_H

#include <stddef.h>

#include "base/err.h"
#include "text/tokenizer.h"

typedef struct tfm_unigram_trainer tfm_unigram_trainer;

/* opts: vocab_size (0: 8000, spm_train's default), specials, threads, the
 * Unigram fields (character_coverage in (0, 1]; 0: 0.9995;
 * max_sentence_length 0: 4192).  Strings are
 * copied. */
tfm_unigram_trainer *tfm_unigram_trainer_new(const tfm_tok_train_opts *opts);
/* Whole lines (a trailing part without '\n' is a line too). */
void tfm_unigram_trainer_feed(tfm_unigram_trainer *t, const char *text, size_t len);
/* Fails, naming opts->source, on an empty input or a vocab_size below the
 * required characters plus the special, user and byte pieces. */
int tfm_unigram_trainer_finish(tfm_unigram_trainer *t, tfm_tokenizer **out, tfm_err *err);
void tfm_unigram_trainer_free(tfm_unigram_trainer *t);

/* digamma(x) for x > 0 (the M-step's). */
double tfm_unigram_digamma(double x);

#endif
