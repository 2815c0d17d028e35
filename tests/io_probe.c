/* Test helper for tests/io_numpy.py: writes .npy and safetensors files with
 * the library, and prints what the library reads from files numpy wrote, so
 * that the Python side can compare both directions; and for
 * tests/hf_bert.py: the logits of a model file (or folder) loaded with
 * tfm_model_load.  Not installed. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/buf.h"
#include "base/progress.h"
#include "io/json.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "lm/lm.h"
#include "model/transformer.h"
#include "tensor/gemm.h"
#include "train/run_config.h"

static void die(const tfm_err *e)
{
    fprintf(stderr, "io_probe: %s\n", e->msg);
    exit(1);
}

static void print_elem(const void *data, size_t i, int is_float, int is_signed, size_t size)
{
    const unsigned char *p = (const unsigned char *)data + i * size;
    if (is_float == 2) { /* half: print the raw bits */
        uint16_t v;
        memcpy(&v, p, 2);
        printf("h%u\n", v);
    } else if (is_float) {
        double v;
        if (size == 4) {
            float f;
            memcpy(&f, p, 4);
            v = f;
        } else {
            memcpy(&v, p, 8);
        }
        printf("%.17g\n", v);
    } else {
        uint64_t u = 0;
        memcpy(&u, p, size); /* little-endian host */
        if (is_signed && size < 8 && (u >> (8 * size - 1)) & 1)
            u |= ~(uint64_t)0 << (8 * size);
        if (is_signed)
            printf("%" PRId64 "\n", (int64_t)u);
        else
            printf("%" PRIu64 "\n", u);
    }
}

static int npy_write(const char *dir)
{
    char p[4096];
    tfm_err e = {0};
    tfm_npy_writer w;
    snprintf(p, sizeof p, "%s/u16_stream.npy", dir);
    if (tfm_npy_writer_open(&w, p, TFM_NPY_U16, 0, &e) < 0)
        die(&e);
    for (uint32_t i = 0; i < 70000; i += 7) {
        uint16_t v = (uint16_t)(i * 13);
        if (tfm_npy_writer_append(&w, &v, 1, &e) < 0)
            die(&e);
    }
    if (tfm_npy_writer_commit(&w, &e) < 0)
        die(&e);

    snprintf(p, sizeof p, "%s/f32_rows.npy", dir);
    if (tfm_npy_writer_open(&w, p, TFM_NPY_F32, 5, &e) < 0)
        die(&e);
    for (int r = 0; r < 3; r++) {
        float row[5];
        for (int c = 0; c < 5; c++)
            row[c] = (float)(r * 5 + c) * 0.25f - 1.0f;
        if (tfm_npy_writer_append(&w, row, 5, &e) < 0)
            die(&e);
    }
    if (tfm_npy_writer_commit(&w, &e) < 0)
        die(&e);

    int32_t m[4][3];
    for (int i = 0; i < 12; i++)
        m[i / 3][i % 3] = (i - 6) * 100000;
    size_t shape[2] = {4, 3};
    snprintf(p, sizeof p, "%s/i32_whole.npy", dir);
    if (tfm_npy_write(p, TFM_NPY_I32, 2, shape, m, &e) < 0)
        die(&e);
    uint32_t v[3] = {0, 65536, 4294967295u};
    size_t n = 3;
    snprintf(p, sizeof p, "%s/u32_whole.npy", dir);
    if (tfm_npy_write(p, TFM_NPY_U32, 1, &n, v, &e) < 0)
        die(&e);
    return 0;
}

/* A 1-D uint32 stream to stdout (spooled, since stdout may be a pipe). */
static int npy_stdout(void)
{
    tfm_err e = {0};
    tfm_npy_writer w;
    if (tfm_npy_writer_open(&w, "-", TFM_NPY_U32, 0, &e) < 0)
        die(&e);
    for (uint32_t i = 0; i < 1000; i++) {
        uint32_t x = i * 100003u;
        if (tfm_npy_writer_append(&w, &x, 1, &e) < 0)
            die(&e);
    }
    if (tfm_npy_writer_commit(&w, &e) < 0)
        die(&e);
    return 0;
}

