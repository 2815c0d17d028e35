/* Packed whole-sequence inference forward; see forward.h. */
#include "config.h"

#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/opt.h"
#include "nn/position.h"
#include "tensor/gemm.h"
#include "tensor/ops.h"

/* Without AVX-512 the forward alone (no backward to share the transposes)
 * gains nothing from the fused attention over BLAS's products at T = 128,
 * HS = 64 (scripts/bench/embed_bench, BERT-base, AVX2: within the noise on
 * one sentence and on full batches), so the BLAS path, whose rounding the
 * reference tests were set against, stays. */
#ifdef __AVX512F__
#define ATTN_IMPL TFM_ATTN_AUTO
#else
#define ATTN_IMPL TFM_ATTN_BLAS
#endif

int tfm_fwd_init(tfm_fwd *f, const tfm_model_config *cfg, const tfm_weights *w,
                 tfm_fwd_stack stack, tfm_err *err)
{
    memset(f, 0, sizeof *f);
    if (tfm_model_config_check(cfg, err) < 0)
        return -1;
    f->cfg = *cfg;
    f->blk = tfm_model_block(cfg);
    f->w = w;
    if (stack == TFM_FWD_ENCODER) {
        if (cfg->kind != TFM_KIND_ENCODER_DECODER)
            return tfm_err_set(err, "model.kind %s has no separate encoder",
                               tfm_kind_name(cfg->kind));
        f->e = &w->enc;
        f->layers = w->enc_layers;
        f->n_layer = w->n_enc_layer;
        f->vocab = tfm_model_config_src_vocab(cfg);
        f->mask = TFM_MASK_NONE;
    } else {
        if (cfg->kind == TFM_KIND_ENCODER_DECODER)
            return tfm_err_set(err, "the decoder of an encoder-decoder reads a source: "
                                    "run its encoder (TFM_FWD_ENCODER)");
        f->e = &w->dec;
        f->layers = w->layers;
        f->n_layer = w->n_layer;
        f->vocab = cfg->vocab_size;
        f->mask = cfg->kind == TFM_KIND_DECODER ? TFM_MASK_CAUSAL : TFM_MASK_NONE;
    }
    f->t5_bidirectional = f->mask == TFM_MASK_NONE;
    f->attn_impl = ATTN_IMPL;
    if (cfg->pos == TFM_POS_ALIBI) {
        f->alibi = tfm_malloc(sizeof(float) * (size_t)cfg->n_head);
        tfm_alibi_slopes(f->alibi, cfg->n_head);
    }
    return 0;
}

void tfm_fwd_free(tfm_fwd *f)
{
    free(f->x); free(f->h); free(f->qkv); free(f->att); free(f->fc); free(f->fc1);
    free(f->mean); free(f->rstd); free(f->pe); free(f->rope); free(f->pos); free(f->emb);
    free(f->probs); free(f->ascratch); free(f->alibi); free(f->xq); free(f->xd);
    if (f->q8)
        for (int i = 0; i < 5 * f->n_layer; i++)
            if (f->q8[i].w)
                tfm_q8_packed_free(&f->q8[i]);
    free(f->q8);
    if (f->packed)
        for (int i = 0; i < 5 * f->n_layer; i++)
            tfm_gemm_b_free(&f->packed[i]);
    free(f->packed);
    memset(f, 0, sizeof *f);
}

/* p without its panels: a product that goes 8-bit keeps no float32 copy
 * beside the widened weights (tfm_gemm_packed would read p->B) */
static void drop_panels(tfm_gemm_b *p)
{
    free(p->panels);
    p->panels = NULL;
}

