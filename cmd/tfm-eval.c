/* tfm-eval: perplexity, multiple choice and last-word accuracy of a
 * language model.  Input -> token sequences -> tfm_eval_score
 * (lib/infer/eval.h) -> a summary on stderr and TSV or JSON on stdout. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "base/progress.h"
#include "data/fewshot.h"
#include "eval.h"
#include "infer/eval.h"
#include "metrics/metrics.h"
#include "lm/lm.h"
#include "lm/info.h"
#include "io/npy.h"
#include "tensor/gemm.h"

static const char *prog = "tfm-eval";

static void __attribute__((noreturn)) usage(void)
{
    printf("Usage: %s COMMAND -m MODEL.safetensors [options] [FILE]\n"
           "Evaluate a language model on FILE (default: stdin).\n"
           "\n"
           "Commands:\n"
           "  perplexity   cross-entropy, perplexity and bits per byte of a text\n"
           "  choice       multiple-choice accuracy; one JSON object per line:\n"
           "               {\"context\": \"...\", \"endings\": [\"...\", ...], \"label\": K}\n"
           "  lastword     LAMBADA-style accuracy: each line is a passage whose final\n"
           "               word (after the last space) is predicted greedily\n"
           "  score, bleu, chrf, text   metrics of predictions made elsewhere, no model\n"
           "               (see %s bleu --help)\n"
           "  classify, tag, span  predictions of a fine-tuned model, and their metrics\n"
           "               when the input has gold labels (see %s classify --help)\n"
           "  fill         an encoder's top-k tokens for each [MASK] (see %s fill --help)\n"
           "  reward       a reward model's scores of preference pairs (and their\n"
           "               accuracy) or of answers (see %s reward --help)\n"
           "  info         what the model file is: kind, configuration, parameters,\n"
           "               training step, tokenizer, checksum (key<TAB>value lines)\n"
           "\n"
           "Options:\n"
           "  -m, --model FILE     model file written by tfm-train, or a HuggingFace\n"
           "                       GPT-2 safetensors checkpoint (give it -t)\n"
           "      --adapter DIR    a LoRA adapter (PEFT's layout, as tfm-train writes it)\n"
           "                       merged into the model's weights at load\n"
           "  -t, --tokenizer T    tokenizer to use instead of the model file's: a\n"
           "                       tokenizer.json or a GPT-2 vocab.json + merges.txt\n"
           "                       directory (as tfm-tokenize -t)\n"
           "      --context N      perplexity: window length (default: the model's)\n"
           "      --stride S       perplexity: each window after the first scores its\n"
           "                       last min(S, N - 1) tokens, so every token has at least\n"
           "                       max(N - S, 1) tokens of history (default N: windows\n"
           "                       overlap by one token)\n"
           "      --tokens F.npy   perplexity: score these token ids instead of a text\n"
           "      --token-logprobs F  perplexity: each scored token's log-probability to\n"
           "                       F, as TSV (index in the text's tokens, id, logprob)\n"
           "      --no-bos         do not put the beginning (or end-of-text) token before\n"
           "                       each text (then its first token is not scored)\n"
           "      --json           one JSON object on stdout (default: TSV, a header\n"
           "                       line and a value line)\n"
           "      --items F        choice, lastword: one JSON line per item to F (the\n"
           "                       input line, the scores, what was predicted)\n"
           "      --shots K        choice, lastword: K demonstrations (context and right\n"
           "                       answer, a blank line after each) before each item, as\n"
           "                       GPT-3 (default 0); from the other items, or\n"
           "      --shots-from F   from the items or passages of F\n"
           "      --seed S         which demonstrations each item gets (default 1234)\n"
           "      --batch N        sequences per forward pass (default: by memory)\n"
           "      --threads N      threads (default: TFM_NUM_THREADS or the usable CPUs)\n"
           "  -q, --quiet          no summary or progress on stderr\n"
           "  -h, --help           this help\n"
           "      --version        print the version\n"
           "\n"
           "Log base e: cross-entropy is in nats per token; bits per byte = total\n"
           "nats / ln 2 / bytes.  Exit status: 0 success, 1 failure, 2 usage.\n",
           prog, prog, prog, prog, prog);
    exit(0);
}

enum { OPT_CONTEXT = 256, OPT_STRIDE, OPT_TOKENS, OPT_NO_BOS, OPT_JSON, OPT_BATCH,
       OPT_THREADS, OPT_VERSION, OPT_ITEMS, OPT_TOKEN_LP, OPT_SHOTS, OPT_SHOTS_FROM,
       OPT_SEED, OPT_ADAPTER };

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"adapter", required_argument, 0, OPT_ADAPTER},
    {"tokenizer", required_argument, 0, 't'},
    {"context", required_argument, 0, OPT_CONTEXT},
    {"stride", required_argument, 0, OPT_STRIDE},
    {"tokens", required_argument, 0, OPT_TOKENS},
    {"no-bos", no_argument, 0, OPT_NO_BOS},
    {"json", no_argument, 0, OPT_JSON},
    {"batch", required_argument, 0, OPT_BATCH},
    {"threads", required_argument, 0, OPT_THREADS},
    {"items", required_argument, 0, OPT_ITEMS},
    {"token-logprobs", required_argument, 0, OPT_TOKEN_LP},
    {"shots", required_argument, 0, OPT_SHOTS},
    {"shots-from", required_argument, 0, OPT_SHOTS_FROM},
    {"seed", required_argument, 0, OPT_SEED},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

typedef struct app {
    tfm_eval ev;
    const char *model_path, *adapter, *input, *tokens_path, *tok_path, *items_path, *token_lp_path;
    tfm_out *items; /* written atomically: committed only on success */
    const char *name;  /* input name for messages */
    long context, stride;
    int bos, json, quiet;
    tfm_tok_scratch *scratch;
    long shots, seed;          /* few-shot: demonstrations per item */
    const char *shots_from;
    tfm_fewshot fs;
} app;