static int npy_read(const char *path)
{
    tfm_npy a;
    tfm_err e = {0};
    if (tfm_npy_open(&a, path, &e) < 0)
        die(&e);
    printf("%s %d", tfm_npy_dtype_descr(a.dtype), a.ndim);
    for (int i = 0; i < a.ndim; i++)
        printf(" %zu", a.shape[i]);
    printf("\n");
    size_t sz = tfm_npy_dtype_size(a.dtype);
    int fl = a.dtype == TFM_NPY_F16 ? 2 : a.dtype == TFM_NPY_F32 || a.dtype == TFM_NPY_F64;
    int sg = a.dtype == TFM_NPY_I8 || a.dtype == TFM_NPY_I16 || a.dtype == TFM_NPY_I32 ||
             a.dtype == TFM_NPY_I64;
    for (size_t i = 0; i < a.count; i++)
        print_elem(a.data, i, fl, sg, sz);
    tfm_npy_close(&a);
    return 0;
}

static int st_write(const char *path)
{
    static float w2[2][3] = {{1.5f, -2, 3}, {4, 5, 6.25f}};
    static int64_t step[1] = {123456789012LL};
    static uint8_t u8[5] = {0, 1, 2, 254, 255};
    static uint16_t bf16[2] = {0x3f80, 0xc000}; /* 1.0, -2.0 */
    static int32_t i32[2][2][2] = {{{-1, 2}, {3, -4}}, {{5, 6}, {7, 8}}};
    size_t s2[2] = {2, 3}, s1[1] = {1}, s5[1] = {5}, sb[1] = {2}, s3[3] = {2, 2, 2};
    size_t s0[2] = {0, 7};
    tfm_safetensors_writer w;
    tfm_safetensors_writer_init(&w);
    tfm_safetensors_writer_add(&w, "u8", TFM_ST_U8, 1, s5, u8);
    tfm_safetensors_writer_add(&w, "h.0.attn.c_attn.weight", TFM_ST_F32, 2, s2, w2);
    tfm_safetensors_writer_add(&w, "step", TFM_ST_I64, 1, s1, step);
    tfm_safetensors_writer_add(&w, "bf", TFM_ST_BF16, 1, sb, bf16);
    tfm_safetensors_writer_add(&w, "cube", TFM_ST_I32, 3, s3, i32);
    tfm_safetensors_writer_add(&w, "none", TFM_ST_F32, 2, s0, NULL);
    tfm_safetensors_writer_meta(&w, "format", "tfm-gpt");
    tfm_safetensors_writer_meta(&w, "config", "model:\n  layers: 2\n  name: \"q\\t\"\n");
    tfm_safetensors_writer_meta(&w, "unicode", "caf\xc3\xa9 \xf0\x9f\x98\x80 \x01");
    tfm_err e = {0};
    if (tfm_safetensors_writer_write(&w, path, &e) < 0)
        die(&e);
    tfm_safetensors_writer_free(&w);
    return 0;
}

static int st_read(const char *path)
{
    tfm_safetensors st;
    tfm_err e = {0};
    if (tfm_safetensors_open(&st, path, &e) < 0)
        die(&e);
    for (size_t i = 0; i < st.n_meta; i++) {
        printf("meta ");
        fwrite(st.meta[i].key, 1, strlen(st.meta[i].key), stdout);
        printf(" %zu\n", st.meta[i].value_len);
    }
    for (size_t i = 0; i < st.n_tensors; i++) {
        const tfm_st_tensor *t = &st.tensors[i];
        printf("tensor %s %s %d", t->name, tfm_st_dtype_name(t->dtype), t->ndim);
        for (int d = 0; d < t->ndim; d++)
            printf(" %zu", t->shape[d]);
        printf("\n");
        size_t sz = tfm_st_dtype_size(t->dtype);
        int fl = t->dtype == TFM_ST_F16 || t->dtype == TFM_ST_BF16 ? 2
                 : t->dtype == TFM_ST_F32 || t->dtype == TFM_ST_F64;
        int sg = t->dtype == TFM_ST_I8 || t->dtype == TFM_ST_I16 || t->dtype == TFM_ST_I32 ||
                 t->dtype == TFM_ST_I64;
        for (size_t k = 0; k < t->count; k++)
            print_elem(t->data, k, fl, sg, sz);
    }
    tfm_safetensors_close(&st);
    return 0;
}