void tfm_fwd_pack_weights(tfm_fwd *f)
{
    if (f->packed)
        return;
    const int C = f->cfg.n_embd, F = tfm_model_config_ff(&f->cfg);
    const int D = tfm_block_q_dim(&f->blk), QKV = tfm_block_qkv_dim(&f->blk);
    f->packed = tfm_calloc((size_t)5 * f->n_layer, sizeof *f->packed);
    for (int l = 0; l < f->n_layer; l++) {
        const tfm_layer_weights *W = &f->layers[l];
        tfm_gemm_b *p = f->packed + 5 * l;
        tfm_gemm_b_pack(&p[0], W->qkv_w.f32, QKV, C, QKV);
        tfm_gemm_b_pack(&p[1], W->proj_w.f32, C, D, C);
        tfm_gemm_b_pack(&p[2], W->fc_w.f32, F, C, F);
        tfm_gemm_b_pack(&p[3], W->fcp_w.f32, C, F, C);
        if (W->fc1_w.f32)
            tfm_gemm_b_pack(&p[4], W->fc1_w.f32, F, C, F);
    }
    f->q8_path = tfm_fwd_q8_policy();
    for (int l = 0; l < f->n_layer; l++) {
        const tfm_layer_weights *W = &f->layers[l];
        /* [in, out] here, [out, in] as stored */
        const tfm_matrix *m[5] = {&W->qkv_w, &W->proj_w, &W->fc_w, &W->fcp_w, &W->fc1_w};
        const int in[5] = {C, D, C, F, C}, out[5] = {QKV, C, F, C, F};
        for (int i = 0; i < 5; i++) {
            if (m[i]->dtype != TFM_WEIGHTS_Q8_0 || !m[i]->data || !m[i]->f32 ||
                in[i] % TFM_Q8_BLOCK)
                continue;
            if (!f->q8)
                f->q8 = tfm_calloc((size_t)5 * f->n_layer, sizeof *f->q8);
            const tfm_q8 q = {m[i]->data, m[i]->scale, out[i], in[i]};
            tfm_q8_pack(&f->q8[5 * l + i], &q);
            if (f->q8_path == TFM_FWD_Q8_ON) /* the float32 panels would never be read */
                drop_panels(&f->packed[5 * l + i]);
        }
    }
}

/* set by a program before it opens a model */
static tfm_fwd_q8 q8_policy = TFM_FWD_Q8_AUTO;

tfm_fwd_q8 tfm_fwd_q8_policy(void)
{
    return q8_policy;
}

void tfm_fwd_q8_option(const char *prog, const char *arg)
{
    static const char *const names[] = {"auto", "on", "off"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(arg, names[i])) {
            q8_policy = (tfm_fwd_q8)i;
            return;
        }
    tfm_usage_error(prog, "--q8-gemm %s: auto, on or off", arg);
}

int tfm_fwd_max_len(const tfm_fwd *f)
{
    return f->cfg.pos == TFM_POS_LEARNED ? f->cfg.block_size : INT32_MAX;
}


/* The attention of one sequence of T positions (prefix: its prefix-LM
 * prefix, or NULL); keep: P is wanted (attention maps), else long
 * sequences run in tiles (nn/attention.h) and never hold T×T. */
static tfm_attn seq_attn(const tfm_fwd *f, const tfm_attn_t5 *t5, int T, int keep,
                         const int *prefix)
{
    return (tfm_attn){.B = 1, .Tq = T, .Tk = T, .NH = f->blk.n_head,
                      .NKV = f->blk.n_kv_head, .HS = f->blk.head_dim,
                      .mask = prefix ? TFM_MASK_PREFIX : f->mask, .prefix_len = prefix,
                      .alibi = f->alibi, .t5 = f->e->rel_bias ? t5 : NULL,
                      .impl = keep ? f->attn_impl : tfm_attn_tiled_wanted(T, f->attn_impl),
                      .unscaled = f->blk.unscaled, .window = f->blk.window};
}

static tfm_attn_t5 seq_t5(const tfm_fwd *f)
{
    return (tfm_attn_t5){.table = f->e->rel_bias, .n_buckets = f->cfg.t5_buckets,
                         .max_distance = f->cfg.t5_max_distance,
                         .bidirectional = f->t5_bidirectional};
}

/* Whether sequence s keeps its P: asked for as attention maps, or short
 * enough for the one-pass paths. */
static int keeps_probs(const tfm_fwd_batch *b, int s)
{
    return (b->attn && s == b->attn_seq) ||
           tfm_attn_tiled_wanted(b->len[s], TFM_ATTN_AUTO) != TFM_ATTN_TILED;
}