static void die(const tfm_err *err) { tfm_die(prog, err); }

static void read_input(app *a, tfm_buf *b)
{
    tfm_err err = {0};
    FILE *fp = stdin;
    if (strcmp(a->input, "-") != 0 && !(fp = fopen(a->input, "rb"))) {
        tfm_err_errno(&err, "%s", a->input);
        die(&err);
    }
    if (tfm_read_all(fp, a->name, b, &err) < 0)
        die(&err);
    if (fp != stdin)
        fclose(fp);
}

static void need_tokenizer(app *a)
{
    if (!a->ev.tok)
        tfm_fatal(prog, "%s: the model file has no tokenizer (give one with -t%s)",
                  a->model_path, a->tokens_path ? "" : ", or token ids with --tokens");
}

/* Appends the token texts start with (the tokenizer's template's, else
 * end-of-text) when the model has one and --no-bos was not given: it
 * makes the first token of a text predictable. */
static void put_bos(app *a, tfm_ids *ids)
{
    if (a->bos && a->ev.bos >= 0)
        tfm_ids_push(ids, (uint32_t)a->ev.bos);
}

static double rate(const tfm_eval *e)
{
    return e->stat_seconds > 0 ? (double)e->stat_tokens / e->stat_seconds : 0;
}

static void speed_line(app *a)
{
    if (!a->quiet)
        fprintf(stderr, "%s: %zu token%s through the model in %.2f s: %.0f tokens/s, "
                "%d thread%s, batch %d\n", prog, a->ev.stat_tokens,
                a->ev.stat_tokens == 1 ? "" : "s", a->ev.stat_seconds,
                rate(&a->ev), tfm_blas_threads(), tfm_blas_threads() == 1 ? "" : "s",
                a->ev.batch);
}

/* ---- perplexity ------------------------------------------------------ */

static void load_tokens(app *a, tfm_ids *ids)
{
    tfm_err err = {0};
    tfm_npy np;
    if (tfm_npy_open(&np, a->tokens_path, &err) < 0)
        die(&err);
    /* the rule of every .npy reader (io/npy.h), against the model's vocabulary */
    size_t first = ids->len;
    for (size_t i = 0; i < np.count; i++)
        tfm_ids_push(ids, 0);
    if (tfm_npy_ids(&np, a->tokens_path, (uint64_t)a->ev.cfg.vocab_size,
                    ids->data + first, &err) < 0)
        die(&err);
    tfm_npy_close(&np);
}

