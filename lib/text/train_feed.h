/* A tokenizer trainer's input (text/tokenizer.h): complete lines from any
 * number of streams, either all of them or a uniform sample of N lines
 * (base/reservoir.h), as tfm-tokenize train --sample-lines reads them.
 *
 *     tfm_tok_feed f;
 *     tfm_tok_feed_init(&f, trainer, 100000, seed);     // 0: every line
 *     double done = 0;
 *     tfm_tok_feed_fd(&f, fd, "corpus.txt", &progress, &done, &err);  // per input
 *     uint64_t lines, bytes;
 *     tfm_tok_feed_finish(&f, &lines, &bytes);          // what the trainer got
 *     tfm_tok_feed_free(&f);
 *
 * Without a sample the lines go to the trainer as they are read, in blocks
 * of whole lines.  With one, each line is offered to the reservoir; at the
 * end the kept lines go to the trainer in blocks of about 1 MB (so that it
 * can count on several threads), a newline added to a last line that had
 * none.  The same seed and input give the same sample.
 *
 * Ownership: the feed borrows the trainer and owns the sample. */
#ifndef TFM_TEXT_TRAIN_FEED_H
#define TFM_TEXT_TRAIN_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/progress.h"
#include "base/reservoir.h"
#include "text/tokenizer.h"

typedef struct tfm_tok_feed {
    tfm_tok_trainer *tr;    /* borrowed */
    int sampling;
    tfm_reservoir sample;   /* with sampling */
    uint64_t lines, bytes;  /* read so far, from every stream */
} tfm_tok_feed;

/* sample_lines 0: every line. */
void tfm_tok_feed_init(tfm_tok_feed *f, tfm_tok_trainer *tr, uint64_t sample_lines,
                       uint64_t seed);
/* text[0..len): complete lines (the last may lack its newline only at the
 * end of a stream). */
void tfm_tok_feed_text(tfm_tok_feed *f, const char *text, size_t len);
/* Reads fd to its end, feeding its lines; *done (bytes, summed over the
 * streams) is shown on progress in MB (progress may be NULL).  Errors name
 * the stream (name). */
int tfm_tok_feed_fd(tfm_tok_feed *f, int fd, const char *name, tfm_progress *progress,
                    double *done, tfm_err *err);
/* Gives the trainer the sample (nothing more without one); *lines and
 * *bytes: what the trainer was given in all. */
void tfm_tok_feed_finish(tfm_tok_feed *f, uint64_t *lines, uint64_t *bytes);
void tfm_tok_feed_free(tfm_tok_feed *f);

#endif
