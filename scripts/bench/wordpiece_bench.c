/* Single-thread WordPiece encoding speed: wordpiece_bench VOCAB.txt FILE [REPEAT]
 * encodes FILE line by line (as tfm-tokenize encode does) and prints MB/s
 * and tokens/s to stdout.  Not a test: scripts and people run it. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/progress.h"
#include "text/wordpiece.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: wordpiece_bench VOCAB.txt FILE [REPEAT]\n");
        return 2;
    }
    tfm_err err = {0};
    tfm_wordpiece *wp;
    if (tfm_wordpiece_load_vocab_txt(&wp, argv[1], &err) < 0) {
        fprintf(stderr, "wordpiece_bench: %s\n", err.msg);
        return 1;
    }
    tfm_map m;
    if (tfm_map_open(&m, argv[2], &err) < 0) {
        fprintf(stderr, "wordpiece_bench: %s\n", err.msg);
        return 1;
    }
    int repeat = argc > 3 ? atoi(argv[3]) : 3;
    tfm_wordpiece_scratch *s = tfm_wordpiece_scratch_new();
    tfm_ids ids = {0};
    double best = 1e30;
    size_t ntok = 0;
    for (int r = 0; r < repeat; r++) {
        double t0 = tfm_now();
        const char *p = (const char *)m.data, *end = p + m.size;
        ntok = 0;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl)
                nl = end;
            tfm_ids_clear(&ids);
            tfm_wordpiece_encode(wp, s, p, (size_t)(nl - p), &ids);
            ntok += ids.len;
            p = nl + 1;
        }
        double dt = tfm_now() - t0;
        if (dt < best)
            best = dt;
    }
    printf("tfm wordpiece bytes=%zu tokens=%zu best_s=%.3f MB/s=%.2f\n", m.size, ntok, best,
           (double)m.size / 1e6 / best);
    tfm_ids_free(&ids);
    tfm_wordpiece_scratch_free(s);
    tfm_map_close(&m);
    tfm_wordpiece_free(wp);
    return 0;
}