static void cmd_perplexity(app *a)
{
    tfm_err err = {0};
    const long block = a->ev.cfg.block_size;
    long context = a->context ? a->context : block;
    if (context > block && a->ev.cfg.pos == TFM_POS_LEARNED)
        tfm_usage_error(prog, "--context %ld is longer than the model's context of %ld "
                        "(learned positions end there)", context, block);
    if (context < 2)
        tfm_usage_error(prog, "--context must be at least 2");
    if (tfm_eval_set_context(&a->ev, (int)context, &err) < 0)
        die(&err);
    long stride = a->stride ? a->stride : context;
    if (stride > context)
        tfm_usage_error(prog, "--stride %ld is longer than the context %ld", stride, context);

    tfm_ids ids = {0};
    tfm_buf text = {0};
    put_bos(a, &ids);
    size_t skip = ids.len; /* the bos is not text */
    if (a->tokens_path) {
        load_tokens(a, &ids);
        if (a->ev.tok && tfm_tokenizer_decode(a->ev.tok, ids.data + skip, ids.len - skip, 0,
                                              &text, &err) < 0)
            die(&err);
    } else {
        need_tokenizer(a);
        read_input(a, &text);
        tfm_tokenizer_encode(a->ev.tok, a->scratch, text.data, text.len, 1, &ids);
    }
    if (ids.len - skip == 0)
        tfm_fatal(prog, "%s: empty input: nothing to score",
                  a->tokens_path ? a->tokens_path : a->name);
    if (ids.len < 2) /* the reason: --no-bos, or a model without the token */
        tfm_fatal(prog, "%s: a single token and %s: nothing to score",
                  a->tokens_path ? a->tokens_path : a->name,
                  a->ev.bos >= 0 ? "--no-bos puts no end-of-text token before it"
                                 : "no end-of-text token to put before it");
    size_t bytes = 0, chars = 0;
    int have_bytes = a->ev.tok != NULL;
    if (have_bytes && tfm_ppl_text_size(a->ev.tok, ids.data, skip != 0, text.data, text.len,
                                        &bytes, &chars, &err) < 0)
        die(&err);

    tfm_ppl p;
    tfm_ppl_init(&p, ids.data, ids.len, (size_t)context, (size_t)stride, a->token_lp_path != NULL);
    size_t nw = p.n_windows, scored = p.scored;
    tfm_out lp_out;
    if (a->token_lp_path && tfm_out_open(&lp_out, a->token_lp_path, &err) < 0)
        die(&err);
    tfm_progress pr;
    tfm_progress_init(&pr, "perplexity", "tok", (double)scored, a->quiet);
    if (tfm_ppl_run(&p, &a->ev, &pr, &err) < 0)
        die(&err);
    tfm_progress_end(&pr);
    double total = p.nll;
    if (p.token_lp) {
        /* position k + 1 of the stream is token_lp[k] */
        tfm_buf o = {0};
        tfm_buf_puts(&o, "index\tid\tlogprob\n");
        for (size_t k = 0; k < scored; k++)
            tfm_buf_printf(&o, "%zu\t%u\t%.8g\n", k + 1 - skip, ids.data[k + 1], p.token_lp[k]);
        if (fwrite(o.data, 1, o.len, lp_out.fp) != o.len)
            tfm_err_errno(&err, "%s: write error", a->token_lp_path);
        tfm_buf_free(&o);
        if (err.failed || tfm_out_commit(&lp_out, &err) < 0)
            die(&err);
    }
    double ce = p.cross_entropy, ppl = p.perplexity;
    double bpb = tfm_metrics_bpb(total, bytes), bpc = tfm_metrics_bpb(total, chars);

    if (a->json) {
        /* a diverged model's inf and nan are null: JSON has neither */
        tfm_buf o = {0};
        tfm_buf_puts(&o, "{\"model\":");
        tfm_buf_put_json_string(&o, a->model_path, strlen(a->model_path));
        tfm_buf_printf(&o, ",\"tokens\":%zu,\"cross_entropy\":", scored);
        tfm_buf_put_json_double(&o, 8, ce);
        tfm_buf_puts(&o, ",\"perplexity\":");
        tfm_buf_put_json_double(&o, 8, ppl);
        if (have_bytes) {
            tfm_buf_printf(&o, ",\"bytes\":%zu,\"chars\":%zu,\"bits_per_byte\":", bytes, chars);
            tfm_buf_put_json_double(&o, 8, bpb);
            tfm_buf_puts(&o, ",\"bits_per_char\":");
            tfm_buf_put_json_double(&o, 8, bpc);
        } else {
            tfm_buf_puts(&o, ",\"bytes\":null,\"chars\":null,\"bits_per_byte\":null,"
                         "\"bits_per_char\":null");
        }
        tfm_buf_puts(&o, ",\"nll_sum\":");
        tfm_buf_put_json_double(&o, 10, total);
        tfm_buf_printf(&o, ",\"context\":%ld,\"stride\":%ld,\"windows\":%zu,"
                       "\"bos\":%s,\"log_base\":\"e\",\"seconds\":%.3f,\"tokens_per_second\":%.1f}\n",
                       context, stride, nw, skip ? "true" : "false", a->ev.stat_seconds,
                       rate(&a->ev));
        fwrite(o.data, 1, o.len, stdout);
        tfm_buf_free(&o);
    } else {
        printf("tokens\tbytes\tchars\tcross_entropy\tperplexity\tbits_per_byte\tbits_per_char"
               "\tcontext\tstride\twindows\tbos\n");
        if (have_bytes)
            printf("%zu\t%zu\t%zu\t%.8g\t%.8g\t%.8g\t%.8g", scored, bytes, chars, ce, ppl, bpb,
                   bpc);
        else
            printf("%zu\t-\t-\t%.8g\t%.8g\t-\t-", scored, ce, ppl);
        printf("\t%ld\t%ld\t%zu\t%d\n", context, stride, nw, skip ? 1 : 0);
    }
    if (!a->quiet) {
        fprintf(stderr, "%s: perplexity %.4f, cross-entropy %.4f nats/token", prog, ppl, ce);
        if (have_bytes)
            fprintf(stderr, ", %.4f bits/byte, %.4f bits/char", bpb, bpc);
        fprintf(stderr, "\n%s: %zu token%s", prog, scored, scored == 1 ? "" : "s");
        if (have_bytes)
            fprintf(stderr, " (%zu bytes)", bytes);
        fprintf(stderr, " scored in %zu window%s, context %ld, stride %ld%s\n", nw,
                nw == 1 ? "" : "s", context, stride,
                skip ? ", end-of-text token first" : "");
    }
    speed_line(a);
    tfm_ppl_free(&p);
    tfm_ids_free(&ids);
    tfm_buf_free(&text);
}

/* ---- choice ---------------------------------------------------------- */

/* The demonstrations (lib/data/fewshot.h), from --shots-from or the input. */
static void fewshot_setup(app *a, const tfm_buf *in, int choice)
{
    tfm_err err = {0};
    tfm_fewshot_init(&a->fs, (int)a->shots, (uint64_t)a->seed, !a->shots_from);
    const char *name = a->shots_from ? a->shots_from : a->name;
    if (a->shots_from) {
        tfm_buf d = {0};
        FILE *fp = fopen(a->shots_from, "rb");
        if (!fp) {
            tfm_err_errno(&err, "%s", a->shots_from);
            die(&err);
        }
        if (tfm_read_all(fp, a->shots_from, &d, &err) < 0)
            die(&err);
        fclose(fp);
        if (tfm_fewshot_read(&a->fs, d.data, d.len, choice, name, &err) < 0)
            die(&err);
        tfm_buf_free(&d);
    } else if (tfm_fewshot_read(&a->fs, in->data, in->len, choice, name, &err) < 0) {
        die(&err);
    }
    if (tfm_fewshot_check(&a->fs, name, &err) < 0)
        die(&err);
}