/* Each file's tree as one line of compact JSON, or "ERROR message". */
static int json_dump(int n, char **paths)
{
    for (int i = 0; i < n; i++) {
        tfm_json_doc d;
        tfm_err e = {0};
        if (tfm_json_parse_file(&d, paths[i], 0, &e) < 0) {
            printf("ERROR %s\n", e.msg);
            continue;
        }
        tfm_buf b = {0};
        tfm_json_write(&b, d.root);
        printf("%s\n", tfm_buf_cstr(&b));
        tfm_buf_free(&b);
        tfm_json_doc_free(&d);
    }
    return 0;
}

/* Parse time of a JSON file (best of 5), for the figures in the report. */
static int json_time(const char *path)
{
    double best = 1e30;
    size_t n = 0;
    for (int r = 0; r < 5; r++) {
        tfm_json_doc d;
        tfm_err e = {0};
        double t = tfm_now();
        if (tfm_json_parse_file(&d, path, 0, &e) < 0)
            die(&e);
        t = tfm_now() - t;
        if (t < best)
            best = t;
        n = d.root->n;
        tfm_json_doc_free(&d);
    }
    printf("%s: parsed in %.4f s (best of 5), %zu top-level items\n", path, best, n);
    return 0;
}

/* model-logits MODEL BATCH OUT [ADAPTER]: loads MODEL with tfm_model_load (a
 * tfm file, a HuggingFace BERT, GPT-2 or T5 checkpoint; with ADAPTER, a LoRA
 * adapter directory merged in), prints
 * the description it got and the tokenizer (kind and size, or "none") on
 * one line (an encoder-decoder's other fields on a second), runs the batch
 * (BATCH: int32 B, T, inputs [B, T], segments [B, T], lengths [B]; an
 * encoder-decoder's: int32 B, T, S, decoder inputs [B, T], source [B, S],
 * source lengths [B]) and writes the logits [B, T, V] (float32) to OUT. */
static int model_logits(const char *model, const char *batch, const char *out,
                        const char *adapter)
{
    tfm_err e = {0};
    tfm_config c;
    tfm_model m;
    tfm_tokenizer *tok;
    tfm_blas_init(1);
    if (tfm_model_load_adapter(model, adapter, &c, &m, &tok, &e) < 0)
        die(&e);
    const tfm_model_config *g = &m.cfg;
    static const char *const acts[] = {"gelu_tanh", "gelu_exact", "relu"};
    printf("kind %s positions %s norm %s act %s ln_eps %.9g n_layer %d n_head %d n_embd %d "
           "d_ff %d block_size %d vocab_size %d segments %d emb_norm %d tied %d bias %d "
           "tokenizer %s %u\n",
           tfm_kind_name(g->kind), tfm_pos_name(g->pos), g->ln == TFM_LN_POST ? "post" : "pre",
           acts[g->act], g->ln_eps, g->n_layer, g->n_head, g->n_embd, tfm_model_config_ff(g),
           g->block_size, g->vocab_size, g->n_segments, g->emb_norm, g->tie_embeddings, g->bias,
           tok ? (tfm_tokenizer_kind(tok) == TFM_TOK_WORDPIECE ? "wordpiece" : "other") : "none",
           tok ? tfm_tokenizer_vocab_size(tok) : 0);
    int ed = g->kind == TFM_KIND_ENCODER_DECODER;
    if (ed)
        printf("n_enc_layer %d norm_type %s ffn %d attn_unscaled %d t5 %d %d head_scale %d "
               "decoder_start %d tie_source %d head_dim %d forced_bos %d source_bos %d\n",
               tfm_model_config_enc_layers(g), g->norm == TFM_NORM_RMS ? "rmsnorm" : "layernorm",
               (int)g->ffn, g->attn_unscaled, g->t5_buckets, g->t5_max_distance,
               g->head_scale, g->decoder_start, g->tie_source, tfm_model_config_head_dim(g),
               g->forced_bos, g->source_bos);
    tfm_model_set_inference(&m);
    FILE *f = fopen(batch, "rb");
    int32_t bt[3] = {0, 0, 0};
    if (!f || fread(bt, sizeof *bt, 2 + ed, f) != 2u + ed || bt[0] < 1 || bt[1] < 1 ||
        (ed && bt[2] < 1)) {
        fprintf(stderr, "io_probe: %s: bad batch file\n", batch);
        return 1;
    }
    /* encoder-decoders: decoder inputs [B, T], source [B, S], source
     * lengths [B]; the others: inputs [B, T], segments [B, T], lengths [B] */
    size_t N = (size_t)bt[0] * (size_t)bt[1], N2 = ed ? (size_t)bt[0] * bt[2] : N;
    int32_t *x = malloc((N + N2) * sizeof *x);
    int *len = malloc((size_t)bt[0] * sizeof *len);
    if (fread(x, sizeof *x, N + N2, f) != N + N2 ||
        fread(len, sizeof *len, (size_t)bt[0], f) != (size_t)bt[0]) {
        fprintf(stderr, "io_probe: %s: short batch file\n", batch);
        return 1;
    }
    fclose(f);
    /* segments and padding lengths are an encoder's (a GPT-2 checkpoint
     * takes whole sequences) */
    int enc = g->kind == TFM_KIND_ENCODER;
    tfm_batch b = {.inputs = x, .B = bt[0], .T = bt[1],
                   .segments = g->n_segments ? x + N : NULL, .lengths = enc ? len : NULL};
    if (ed) {
        b.src = x + N;
        b.S = bt[2];
        b.src_lengths = len;
    }
    if (tfm_model_forward_batch(&m, &b, NULL, &e) < 0)
        die(&e);
    f = fopen(out, "wb");
    if (!f || fwrite(tfm_model_logits(&m), sizeof(float), N * (size_t)g->vocab_size, f) !=
                  N * (size_t)g->vocab_size || fclose(f) != 0) {
        perror(out);
        return 1;
    }
    free(x);
    free(len);
    if (tok)
        tfm_tokenizer_free(tok);
    tfm_model_free(&m);
    return 0;
}