/* Sequences run through one attention call from s on: those of s's
 * length that follow it (perplexity windows, sentences of one length),
 * their packed rows being [B, T] already, each (sequence, head) computed
 * alone as in a call of its own; a sequence whose maps are asked for
 * alone; kept P of a run within 4M floats. */
static int run_len(const tfm_fwd *f, const tfm_fwd_batch *b, int s)
{
    const int T = b->len[s];
    if (b->attn && s == b->attn_seq)
        return 1;
    size_t cap = (size_t)INT32_MAX;
    if (keeps_probs(b, s)) {
        size_t per = (size_t)f->blk.n_head * T * T;
        cap = per >= ((size_t)1 << 22) ? 1 : ((size_t)1 << 22) / per;
    }
    int B = 1;
    while (s + B < b->n && (size_t)B < cap && b->len[s + B] == T &&
           !(b->attn && s + B == b->attn_seq))
        B++;
    return B;
}

/* Scratch for R rows and sequences of up to T positions, of which those
 * keeping P have up to Tp, runs of up to Bmax sequences and kept P of up
 * to np floats. */
static void ensure(tfm_fwd *f, int R, int T, int Tp, int Bmax, size_t np)
{
    const size_t C = (size_t)f->cfg.n_embd, F = (size_t)tfm_model_config_ff(&f->cfg);
    const size_t D = (size_t)tfm_block_q_dim(&f->blk);
    const size_t QKV = (size_t)tfm_block_qkv_dim(&f->blk);
    const int NH = f->blk.n_head, HS = f->blk.head_dim;
    if (R > f->max_rows) {
        free(f->x); free(f->h); free(f->qkv); free(f->att); free(f->fc); free(f->fc1);
        free(f->mean); free(f->rstd); free(f->pos); free(f->emb);
        size_t r = (size_t)R;
        f->emb = f->e->proj_w ? tfm_aligned_alloc(sizeof(float) * r *
                                                  (size_t)tfm_model_config_emb_dim(&f->cfg))
                              : NULL;
        f->x = tfm_aligned_alloc(sizeof(float) * r * C);
        f->h = tfm_aligned_alloc(sizeof(float) * r * C);
        f->qkv = tfm_aligned_alloc(sizeof(float) * r * QKV);
        f->att = tfm_aligned_alloc(sizeof(float) * r * D);
        f->fc = tfm_aligned_alloc(sizeof(float) * r * F);
        f->fc1 = tfm_ffn_gated(f->blk.ffn) ? tfm_aligned_alloc(sizeof(float) * r * F) : NULL;
        f->mean = tfm_malloc(sizeof(float) * r);
        f->rstd = tfm_malloc(sizeof(float) * r);
        f->pos = tfm_malloc(sizeof(int32_t) * r);
        f->max_rows = R;
    }
    if (T > f->max_len) {
        free(f->pe); free(f->rope);
        f->pe = f->rope = NULL;
        if (f->cfg.pos == TFM_POS_SINUSOIDAL) {
            f->pe = tfm_aligned_alloc(sizeof(float) * (size_t)T * C);
            tfm_sinusoidal_table(f->pe, T, (int)C);
        }
        if (f->cfg.pos == TFM_POS_ROPE) {
            f->rope = tfm_aligned_alloc(sizeof(float) * (size_t)T * HS);
            tfm_rope_table(f->rope, 0, T, HS, &f->cfg.rope);
        }
        f->max_len = T;
    }
    (void)NH;
    if (np > f->probs_n) {
        free(f->probs);
        f->probs = tfm_aligned_alloc(sizeof(float) * np);
        f->probs_n = np;
    }
    if (Tp > f->probs_len)
        f->probs_len = Tp;
    if (Bmax > f->max_run)
        f->max_run = Bmax;
    /* attention scratch depends on the thread count too: asked every time */
    const tfm_attn_t5 t5 = seq_t5(f);
    tfm_attn kept = seq_attn(f, &t5, f->probs_len, 1, NULL);
    tfm_attn tiled = seq_attn(f, &t5, f->max_len, 0, NULL);
    kept.B = tiled.B = f->max_run; /* T5's per-(sequence, head) region grows with B */
    size_t need = tfm_attn_scratch_floats(&kept) + 1, need2 = tfm_attn_scratch_floats(&tiled) + 1;
    need = need2 > need ? need2 : need;
    if (need > f->ascratch_n) {
        free(f->ascratch);
        f->ascratch = tfm_aligned_alloc(sizeof(float) * need);
        f->ascratch_n = need;
    }
}