static void fewshot_items_field(const tfm_eval_items *it, size_t i, tfm_buf *o)
{
    if (!it->k)
        return;
    tfm_buf_puts(o, ",\"shots\":[");
    for (int j = 0; j < it->k; j++)
        tfm_buf_printf(o, "%s%zu", j ? "," : "", it->picks[i * (size_t)it->k + (size_t)j]);
    tfm_buf_putc(o, ']');
}

static void fewshot_report(const app *a, const tfm_eval_items *it, const char *what)
{
    if (a->shots && it->n_cut && !a->quiet)
        fprintf(stderr, "%s: %zu of %zu %s with %ld demonstrations cut from the left to the "
                "model's context of %d tokens\n", prog, it->n_cut, it->n, what, a->shots,
                a->ev.context);
}

/* The items of in, as infer/eval.h reads them. */
static void read_items(app *a, const tfm_buf *in, int choice, tfm_eval_items *it)
{
    tfm_err err = {0};
    if (a->shots)
        fewshot_setup(a, in, choice);
    tfm_eval_items_opts o = {.tok = a->ev.tok, .scratch = a->scratch,
                             .bos = a->bos ? a->ev.bos : -1, .shots = a->shots ? &a->fs : NULL,
                             .block_size = a->ev.cfg.block_size,
                             .context = a->ev.context};
    if ((choice ? tfm_eval_choice_read : tfm_eval_lastword_read)(it, in->data, in->len, a->name,
                                                                 &o, &err) < 0)
        die(&err);
}

static void cmd_choice(app *a)
{
    tfm_err err = {0};
    need_tokenizer(a);
    tfm_buf in = {0};
    read_input(a, &in);
    tfm_eval_items it;
    read_items(a, &in, 1, &it);
    tfm_eval_seq *seqs = it.seqs;
    const size_t n_seq = it.n_seq, n_items = it.n;
    size_t targets = 0;
    for (size_t i = 0; i < n_seq; i++)
        targets += seqs[i].n_target;
    tfm_progress pr;
    tfm_progress_init(&pr, "choice", "tok", (double)targets, a->quiet);
    if (tfm_eval_score(&a->ev, seqs, n_seq, &pr, &err) < 0)
        die(&err);
    tfm_progress_end(&pr);
    tfm_eval_tally t;
    tfm_eval_choice_tally(&it, &t);
    for (size_t i = 0; a->items && i < n_items; i++) {
        const int *best = t.best + 3 * i;
        const size_t first = it.first[i], n = it.count[i];
        tfm_buf o = {0};
        tfm_buf_printf(&o, "{\"line\":%ld,\"label\":%lld,\"pred\":%d,\"pred_per_token\":%d,"
                       "\"pred_per_byte\":%d,\"logprobs\":[", it.line[i],
                       (long long)it.label[i], best[0], best[1], best[2]);
        for (size_t j = 0; j < n; j++) {
            tfm_buf_puts(&o, j ? "," : "");
            tfm_buf_put_json_double(&o, 8, seqs[first + j].logprob);
        }
        tfm_buf_puts(&o, "],\"tokens\":[");
        for (size_t j = 0; j < n; j++)
            tfm_buf_printf(&o, "%s%zu", j ? "," : "", seqs[first + j].n_target);
        tfm_buf_putc(&o, ']');
        fewshot_items_field(&it, i, &o);
        tfm_buf_puts(&o, "}\n");
        fwrite(o.data, 1, o.len, a->items->fp);
        tfm_buf_free(&o);
    }
    const size_t *right = t.right;
    const double *acc = t.acc, *se = t.acc_se;
    if (a->json) {
        printf("{\"model\":");
        tfm_buf o = {0};
        tfm_buf_put_json_string(&o, a->model_path, strlen(a->model_path));
        fwrite(o.data, 1, o.len, stdout);
        tfm_buf_free(&o);
        printf(",\"items\":%zu,\"acc\":%.8g,\"acc_stderr\":%.8g,\"acc_per_token\":%.8g,"
               "\"acc_per_token_stderr\":%.8g,\"acc_per_byte\":%.8g,\"acc_per_byte_stderr\":%.8g,"
               "\"correct\":%zu,\"correct_per_token\":%zu,\"correct_per_byte\":%zu,"
               "\"bos\":%s,\"seconds\":%.3f,\"tokens_per_second\":%.1f}\n",
               n_items, acc[0], se[0], acc[1], se[1], acc[2], se[2], right[0], right[1], right[2],
               a->bos && a->ev.bos >= 0 ? "true" : "false", a->ev.stat_seconds, rate(&a->ev));
    } else {
        printf("items\tacc\tacc_stderr\tacc_per_token\tacc_per_token_stderr\tacc_per_byte"
               "\tacc_per_byte_stderr\n");
        printf("%zu\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\n", n_items, acc[0], se[0], acc[1],
               se[1], acc[2], se[2]);
    }
    if (!a->quiet)
        fprintf(stderr, "%s: %zu items, %zu endings\n", prog, n_items, n_seq);
    fewshot_report(a, &it, "items");
    if (!a->quiet) {
        const char *what[3] = {"sum of log-probs ", "log-prob per token",
                               "log-prob per byte "};
        for (int m = 0; m < 3; m++)
            fprintf(stderr, "%s: accuracy by %s %.4f ± %.4f (%zu/%zu)\n", prog, what[m],
                    acc[m], se[m], right[m], n_items);
    }
    speed_line(a);
    tfm_eval_tally_free(&t);
    tfm_eval_items_free(&it);
    tfm_buf_free(&in);
}