/* model-encode MODEL: each line of stdin as the token ids the tokenizer
 * of MODEL (tfm_lm_open: a tfm file or a HuggingFace folder) gives it,
 * added tokens split out; folder-encode DIR: the same with
 * tfm_model_folder_tokenizer's. */
static int model_encode(const char *model, int folder)
{
    tfm_err e = {0};
    tfm_lm lm = {0};
    tfm_tokenizer *tok = NULL;
    if (folder ? tfm_model_folder_tokenizer(model, &tok, &e) < 0 : tfm_lm_open(&lm, model, &e) < 0)
        die(&e);
    if (!folder)
        tok = lm.tok;
    if (!tok) {
        fprintf(stderr, "io_probe: %s: no tokenizer\n", model);
        return 1;
    }
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strcspn(line, "\n");
        tfm_ids ids = {0};
        tfm_tokenizer_encode(tok, NULL, line, n, 1, &ids);
        for (size_t i = 0; i < ids.len; i++)
            printf("%s%u", i ? " " : "", ids.data[i]);
        printf("\n");
        tfm_ids_free(&ids);
    }
    if (folder)
        tfm_tokenizer_free(tok);
    else
        tfm_lm_close(&lm);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && (!strcmp(argv[1], "model-encode") || !strcmp(argv[1], "folder-encode")))
        return model_encode(argv[2], argv[1][0] == 'f');
    if ((argc == 5 || argc == 6) && !strcmp(argv[1], "model-logits"))
        return model_logits(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : NULL);
    if (argc >= 2 && !strcmp(argv[1], "json-dump"))
        return json_dump(argc - 2, argv + 2);
    if (argc == 3 && !strcmp(argv[1], "json-time"))
        return json_time(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "npy-write"))
        return npy_write(argv[2]);
    if (argc == 2 && !strcmp(argv[1], "npy-stdout"))
        return npy_stdout();
    if (argc == 3 && !strcmp(argv[1], "npy-read"))
        return npy_read(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "st-write"))
        return st_write(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "st-read"))
        return st_read(argv[2]);
    fprintf(stderr, "usage: io_probe npy-write DIR | npy-stdout | npy-read FILE | "
                    "st-write FILE | st-read FILE | json-time FILE | json-dump FILE... | "
                    "model-logits MODEL BATCH OUT [ADAPTER] | model-encode MODEL | folder-encode DIR\n");
    return 2;
}