/* out[R, N] = in[R, K]·W[K, N], then e (bias, activation, residual) on each
 * block of out while it is in cache; pk is W packed (tfm_fwd_pack_weights)
 * or NULL, q8 its 8-bit packing (w NULL: none) or NULL. */
static void linear(tfm_fwd *f, float *out, const float *in, const float *W, tfm_gemm_b *pk,
                   const tfm_q8_packed *q8, int R, int K, int N, tfm_linear_epi e)
{
    if (pk && q8 && q8->w && f->q8_path != TFM_FWD_Q8_OFF &&
        (f->q8_path == TFM_FWD_Q8_ON || tfm_q8_gemm_faster(q8, pk))) {
        if (pk->panels) /* chosen for good: the process keeps the choice */
            drop_panels(pk);
        const int nb = K / TFM_Q8_BLOCK;
        if ((size_t)R * K > f->xq_n) {
            free(f->xq);
            free(f->xd);
            f->xq_n = (size_t)R * K;
            f->xq = tfm_aligned_alloc(f->xq_n);
            f->xd = tfm_aligned_alloc(sizeof(float) * (f->xq_n / TFM_Q8_BLOCK));
        }
#pragma omp parallel for schedule(static) if ((size_t)R * K >= (1 << 16))
        for (int r = 0; r < R; r++)
            tfm_q8_quantize(f->xq + (size_t)r * K, f->xd + (size_t)r * nb, in + (size_t)r * K, K);
        tfm_q8_gemm(out, N, f->xq, f->xd, R, q8, NULL, tfm_linear_epilogue, &e);
        return;
    }
    const tfm_gemm_b plain = {.K = K, .N = N, .B = W, .ldb = N};
    tfm_gemm_packed(R, in, K, pk ? pk : &plain, out, N, tfm_linear_epilogue, &e);
}

/* x[r] = wte[tok] (·√C with emb_scale) + position term + wse[seg], then the
 * embedding norm; a factorised embedding's (E wide) then projected to C. */
static void embed(tfm_fwd *f, const tfm_fwd_batch *b, int R)
{
    const tfm_model_config *c = &f->cfg;
    const int C = tfm_model_config_emb_dim(c);
    const tfm_embed_weights *e = f->e;
    float *x = e->proj_w ? f->emb : f->x;
    const float *pt = c->pos == TFM_POS_LEARNED ? e->wpe
                      : c->pos == TFM_POS_SINUSOIDAL ? f->pe : NULL;
    const float *wse = e == &f->w->dec ? f->w->wse : NULL;
    const float s = tfm_emb_scale(c);
#pragma omp parallel for schedule(static) if ((size_t)R * C >= (1 << 16))
    for (int r = 0; r < R; r++) {
        const float *te = e->wte.f32 + (size_t)b->tok[r] * C;
        float *xr = x + (size_t)r * C;
        tfm_embed_row(xr, te, pt ? pt + (size_t)f->pos[r] * C : NULL, s, C);
        if (wse) {
            const float *se = wse + (size_t)(b->seg ? b->seg[r] : 0) * C;
            for (int i = 0; i < C; i++)
                xr[i] += se[i];
        }
    }
    if (e->lne_w)
        tfm_block_norm(&f->blk, x, f->mean, f->rstd, x, e->lne_w, e->lne_b, R, C);
    if (e->proj_w)
        linear(f, f->x, x, e->proj_w, NULL, NULL, R, C, c->n_embd,
               (tfm_linear_epi){.bias = e->proj_b});
}