/* ---- info ------------------------------------------------------------ */

static void cmd_info(const app *a)
{
    tfm_err err = {0};
    tfm_model_info mi;
    if (tfm_model_info_read(a->model_path, &mi, &err) < 0)
        die(&err);
    const tfm_model_config *c = &mi.cfg;
    char kind[64] = "tfm";
    if (mi.gguf)
        snprintf(kind, sizeof kind, "%s-gguf", mi.family);
    else if (!mi.tfm_file)
        snprintf(kind, sizeof kind, "%s-huggingface", mi.family ? mi.family : "gpt2");
    const char *tok = mi.has_tokenizer ? tfm_tok_kind_name(mi.tok_kind) : NULL;
    const char *sum = mi.checksum ? "verified" : "none";
    /* a fine-tuned model's label or tag set, as stored (JSON, one line) */
    tfm_buf task = {0};
    if (mi.tfm_file && tfm_lm_file_meta(a->model_path, "task", &task, &err) < 0)
        die(&err);
    tfm_buf o = {0};
    if (a->json) {
        tfm_buf_puts(&o, "{\"model\":");
        tfm_buf_put_json_string(&o, a->model_path, strlen(a->model_path));
        tfm_buf_printf(&o, ",\"kind\":\"%s\",\"model_kind\":\"%s\",\"positions\":\"%s\","
                       "\"bytes\":%zu,\"tensors\":%zu,\"parameters\":%zu,"
                       "\"n_layer\":%d,\"n_enc_layer\":%d,\"n_head\":%d,\"n_kv_head\":%d,\"head_dim\":%d,"
                       "\"attention_window\":%d,"
                       "\"n_embd\":%d,\"embedding_size\":%d,\"d_ff\":%d,\"block_size\":%d,"
                       "\"vocab_size\":%d,\"norm\":\"%s\",\"norm_type\":\"%s\",\"ffn\":\"%s\","
                       "\"attn_scale\":%s,\"bias\":%s,\"tied\":%s,\"weights\":\"%s\","
                       "\"prefix_lm\":%s,\"prefix_from\":%s,",
                       kind, tfm_kind_name(c->kind), tfm_pos_name(c->pos), mi.file_bytes,
                       mi.n_tensors, mi.n_params, c->n_layer, tfm_model_config_enc_layers(c),
                       c->n_head, tfm_model_config_kv_heads(c), tfm_model_config_head_dim(c),
                       c->window, c->n_embd, c->emb_dim,
                       tfm_model_config_ff(c), c->block_size, c->vocab_size,
                       c->ln == TFM_LN_PRE ? "pre" : "post",
                       tfm_norm_name(c->norm), tfm_ffn_name(c->ffn),
                       c->attn_unscaled ? "false" : "true",
                       c->bias ? "true" : "false", c->tie_embeddings ? "true" : "false",
                       mi.weights, mi.prefix_lm ? "true" : "false",
                       !mi.prefix_lm ? "null" : mi.prefix_pairs ? "\"pairs\"" : "\"random\"");
        /* an encoder-decoder's forced first token and sources' <s> (BART's) */
        if (c->forced_bos >= 0)
            tfm_buf_printf(&o, "\"forced_bos\":%d,", c->forced_bos);
        else
            tfm_buf_puts(&o, "\"forced_bos\":null,");
        if (c->forced_eos >= 0)
            tfm_buf_printf(&o, "\"forced_eos\":%d,", c->forced_eos);
        else
            tfm_buf_puts(&o, "\"forced_eos\":null,");
        /* the rates training would drop at (-1 keys resolved) */
        tfm_buf_printf(&o, "\"dropout\":%g,\"attn_dropout\":%g,\"emb_dropout\":%g,"
                       "\"ffn_dropout\":%g,\"final_dropout\":%g,", (double)c->dropout,
                       (double)(c->attn_dropout >= 0 ? c->attn_dropout : c->dropout),
                       (double)(c->emb_dropout >= 0 ? c->emb_dropout : c->dropout),
                       (double)c->ffn_dropout, (double)c->final_dropout);
        if (c->pos == TFM_POS_ROPE)
            tfm_buf_printf(&o, "\"rope\":{\"base\":%g,\"scaling\":\"%s\",\"factor\":%g,"
                           "\"low_freq_factor\":%g,\"high_freq_factor\":%g,"
                           "\"original_context\":%d},", (double)c->rope.base,
                           tfm_rope_scaling_name(c->rope.scaling), (double)c->rope.factor,
                           (double)c->rope.low_freq_factor, (double)c->rope.high_freq_factor,
                           c->rope.original_context);
        else
            tfm_buf_puts(&o, "\"rope\":null,");
        tfm_buf_printf(&o, "\"source_bos\":%s,\"step\":", c->source_bos ? "true" : "false");
        if (mi.step >= 0)
            tfm_buf_printf(&o, "%lld", (long long)mi.step);
        else
            tfm_buf_puts(&o, "null");
        if (tok)
            tfm_buf_printf(&o, ",\"tokenizer\":\"%s\",\"tokenizer_vocab\":%u", tok, mi.tok_vocab);
        else
            tfm_buf_puts(&o, ",\"tokenizer\":null,\"tokenizer_vocab\":null");
        tfm_buf_puts(&o, ",\"bos\":");
        if (mi.bos >= 0)
            tfm_buf_printf(&o, "%lld", (long long)mi.bos);
        else
            tfm_buf_puts(&o, "null");
        tfm_buf_puts(&o, ",\"eos\":");
        if (mi.eos >= 0)
            tfm_buf_printf(&o, "%lld", (long long)mi.eos);
        else
            tfm_buf_puts(&o, "null");
        tfm_buf_puts(&o, ",\"task\":");
        if (task.len)
            tfm_buf_append(&o, task.data, task.len);
        else
            tfm_buf_puts(&o, "null");
        tfm_buf_printf(&o, ",\"checksum\":\"%s\"}\n", sum);
    } else {
        tfm_buf_printf(&o, "model\t%s\nkind\t%s\nmodel_kind\t%s\npositions\t%s\nbytes\t%zu\n"
                       "tensors\t%zu\nparameters\t%zu\n"
                       "n_layer\t%d\nn_enc_layer\t%d\nn_head\t%d\nn_kv_head\t%d\nhead_dim\t%d\n"
                       "attention_window\t%d\nn_embd\t%d\nembedding_size\t%d\n"
                       "d_ff\t%d\nblock_size\t%d\nvocab_size\t%d\n"
                       "norm\t%s\nnorm_type\t%s\nffn\t%s\nattn_scale\t%s\n"
                       "bias\t%s\ntied\t%s\nweights\t%s\nprefix_lm\t%s\nprefix_from\t%s\n",
                       a->model_path, kind, tfm_kind_name(c->kind), tfm_pos_name(c->pos),
                       mi.file_bytes,
                       mi.n_tensors, mi.n_params, c->n_layer, tfm_model_config_enc_layers(c),
                       c->n_head, tfm_model_config_kv_heads(c), tfm_model_config_head_dim(c),
                       c->window, c->n_embd, c->emb_dim,
                       tfm_model_config_ff(c), c->block_size, c->vocab_size,
                       c->ln == TFM_LN_PRE ? "pre" : "post",
                       tfm_norm_name(c->norm), tfm_ffn_name(c->ffn),
                       c->attn_unscaled ? "false" : "true",
                       c->bias ? "true" : "false", c->tie_embeddings ? "true" : "false",
                       mi.weights, mi.prefix_lm ? "true" : "false",
                       !mi.prefix_lm ? "-" : mi.prefix_pairs ? "pairs" : "random");
        if (c->forced_bos >= 0)
            tfm_buf_printf(&o, "forced_bos\t%d\n", c->forced_bos);
        else
            tfm_buf_puts(&o, "forced_bos\t-\n");
        if (c->pos == TFM_POS_ROPE)
            tfm_buf_printf(&o, "rope_base\t%g\nrope_scaling\t%s\n", (double)c->rope.base,
                           tfm_rope_scaling_name(c->rope.scaling));
        if (c->pos == TFM_POS_ROPE && c->rope.scaling != TFM_ROPE_DEFAULT)
            tfm_buf_printf(&o, "rope_factor\t%g\n", (double)c->rope.factor);
        if (c->pos == TFM_POS_ROPE && c->rope.scaling == TFM_ROPE_LLAMA3)
            tfm_buf_printf(&o, "rope_low_freq_factor\t%g\nrope_high_freq_factor\t%g\n"
                           "rope_original_context\t%d\n", (double)c->rope.low_freq_factor,
                           (double)c->rope.high_freq_factor, c->rope.original_context);
        tfm_buf_printf(&o, "source_bos\t%s\n", c->source_bos ? "true" : "false");
        if (c->forced_eos >= 0)
            tfm_buf_printf(&o, "forced_eos\t%d\n", c->forced_eos);
        else
            tfm_buf_puts(&o, "forced_eos\t-\n");
        tfm_buf_printf(&o, "dropout\t%g\nattn_dropout\t%g\nemb_dropout\t%g\n"
                       "ffn_dropout\t%g\nfinal_dropout\t%g\n", (double)c->dropout,
                       (double)(c->attn_dropout >= 0 ? c->attn_dropout : c->dropout),
                       (double)(c->emb_dropout >= 0 ? c->emb_dropout : c->dropout),
                       (double)c->ffn_dropout, (double)c->final_dropout);
        if (mi.step >= 0)
            tfm_buf_printf(&o, "step\t%lld\n", (long long)mi.step);
        else
            tfm_buf_puts(&o, "step\t-\n");
        if (tok)
            tfm_buf_printf(&o, "tokenizer\t%s\ntokenizer_vocab\t%u\n", tok, mi.tok_vocab);
        else
            tfm_buf_puts(&o, "tokenizer\t-\ntokenizer_vocab\t-\n");
        if (mi.bos >= 0)
            tfm_buf_printf(&o, "bos\t%lld\n", (long long)mi.bos);
        else
            tfm_buf_puts(&o, "bos\t-\n");
        if (mi.eos >= 0)
            tfm_buf_printf(&o, "eos\t%lld\n", (long long)mi.eos);
        else
            tfm_buf_puts(&o, "eos\t-\n");
        tfm_buf_printf(&o, "task\t%s\n", task.len ? tfm_buf_cstr(&task) : "-");
        tfm_buf_printf(&o, "checksum\t%s\n", sum);
    }
    fwrite(o.data, 1, o.len, stdout);
    tfm_buf_free(&o);
    tfm_buf_free(&task);
}

