/* A tokenizer trainer's input: every line or a sample (text/train_feed.h). */
#include "config.h"

#include "text/train_feed.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"

void tfm_tok_feed_init(tfm_tok_feed *f, tfm_tok_trainer *tr, uint64_t sample_lines,
                       uint64_t seed)
{
    memset(f, 0, sizeof *f);
    f->tr = tr;
    if (sample_lines) {
        tfm_reservoir_init(&f->sample, sample_lines, seed);
        f->sampling = 1;
    }
}

void tfm_tok_feed_free(tfm_tok_feed *f)
{
    if (f->sampling)
        tfm_reservoir_free(&f->sample);
    memset(f, 0, sizeof *f);
}

/* Complete lines (each with its newline) go to the trainer in blocks, or one
 * at a time to the sample. */
void tfm_tok_feed_text(tfm_tok_feed *f, const char *text, size_t len)
{
    f->bytes += len;
    const char *s = text, *end = text + len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl + 1 : end;
        f->lines++;
        if (f->sampling)
            tfm_reservoir_add(&f->sample, s, (size_t)(le - s));
        s = le;
    }
    if (!f->sampling)
        tfm_tok_trainer_feed(f->tr, text, len);
}

int tfm_tok_feed_fd(tfm_tok_feed *f, int fd, const char *name, tfm_progress *progress,
                    double *done, tfm_err *err)
{
    size_t cap = 1u << 20;
    tfm_buf b = {0};
    tfm_buf_reserve(&b, cap);
    int rc = 0;
    for (;;) {
        tfm_buf_reserve(&b, cap);
        ssize_t n = read(fd, b.data + b.len, b.cap - b.len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = tfm_err_errno(err, "%s: read error", name);
            break;
        }
        if (n == 0)
            break;
        size_t old = b.len;
        b.len += (size_t)n;
        *done += (double)n;
        if (progress)
            tfm_progress_update(progress, *done / 1e6);
        size_t cut = 0;
        for (size_t i = b.len; i > old; i--)
            if (b.data[i - 1] == '\n') {
                cut = i;
                break;
            }
        if (!cut)
            continue; /* a line longer than the buffer: keep reading */
        tfm_tok_feed_text(f, b.data, cut);
        memmove(b.data, b.data + cut, b.len - cut);
        b.len -= cut;
    }
    if (rc == 0 && b.len)
        tfm_tok_feed_text(f, b.data, b.len);
    tfm_buf_free(&b);
    return rc;
}

void tfm_tok_feed_finish(tfm_tok_feed *f, uint64_t *lines, uint64_t *bytes)
{
    *lines = f->lines;
    *bytes = f->bytes;
    if (!f->sampling)
        return;
    /* Fed in blocks so the trainer can count on several threads. */
    const tfm_reservoir *r = &f->sample;
    uint64_t used = tfm_reservoir_kept(r), used_bytes = 0;
    tfm_buf blk = {0};
    for (uint64_t i = 0; i < used; i++) {
        used_bytes += r->lens[i];
        tfm_buf_append(&blk, r->lines[i], r->lens[i]);
        if (r->lens[i] == 0 || r->lines[i][r->lens[i] - 1] != '\n')
            tfm_buf_putc(&blk, '\n');
        if (blk.len >= (1u << 20) || i + 1 == used) {
            tfm_tok_trainer_feed(f->tr, blk.data, blk.len);
            tfm_buf_clear(&blk);
        }
    }
    tfm_buf_free(&blk);
    *lines = used;
    *bytes = used_bytes;
}