/* att[off.., :] = attention of each sequence over its own positions. */
static void attend(tfm_fwd *f, const tfm_fwd_batch *b, int l, float *attn_out)
{
    const int NH = f->blk.n_head, D = tfm_block_q_dim(&f->blk);
    const int QKV = tfm_block_qkv_dim(&f->blk);
    const int KO = tfm_block_qkv_off(&f->blk, 1), VO = tfm_block_qkv_off(&f->blk, 2);
    const tfm_attn_t5 t5 = seq_t5(f);
    size_t off = 0;
    for (int s = 0; s < b->n;) {
        const int T = b->len[s], B = run_len(f, b, s);
        const int keep = keeps_probs(b, s);
        tfm_attn at = seq_attn(f, &t5, T, keep, b->prefix ? &b->prefix[s] : NULL);
        at.B = B;
        const float *q = f->qkv + off * QKV;
        tfm_attn_forward(&at, f->att + off * D, D, keep ? f->probs : NULL, q, QKV, q + KO, QKV,
                         q + VO, QKV, f->ascratch);
        if (attn_out && s == b->attn_seq)
            memcpy(attn_out + (size_t)l * NH * T * T, f->probs,
                   sizeof(float) * (size_t)NH * T * T);
        off += (size_t)T * B;
        s += B;
    }
}