/* ---- lastword -------------------------------------------------------- */

static void cmd_lastword(app *a)
{
    tfm_err err = {0};
    need_tokenizer(a);
    tfm_buf in = {0};
    read_input(a, &in);
    tfm_eval_items it;
    read_items(a, &in, 0, &it);
    tfm_eval_seq *seqs = it.seqs;
    const size_t n = it.n;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += seqs[i].n_target;
    tfm_progress pr;
    tfm_progress_init(&pr, "lastword", "tok", (double)total, a->quiet);
    if (tfm_eval_score(&a->ev, seqs, n, &pr, &err) < 0)
        die(&err);
    tfm_progress_end(&pr);
    tfm_eval_tally t;
    tfm_eval_lastword_tally(&it, &t);
    for (size_t i = 0; a->items && i < n; i++) {
        tfm_buf o = {0};
        tfm_buf_printf(&o, "{\"line\":%ld,\"correct\":%s,\"logprob\":", it.line[i],
                       seqs[i].greedy ? "true" : "false");
        tfm_buf_put_json_double(&o, 8, seqs[i].logprob);
        tfm_buf_printf(&o, ",\"tokens\":%zu", seqs[i].n_target);
        fewshot_items_field(&it, i, &o);
        tfm_buf_puts(&o, "}\n");
        fwrite(o.data, 1, o.len, a->items->fp);
        tfm_buf_free(&o);
    }
    const size_t right = t.right[0], targets = t.targets;
    const double acc = t.acc[0], se = t.acc_se[0], ppl = t.word_perplexity;
    if (a->json) {
        tfm_buf o = {0};
        tfm_buf_puts(&o, "{\"model\":");
        tfm_buf_put_json_string(&o, a->model_path, strlen(a->model_path));
        tfm_buf_printf(&o, ",\"passages\":%zu,\"correct\":%zu,\"acc\":%.8g,"
                       "\"acc_stderr\":%.8g,\"word_perplexity\":", n, right, acc, se);
        tfm_buf_put_json_double(&o, 8, ppl);
        tfm_buf_printf(&o, ",\"target_tokens\":%zu,\"bos\":%s,\"seconds\":%.3f,"
                       "\"tokens_per_second\":%.1f}\n", targets,
                       a->bos && a->ev.bos >= 0 ? "true" : "false", a->ev.stat_seconds,
                       rate(&a->ev));
        fwrite(o.data, 1, o.len, stdout);
        tfm_buf_free(&o);
    } else {
        printf("passages\tcorrect\tacc\tacc_stderr\tword_perplexity\ttarget_tokens\n");
        printf("%zu\t%zu\t%.6g\t%.6g\t%.8g\t%zu\n", n, right, acc, se, ppl, targets);
    }
    if (!a->quiet)
        fprintf(stderr, "%s: last-word accuracy %.4f ± %.4f (%zu/%zu passages), "
                "perplexity of the final words %.4f\n", prog, acc, se, right, n, ppl);
    fewshot_report(a, &it, "passages");
    speed_line(a);
    tfm_eval_tally_free(&t);
    tfm_eval_items_free(&it);
    tfm_buf_free(&in);
}

