/* The C side of tests/model_torch.py: runs one forward and backward of the
 * transformer on weights and a batch given as raw little-endian files, and
 * writes the loss, the logits and every gradient for comparison with
 * PyTorch.
 *
 *   model_dump table DIR   reads DIR/config.yaml, writes DIR/table.txt
 *                          ("name dim0 dim1" per parameter, in table order)
 *   model_dump run DIR     reads DIR/config.yaml, DIR/params.bin (float32,
 *                          the tensors of table.txt back to back),
 *                          DIR/batch.txt and DIR/batch.bin; writes
 *                          DIR/out.bin: float32 loss, logits [B,T,V] (the
 *                          decoder's, for an encoder-decoder), then the
 *                          gradients in table order.  After DIR, "blas"
 *                          or "fused" forces the attention implementation
 *                          and "recompute" the recomputed MLP activation.
 *   model_dump alibi N     prints tfm_alibi_slopes for N heads, one a line
 *   model_dump t5 NB MAX   prints "rel causal bidirectional" buckets
 *                          (tfm_t5_bucket, NB buckets, max distance MAX)
 *                          for rel = -300..300
 *
 * config.yaml: a tfm configuration (io/config.h; man/tfm-config.5), turned
 *     into the model's description by tfm_model_config_from (model/file.h).
 * batch.txt: "B T threads [has_segments has_lengths has_prefix has_doc_start
 *     [S [has_src_lengths]]]" (the flags 0 or 1; S the source length of an
 *     encoder-decoder's batch, 0 for none; absent means 0).
 * batch.bin: int32 inputs [B,T], targets [B,T], then, when flagged and in
 *     this order, segments [B,T], lengths [B], prefix_len [B], doc_start
 *     [B,T], then, when S > 0, src [B,S] and, when flagged, src_lengths [B]
 *     (tfm_batch in model/transformer.h).  Nothing may follow.
 * heads.txt (optional): "has_targets has_cls_pos has_labels has_values
 *     has_tags has_span lm_weight": without LM targets (has_targets 0) the
 *     targets of batch.bin are not passed.
 * heads.bin: int32 cls_pos [B], labels [B], float32 values [B], int32 tags
 *     [B,T], span_start [B] and span_end [B], each when flagged.
 * out.bin then holds, after the loss, the outputs of every head that ran
 *     (tfm_model_head_out, in tfm_head order) instead of only the logits. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/file.h"
#include "train/run_config.h"
#include "model/transformer.h"
#include "nn/attention.h"
#include "tensor/gemm.h"

static FILE *open_in(const char *dir, const char *name, const char *mode)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    if (!f) {
        perror(path);
        exit(1);
    }
    return f;
}

static void read_ints(FILE *f, int32_t *dst, size_t n, const char *what)
{
    if (fread(dst, sizeof *dst, n, f) != n) {
        fprintf(stderr, "model_dump: batch.bin is short (%s)\n", what);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "alibi")) {
        int n = atoi(argv[2]);
        float *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
        tfm_alibi_slopes(s, n);
        for (int i = 0; i < n; i++)
            printf("%.9g\n", s[i]);
        free(s);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "t5")) {
        int nb = atoi(argv[2]), max = atoi(argv[3]);
        for (int rel = -300; rel <= 300; rel++)
            printf("%d %d %d\n", rel, tfm_t5_bucket(rel, 0, nb, max),
                   tfm_t5_bucket(rel, 1, nb, max));
        return 0;
    }
    /* run DIR [blas|fused] [recompute]: the attention implementation and the
     * recomputed MLP activation forced (tfm_model's tuning fields) */
    int run = argc >= 3 && !strcmp(argv[1], "run");
    tfm_attn_impl attn = TFM_ATTN_AUTO;
    int recompute = 0, bad = argc < 3 || (!run && (argc != 3 || strcmp(argv[1], "table")));
    for (int i = 3; run && i < argc; i++) {
        if (!strcmp(argv[i], "blas"))
            attn = TFM_ATTN_BLAS;
        else if (!strcmp(argv[i], "fused"))
            attn = TFM_ATTN_FUSED;
        else if (!strcmp(argv[i], "recompute"))
            recompute = 1;
        else
            bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: model_dump table DIR | run DIR [blas|fused] [recompute] | "
                        "alibi N | t5 BUCKETS MAX_DISTANCE\n");
        return 2;
    }
    const char *dir = argv[2];
    char path[4096];
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    tfm_config c;
    tfm_config_defaults(&c);
    tfm_err err = {0};
    tfm_model_config cfg;
    if (tfm_config_load_yaml(&c, path, &err) < 0 || tfm_model_config_from(&c, &cfg, &err) < 0) {
        fprintf(stderr, "model_dump: %s\n", err.msg);
        return 1;
    }
    int B = 0, T = 0, threads = 1, has[4] = {0, 0, 0, 0}, S = 0, has_src_lengths = 0;
    if (!strcmp(argv[1], "run")) {
        FILE *f = open_in(dir, "batch.txt", "r");
        if (fscanf(f, "%d %d %d", &B, &T, &threads) != 3 || B < 1 || T < 1) {
            fprintf(stderr, "model_dump: bad batch.txt\n");
            return 1;
        }
        int i = 0;
        while (i < 4 && fscanf(f, "%d", &has[i]) == 1)
            i++;
        if (i == 4 && fscanf(f, "%d", &S) == 1 && fscanf(f, "%d", &has_src_lengths) != 1)
            has_src_lengths = 0;
        fclose(f);
        if (S < 0) {
            fprintf(stderr, "model_dump: bad batch.txt (S %d)\n", S);
            return 1;
        }
    }
    tfm_blas_init(threads);
    tfm_model m;
    if (tfm_model_init(&m, &cfg, &err) < 0) {
        fprintf(stderr, "model_dump: %s\n", err.msg);
        return 1;
    }
    m.attn_impl = attn;
    m.recompute = recompute;
    if (!strcmp(argv[1], "table")) {
        FILE *f = open_in(dir, "table.txt", "w");
        for (int i = 0; i < m.n_table; i++)
            fprintf(f, "%s %zu %zu\n", m.table[i].name, m.table[i].shape[0], m.table[i].shape[1]);
        fclose(f);
        tfm_model_free(&m);
        return 0;
    }
    FILE *f = open_in(dir, "params.bin", "rb");
    for (int i = 0; i < m.n_table; i++)
        if (fread(m.params + m.table[i].offset, sizeof(float), m.table[i].numel, f) !=
            m.table[i].numel) {
            fprintf(stderr, "model_dump: params.bin is short\n");
            return 1;
        }
    if (fgetc(f) != EOF) {
        fprintf(stderr, "model_dump: params.bin is longer than the table\n");
        return 1;
    }
    fclose(f);
    size_t N = (size_t)B * T;
    int32_t *x = malloc(2 * N * sizeof *x), *seg = NULL, *doc = NULL, *src = NULL;
    int *lengths = NULL, *prefix = NULL, *src_lengths = NULL;
    f = open_in(dir, "batch.bin", "rb");
    read_ints(f, x, 2 * N, "inputs and targets");
    if (has[0])
        read_ints(f, seg = malloc(N * sizeof *seg), N, "segments");
    if (has[1])
        read_ints(f, lengths = malloc(B * sizeof *lengths), B, "lengths");
    if (has[2])
        read_ints(f, prefix = malloc(B * sizeof *prefix), B, "prefix_len");
    if (has[3])
        read_ints(f, doc = malloc(N * sizeof *doc), N, "doc_start");
    if (S > 0) {
        read_ints(f, src = malloc((size_t)B * S * sizeof *src), (size_t)B * S, "src");
        if (has_src_lengths)
            read_ints(f, src_lengths = malloc(B * sizeof *src_lengths), B, "src_lengths");
    }
    if (fgetc(f) != EOF) {
        fprintf(stderr, "model_dump: batch.bin is longer than batch.txt says\n");
        return 1;
    }
    fclose(f);
    tfm_batch batch = {.inputs = x, .targets = x + N, .B = B, .T = T, .segments = seg,
                       .lengths = lengths, .prefix_len = prefix, .doc_start = doc,
                       .src = src, .S = S, .src_lengths = src_lengths};
    int32_t *heads_i = NULL;
    float *values = NULL;
    snprintf(path, sizeof path, "%s/heads.txt", dir);
    if ((f = fopen(path, "r"))) {
        int hf[6];
        float lmw;
        if (fscanf(f, "%d %d %d %d %d %d %f", &hf[0], &hf[1], &hf[2], &hf[3], &hf[4], &hf[5],
                   &lmw) != 7) {
            fprintf(stderr, "model_dump: bad heads.txt\n");
            return 1;
        }
        fclose(f);
        f = open_in(dir, "heads.bin", "rb");
        heads_i = malloc((N + 4 * (size_t)B) * sizeof *heads_i);
        int32_t *hp = heads_i;
        if (!hf[0])
            batch.targets = NULL;
        if (hf[1]) {
            read_ints(f, hp, B, "cls_pos");
            batch.cls_pos = hp;
            hp += B;
        }
        if (hf[2]) {
            read_ints(f, hp, B, "labels");
            batch.labels = hp;
            hp += B;
        }
        if (hf[3]) {
            values = malloc(B * sizeof *values);
            read_ints(f, (int32_t *)values, B, "values");
            batch.values = values;
        }
        if (hf[4]) {
            read_ints(f, hp, N, "tags");
            batch.tags = hp;
            hp += N;
        }
        if (hf[5]) {
            read_ints(f, hp, 2 * (size_t)B, "spans");
            batch.span_start = hp;
            batch.span_end = hp + B;
        }
        batch.lm_weight = lmw;
        if (fgetc(f) != EOF) {
            fprintf(stderr, "model_dump: heads.bin is longer than heads.txt says\n");
            return 1;
        }
        fclose(f);
    }
    float loss;
    if (tfm_model_forward_batch(&m, &batch, &loss, &err) < 0) {
        fprintf(stderr, "model_dump: %s\n", err.msg);
        return 1;
    }
    f = open_in(dir, "out.bin", "wb");
    fwrite(&loss, sizeof loss, 1, f);
    for (int h = 0; h < TFM_HEAD_N; h++) {
        int rows, cols;
        const float *o = tfm_model_head_out(&m, (tfm_head)h, &rows, &cols);
        if (o)
            fwrite(o, sizeof(float), (size_t)rows * cols, f);
    }
    tfm_model_zero_grad(&m);
    tfm_model_backward(&m, 1.0f);
    for (int i = 0; i < m.n_table; i++)
        fwrite(m.grads + m.table[i].offset, sizeof(float), m.table[i].numel, f);
    if (fclose(f) != 0) {
        perror("out.bin");
        return 1;
    }
    free(x);
    free(seg);
    free(lengths);
    free(prefix);
    free(doc);
    free(src);
    free(src_lengths);
    free(heads_i);
    free(values);
    tfm_model_free(&m);
    return 0;
}