int tfm_fwd_run(tfm_fwd *f, const tfm_fwd_batch *b, tfm_err *err)
{
    const tfm_model_config *c = &f->cfg;
    const int C = c->n_embd, HS = f->blk.head_dim;
    const int D = tfm_block_q_dim(&f->blk), QKV = tfm_block_qkv_dim(&f->blk);
    const int F = tfm_model_config_ff(c);
    const int pre = c->ln == TFM_LN_PRE, L = f->n_layer, maxT = tfm_fwd_max_len(f);
    /* check everything before any work */
    size_t R = 0;
    int T = 0, Tp = 0;
    for (int s = 0; s < b->n; s++) {
        if (b->len[s] < 1 || b->len[s] > maxT)
            return tfm_err_set(err, "sequence %d has %d tokens: the model takes 1 to %d", s,
                               b->len[s], maxT);
        if (b->prefix && (b->prefix[s] < 0 || b->prefix[s] > b->len[s]))
            return tfm_err_set(err, "sequence %d has a prefix of %d of its %d tokens", s,
                               b->prefix[s], b->len[s]);
        R += (size_t)b->len[s];
        T = b->len[s] > T ? b->len[s] : T;
        if (keeps_probs(b, s) && b->len[s] > Tp)
            Tp = b->len[s];
    }
    int Bmax = 1;
    size_t np = 0;
    for (int s = 0; s < b->n;) {
        int B = run_len(f, b, s);
        if (keeps_probs(b, s)) {
            size_t need = (size_t)B * f->blk.n_head * b->len[s] * b->len[s];
            np = need > np ? need : np;
        }
        Bmax = B > Bmax ? B : Bmax;
        s += B;
    }
    if (b->prefix && f->mask != TFM_MASK_CAUSAL)
        return tfm_err_set(err, "a prefix-LM prefix asked of a stack that is not causal");
    if (R > INT32_MAX / 4)
        return tfm_err_set(err, "batch of %zu tokens is too large", R);
    for (size_t r = 0; r < R; r++) {
        if (b->tok[r] >= (uint32_t)f->vocab)
            return tfm_err_set(err, "token id %u is outside the model's vocabulary (%d)",
                               b->tok[r], f->vocab);
        if (b->seg && b->seg[r] && b->seg[r] >= c->n_segments)
            return tfm_err_set(err, "segment id %u is outside the model's segments (%d)",
                               b->seg[r], c->n_segments);
    }
    if (b->attn && (b->attn_seq < 0 || b->attn_seq >= b->n))
        return tfm_err_set(err, "attention of sequence %d asked of a batch of %d",
                           b->attn_seq, b->n);
    if (R == 0)
        return 0;
    ensure(f, (int)R, T, Tp, Bmax, np);
    for (int s = 0, r = 0; s < b->n; s++)
        for (int i = 0; i < b->len[s]; i++)
            f->pos[r++] = i;

    const int Ri = (int)R;
    float *x = f->x, *h = f->h;
    embed(f, b, Ri);
    if (b->hidden[0])
        memcpy(b->hidden[0], x, sizeof(float) * R * C);
    const tfm_block *blk = &f->blk;
    for (int l = 0; l < L; l++) {
        const tfm_layer_weights *W = &f->layers[l];
        tfm_gemm_b *pk = f->packed ? f->packed + 5 * l : NULL;
        const tfm_q8_packed *q8 = f->q8 ? f->q8 + 5 * l : NULL;
#define Q8(i) (q8 ? &q8[i] : NULL)
        const float *ain = x;
        if (pre) {
            tfm_block_norm(blk, h, f->mean, f->rstd, x, W->ln1_w, W->ln1_b, Ri, C);
            ain = h;
        }
        linear(f, f->qkv, ain, W->qkv_w.f32, pk ? &pk[0] : NULL, Q8(0), Ri, C, QKV,
               (tfm_linear_epi){.bias = W->qkv_b});
        if (f->rope) /* q and k: their n_head + n_kv_head heads of HS columns */
            tfm_rope_apply(f->qkv, QKV, Ri, f->pos, 0, f->blk.n_head + f->blk.n_kv_head, HS,
                           f->rope, f->max_len, 0);
        attend(f, b, l, b->attn);
        /* x += att·Wp + b */
        linear(f, h, f->att, W->proj_w.f32, pk ? &pk[1] : NULL, Q8(1), Ri, D, C,
               (tfm_linear_epi){.bias = W->proj_b, .add = x, .ldadd = (size_t)C});
        if (!pre)
            tfm_block_norm(blk, x, f->mean, f->rstd, x, W->ln1_w, W->ln1_b, Ri, C);
        const float *min = x;
        if (pre) {
            tfm_block_norm(blk, h, f->mean, f->rstd, x, W->ln2_w, W->ln2_b, Ri, C);
            min = h;
        }
        if (f->fc1) {
            /* gated: the gate and the linear input, then their product */
            linear(f, f->fc, min, W->fc_w.f32, pk ? &pk[2] : NULL, Q8(2), Ri, C, F,
                   (tfm_linear_epi){.bias = W->fc_b});
            linear(f, f->fc1, min, W->fc1_w.f32, pk ? &pk[4] : NULL, Q8(4), Ri, C, F,
                   (tfm_linear_epi){.bias = W->fc1_b});
            tfm_block_ffn_mid(blk, f->fc, f->fc, f->fc1, (size_t)R * F);
        } else {
            /* plain: the activation in the product's epilogue */
            linear(f, f->fc, min, W->fc_w.f32, pk ? &pk[2] : NULL, Q8(2), Ri, C, F,
                   (tfm_linear_epi){.bias = W->fc_b, .act = 1, .act_kind = blk->act});
        }
        linear(f, h, f->fc, W->fcp_w.f32, pk ? &pk[3] : NULL, Q8(3), Ri, F, C,
               (tfm_linear_epi){.bias = W->fcp_b, .add = x, .ldadd = (size_t)C});
        if (!pre)
            tfm_block_norm(blk, x, f->mean, f->rstd, x, W->ln2_w, W->ln2_b, Ri, C);
        float *out = b->hidden[l + 1];
        if (!out)
            continue;
        if (pre && l == L - 1)
            tfm_block_norm(blk, out, f->mean, f->rstd, x, f->e->lnf_w, f->e->lnf_b, Ri, C);
        else
            memcpy(out, x, sizeof(float) * R * C);
    }
#undef Q8
    return 0;
}

double tfm_fwd_flops(const tfm_model_config *cfg, int n_layer, int len)
{
    const double C = cfg->n_embd, F = tfm_model_config_ff(cfg), T = len;
    const double D = tfm_model_config_attn_dim(cfg), QKV = tfm_model_config_qkv_dim(cfg);
    /* qkv, proj, fc (two for a gated feed-forward), fc proj; Q·Kᵀ and P·V */
    const double nf = tfm_ffn_gated(cfg->ffn) ? 3 : 2;
    return n_layer * (2.0 * T * C * (QKV + D + nf * F) + 4.0 * T * T * D);
}