/* score, bleu, chrf and text need no model: cmd/eval-metrics.c; classify, tag
 * and span predict with a fine-tuned one: cmd/eval-task.c.  The command is
 * the first operand; options may come before it, so their values are
 * skipped.  Returns 1 for the first, 2 for the second, 3 for fill
 * (cmd/eval-fill.c), else 0. */
static int other_command(int argc, char **argv)
{
    static const char *const with_value[] = {
        "-m", "-t", "--model", "--adapter", "--tokenizer", "--context", "--stride", "--tokens", "--batch",
        "--threads", "--items", "--task", "--gold", "--ref", "--pos-label", "--tag-format",
        "--max-answer", "--max-labels", "-k", "--top-k", "--shots", "--shots-from", "--seed"};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--"))
            s = i + 1 < argc ? argv[i + 1] : "";
        else if (s[0] == '-' && s[1]) {
            for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
                if (!strcmp(s, with_value[k]))
                    i++;
            continue;
        }
        if (!strcmp(s, "score") || !strcmp(s, "bleu") || !strcmp(s, "chrf") ||
            !strcmp(s, "text"))
            return 1;
        if (!strcmp(s, "fill"))
            return 3;
        if (!strcmp(s, "reward"))
            return 4;
        return !strcmp(s, "classify") || !strcmp(s, "tag") || !strcmp(s, "span") ? 2 : 0;
    }
    return 0;
}

