/* The C side of tests/nn_torch.py: runs one forward and backward of the GPT
 * model on weights and a batch given as raw little-endian files, and writes
 * the loss and every gradient for comparison with PyTorch.
 *
 *   model_dump table DIR   reads DIR/config.txt, writes DIR/table.txt
 *                        ("name dim0 dim1" per parameter, in table order)
 *   model_dump run DIR     reads DIR/config.txt, DIR/params.bin (float32, the
 *                        tensors of table.txt back to back), DIR/batch.bin
 *                        (int32 inputs [B,T] then targets [B,T]); writes
 *                        DIR/out.bin: float32 loss, logits [B,T,V], then the
 *                        gradients in table order.
 * config.txt: n_layer n_head n_embd block_size vocab_size ln(0 pre, 1 post)
 *             act(0 gelu-tanh, 1 gelu-exact, 2 relu) tie bias
 *             label_smoothing ln_eps B T threads */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/transformer.h"
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

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "table") && strcmp(argv[1], "run"))) {
        fprintf(stderr, "usage: model_dump table|run DIR\n");
        return 2;
    }
    const char *dir = argv[2];
    tfm_model_config cfg;
    tfm_model_config_default(&cfg);
    int ln, act, B, T, threads;
    FILE *f = open_in(dir, "config.txt", "r");
    if (fscanf(f, "%d %d %d %d %d %d %d %d %d %f %f %d %d %d", &cfg.n_layer, &cfg.n_head,
               &cfg.n_embd, &cfg.block_size, &cfg.vocab_size, &ln, &act, &cfg.tie_embeddings,
               &cfg.bias, &cfg.label_smoothing, &cfg.ln_eps, &B, &T, &threads) != 14) {
        fprintf(stderr, "model_dump: bad config.txt\n");
        return 1;
    }
    fclose(f);
    cfg.ln = (tfm_ln_place)ln;
    cfg.act = (tfm_act)act;
    tfm_blas_init(threads);
    tfm_model m;
    tfm_err err = {0};
    if (tfm_model_init(&m, &cfg, &err) < 0) {
        fprintf(stderr, "model_dump: %s\n", err.msg);
        return 1;
    }
    if (!strcmp(argv[1], "table")) {
        f = open_in(dir, "table.txt", "w");
        for (int i = 0; i < m.n_table; i++)
            fprintf(f, "%s %zu %zu\n", m.table[i].name, m.table[i].shape[0], m.table[i].shape[1]);
        fclose(f);
        tfm_model_free(&m);
        return 0;
    }
    f = open_in(dir, "params.bin", "rb");
    for (int i = 0; i < m.n_table; i++)
        if (fread(m.params + m.table[i].offset, sizeof(float), m.table[i].numel, f) !=
            m.table[i].numel) {
            fprintf(stderr, "model_dump: params.bin is short\n");
            return 1;
        }
    fclose(f);
    size_t N = (size_t)B * T;
    int32_t *x = malloc(2 * N * sizeof *x);
    f = open_in(dir, "batch.bin", "rb");
    if (fread(x, sizeof *x, 2 * N, f) != 2 * N) {
        fprintf(stderr, "model_dump: batch.bin is short\n");
        return 1;
    }
    fclose(f);
    float loss;
    if (tfm_model_forward(&m, x, x + N, B, T, &loss, &err) < 0) {
        fprintf(stderr, "model_dump: %s\n", err.msg);
        return 1;
    }
    f = open_in(dir, "out.bin", "wb");
    fwrite(&loss, sizeof loss, 1, f);
    fwrite(tfm_model_logits(&m), sizeof(float), N * cfg.vocab_size, f);
    tfm_model_zero_grad(&m);
    tfm_model_backward(&m, 1.0f);
    for (int i = 0; i < m.n_table; i++)
        fwrite(m.grads + m.table[i].offset, sizeof(float), m.table[i].numel, f);
    if (fclose(f) != 0) {
        perror("out.bin");
        return 1;
    }
    free(x);
    tfm_model_free(&m);
    return 0;
}