int main(int argc, char **argv)
{
    tfm_main_start(prog);
    argv[0] = (char *)prog; /* getopt names the program from it */
    int other = other_command(argc, argv);
    if (other == 1)
        return tfm_eval_metrics_main(argc, argv);
    if (other == 2)
        return tfm_eval_task_main(argc, argv);
    if (other == 3)
        return tfm_eval_fill_main(argc, argv);
    if (other == 4)
        return tfm_eval_reward_main(argc, argv);
    app a = {.input = "-", .bos = 1, .seed = 1234};
    long batch = 0, threads = 0;
    int c;
    while ((c = getopt_long(argc, argv, "m:t:qh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': a.model_path = optarg; break;
        case OPT_ADAPTER: a.adapter = optarg; break;
        case 't': a.tok_path = optarg; break;
        case OPT_ITEMS: a.items_path = optarg; break;
        case OPT_TOKEN_LP: a.token_lp_path = optarg; break;
        case OPT_CONTEXT: a.context = tfm_opt_long(prog, "--context", optarg, 2, 1L << 24); break;
        case OPT_STRIDE: a.stride = tfm_opt_long(prog, "--stride", optarg, 1, 1L << 24); break;
        case OPT_TOKENS: a.tokens_path = optarg; break;
        case OPT_SHOTS: a.shots = tfm_opt_long(prog, "--shots", optarg, 0, 1L << 20); break;
        case OPT_SHOTS_FROM: a.shots_from = optarg; break;
        case OPT_SEED: a.seed = tfm_opt_long(prog, "--seed", optarg, 0, 1L << 62); break;
        case OPT_NO_BOS: a.bos = 0; break;
        case OPT_JSON: a.json = 1; break;
        case OPT_BATCH: batch = tfm_opt_long(prog, "--batch", optarg, 1, 4096); break;
        case OPT_THREADS: threads = tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case 'q': a.quiet = 1; break;
        case 'h': usage();
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, long_opts); /* getopt said what */
        }
    }
    /* GNU getopt moves the operands to the end: options may come before
     * or after the command */
    if (optind >= argc)
        tfm_usage_error(prog, "missing command: perplexity, choice, lastword, info, score, "
                        "bleu, chrf, text, classify, tag, span, reward or fill");
    const char *cmd = argv[optind++];
    int which = !strcmp(cmd, "perplexity") ? 0 : !strcmp(cmd, "choice") ? 1
              : !strcmp(cmd, "lastword") ? 2 : !strcmp(cmd, "info") ? 3 : -1;
    if (which < 0)
        tfm_usage_error(prog, "unknown command '%s' (perplexity, choice, lastword, info, "
                        "score, bleu, chrf, text, classify, tag, span, reward, fill)", cmd);
    if (!a.model_path)
        tfm_usage_error(prog, "missing -m MODEL");
    if (optind < argc)
        a.input = argv[optind++];
    if (optind < argc)
        tfm_usage_error(prog, "one input file at most");
    if (a.items_path && which == 0)
        tfm_usage_error(prog, "--items is for choice and lastword");
    if (a.token_lp_path && which != 0)
        tfm_usage_error(prog, "--token-logprobs is for perplexity");
    if (a.tokens_path && which != 0)
        tfm_usage_error(prog, "--tokens is for perplexity");
    if ((a.shots || a.shots_from) && which != 1 && which != 2)
        tfm_usage_error(prog, "--shots and --shots-from are for choice and lastword");
    if (a.shots_from && !a.shots)
        tfm_usage_error(prog, "--shots-from needs --shots K");
    if ((a.context || a.stride) && which != 0)
        tfm_usage_error(prog, "--context and --stride are for perplexity");
    a.name = strcmp(a.input, "-") ? a.input : "stdin";
    if (which == 3) {
        /* the file as it is: nothing to run */
        if (a.tok_path || strcmp(a.input, "-"))
            tfm_usage_error(prog, "info takes only -m MODEL (and --json)");
        cmd_info(&a);
        return 0;
    }

    tfm_blas_init(tfm_opt_threads(prog, "--threads", threads));
    tfm_err err = {0};
    if (tfm_eval_open(&a.ev, a.model_path, a.adapter, (int)batch, &err) < 0)
        die(&err);
    if (tfm_model_unchecked(a.model_path))
        fprintf(stderr, "%s: warning: %s has no checksum: its integrity is not checked\n", prog,
                a.model_path);
    if (a.tok_path) {
        tfm_tokenizer *tok;
        if (tfm_model_tokenizer_load(&tok, a.tok_path, &err) < 0)
            die(&err);
        if (tfm_eval_set_tokenizer(&a.ev, tok, &err) < 0) {
            tfm_tokenizer_free(tok);
            tfm_err_prefix(&err, "%s", a.tok_path);
            die(&err);
        }
    }
    if (a.ev.tok)
        a.scratch = tfm_tok_scratch_new(a.ev.tok);
    tfm_out items;
    if (a.items_path) {
        if (tfm_out_open(&items, a.items_path, &err) < 0)
            die(&err);
        a.items = &items;
    }
    if (a.items_path || a.token_lp_path)
        tfm_out_install_signals();
    if (which == 0)
        cmd_perplexity(&a);
    else if (which == 1)
        cmd_choice(&a);
    else
        cmd_lastword(&a);
    tfm_check_stdout(prog);
    if (a.items && tfm_out_commit(a.items, &err) < 0)
        die(&err);
    if (a.scratch)
        tfm_tok_scratch_free(a.scratch);
    tfm_fewshot_free(&a.fs);
    tfm_eval_close(&a.ev);
    return 0;
}
