/* tfm-generate: continue prompts with a language model, or translate
 * sources with an encoder-decoder.
 * Options -> tfm_gen_opts -> tfm_gen_run (lib/infer/generate.h) -> stdout. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "base/rng.h"
#include "data/chat.h"
#include "infer/generate.h"
#include "infer/translate.h"
#include "model/forward.h"
#include "lm/info.h"
#include "tensor/gemm.h"
#include "tensor/q8.h"

static const char *prog = "tfm-generate";

static void __attribute__((noreturn)) usage(void)
{
    printf("Usage: %s -m MODEL.safetensors [options] [PROMPT]...\n"
           "Continue each PROMPT (or each line of stdin, also for '-') with a language model;\n"
           "with an encoder-decoder model, translate each (one translation a line).\n"
           "\n"
           "Input and output:\n"
           "  -m, --model FILE       model file written by tfm-train (weights, config and\n"
           "                         tokenizer in one safetensors file), or a GPT-2\n"
           "                         safetensors checkpoint (with --ids)\n"
           "      --adapter DIR      a LoRA adapter (PEFT's adapter_config.json and\n"
           "                         adapter_model.safetensors, as tfm-train writes them)\n"
           "                         merged into the model's weights at load\n"
           "      --prompt-file F    one prompt per line from F ('-': stdin)\n"
           "      --raw              all of the input is one prompt (newlines included)\n"
           "      --ids              prompts and output are token ids separated by spaces\n"
           "      --chat             each prompt is a user message in the ChatML template\n"
           "                         train.task sft applies, the answer the assistant's;\n"
           "                         generation also stops at <|im_end|>\n"
           "      --json             one JSON object per prompt: prompt, text, ids,\n"
           "                         logprobs, finish_reason, timings\n"
           "  -z, --null             end each text with a NUL byte instead of a newline, so\n"
           "                         that texts holding newlines can be told apart\n"
           "      --batch N          prompts decoded together (default 8; 1 for stdin, so\n"
           "                         each line is answered before the next is read;\n"
           "                         encoder-decoders: 32, 1 when stdin is a terminal)\n"
           "Strategy (default: sampling, --temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05):\n"
           "      --greedy           always the most probable token\n"
           "      --beam N           beam search with N beams\n"
           "      --lenpen A         beam: score = sum log p / length^A (default 0.6)\n"
           "      --lenpen-style S   plain (length^A, default) or gnmt (((5+length)/6)^A)\n"
           "      --nbest K          beam: print the K best hypotheses (default 1);\n"
           "                         encoder-decoders print index<TAB>rank<TAB>score<TAB>text\n"
           "      --temp T           sampling temperature (0 = greedy)\n"
           "      --top-k K          keep the K most probable tokens (0 = off)\n"
           "      --top-p P          keep the smallest set reaching probability P (1 = off)\n"
           "      --min-p P          keep tokens with p >= P * p_max (0 = off)\n"
           "      --repeat-penalty R penalise tokens already seen (1 = off)\n"
           "      --repeat-last-n N  only the last N tokens count for the penalty (0 = all)\n"
           "      --seed N           random seed (default: from the clock, logged)\n"
           "Length and stopping:\n"
           "  -n, --max-tokens N     new tokens at most (default 128)\n"
           "      --max-len-a A, --max-len-b B\n"
           "                         also stop after A * prompt tokens + B new tokens\n"
           "      --stop STR         stop before STR (repeatable; STR is not printed)\n"
           "      --ignore-eos       do not stop at the end-of-text token\n"
           "Encoder-decoders (translation; default --beam 4, -n 1024,\n"
           "--max-len-a 1 --max-len-b 50 with A * source tokens + B):\n"
           "      --truncate M       a source longer than the encoder's context: head (keep\n"
           "                         its start, count on stderr; default) or error (also\n"
           "                         a prefix LM of pairs' input)\n"
           "      --task-prefix STR  put STR before every source (also prefix LMs of pairs)\n"
           "                         instead of the model's data.prefix; '' for none\n"
           "      --split-special    special-token text in a source (T5's <extra_id_0>,\n"
           "                         BART's <mask>) is that token: infilling from text\n"
           "                         (a decoder's prompt always reads specials so)\n"
           "Other:\n"
           "      --no-cache         recompute the whole sequence for every token (slow;\n"
           "                         the baseline that shows what the cache saves)\n"
           "      --threads N        threads (default: TFM_NUM_THREADS or the usable CPUs)\n"
           "      --q8-gemm MODE     q8_0 files' whole-sequence products: in 8 bits (on),\n"
           "                         float32 on the widened weights (off), or the faster\n"
           "                         of the two per shape by a timing (auto; default)\n"
           "      --profile          time each part of the decode steps (stderr)\n"
           "      --bf16             decode with bfloat16 copies of the weight matrices:\n"
           "                         half the memory traffic, slightly different numbers\n"
           "      --q8               decode with 8-bit (Q8_0) copies of the weight matrices,\n"
           "                         multiplied in integers: about a quarter of the traffic\n"
           "  -q, --quiet            no messages or speed summary on stderr\n"
           "  -h, --help             this help\n"
           "      --version          print the version\n"
           "\n"
           "Generation stops at end-of-text, after N tokens, at a stop string, or when\n"
           "the model's context is full.  Exit status: 0 success, 1 failure, 2 usage.\n",
           prog);
    exit(0);
}

enum {
    OPT_PROMPT_FILE = 256, OPT_RAW, OPT_IDS, OPT_JSON, OPT_BATCH, OPT_GREEDY,
    OPT_BEAM, OPT_LENPEN, OPT_NBEST, OPT_TEMP, OPT_TOPK, OPT_TOPP, OPT_MINP,
    OPT_REPEAT, OPT_REPEAT_N, OPT_SEED, OPT_STOP, OPT_IGNORE_EOS, OPT_THREADS, OPT_Q8_GEMM,
    OPT_VERSION, OPT_NO_CACHE, OPT_PROFILE, OPT_BF16, OPT_Q8, OPT_MAX_LEN_A, OPT_MAX_LEN_B,
    OPT_LENPEN_STYLE, OPT_TRUNCATE, OPT_ADAPTER, OPT_TASK_PREFIX, OPT_SPLIT_SPECIAL, OPT_CHAT,
};

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"adapter", required_argument, 0, OPT_ADAPTER},
    {"prompt-file", required_argument, 0, OPT_PROMPT_FILE},
    {"raw", no_argument, 0, OPT_RAW},
    {"ids", no_argument, 0, OPT_IDS},
    {"chat", no_argument, 0, OPT_CHAT},
    {"json", no_argument, 0, OPT_JSON},
    {"null", no_argument, 0, 'z'},
    {"batch", required_argument, 0, OPT_BATCH},
    {"greedy", no_argument, 0, OPT_GREEDY},
    {"beam", required_argument, 0, OPT_BEAM},
    {"lenpen", required_argument, 0, OPT_LENPEN},
    {"lenpen-style", required_argument, 0, OPT_LENPEN_STYLE},
    {"truncate", required_argument, 0, OPT_TRUNCATE},
    {"task-prefix", required_argument, 0, OPT_TASK_PREFIX},
    {"split-special", no_argument, 0, OPT_SPLIT_SPECIAL},
    {"nbest", required_argument, 0, OPT_NBEST},
    {"temp", required_argument, 0, OPT_TEMP},
    {"temperature", required_argument, 0, OPT_TEMP},
    {"top-k", required_argument, 0, OPT_TOPK},
    {"top-p", required_argument, 0, OPT_TOPP},
    {"min-p", required_argument, 0, OPT_MINP},
    {"repeat-penalty", required_argument, 0, OPT_REPEAT},
    {"repeat-last-n", required_argument, 0, OPT_REPEAT_N},
    {"seed", required_argument, 0, OPT_SEED},
    {"max-tokens", required_argument, 0, 'n'},
    {"max-len-a", required_argument, 0, OPT_MAX_LEN_A},
    {"max-len-b", required_argument, 0, OPT_MAX_LEN_B},
    {"stop", required_argument, 0, OPT_STOP},
    {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
    {"no-cache", no_argument, 0, OPT_NO_CACHE},
    {"profile", no_argument, 0, OPT_PROFILE},
    {"bf16", no_argument, 0, OPT_BF16},
    {"q8", no_argument, 0, OPT_Q8},
    {"threads", required_argument, 0, OPT_THREADS},
    {"q8-gemm", required_argument, 0, OPT_Q8_GEMM},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

typedef struct app {
    tfm_lm lm;
    tfm_tok_scratch *scratch;
    int ids_mode, json, stream, quiet;
    double wbytes; /* bytes a weight as decode steps read it (--profile) */
    char end; /* what ends an output record: '\n', or '\0' with -z */
    tfm_gen gen;
    /* encoder-decoders */
    int encdec, nbest_tsv, truncate, split_special;
    int chat;                     /* --chat: prompts rendered by data/chat.h */
    tfm_lm_sources src;           /* how text becomes sources (infer/translate.h) */
    size_t n_cut, cut_tokens;     /* sources cut to the encoder's context */
    tfm_buf prefix;               /* the task prefix of every source */
} app;

/* Prompt text -> ids (or parses "12 7 99" with --ids): infer/generate.h's
 * rules; counts the sources cut. */
static int encode_prompt(app *a, const char *text, size_t len, tfm_ids *out,
                         const char *where, tfm_err *err)
{
    tfm_gen_prompt p = {.ids = a->ids_mode, .truncate = a->truncate, .scratch = a->scratch,
                        .src_tok = a->src.tok, .src_scratch = a->src.scratch,
                        .src_eos = a->src.eos, .prefix = a->prefix.data,
                        .prefix_len = a->prefix.len, .split_special = a->split_special};
    size_t cut = 0;
    tfm_buf chat = {0};
    if (a->chat) {
        tfm_chat_render_prompt(text, len, &chat);
        text = chat.data;
        len = chat.len;
    }
    int rc = tfm_gen_prompt_ids(&a->lm, &p, text, len, where, out, &cut, err);
    tfm_buf_free(&chat);
    if (rc < 0)
        return -1;
    if (cut) {
        a->n_cut++;
        a->cut_tokens += cut;
    }
    return 0;
}

static void on_text(void *ctx, size_t index, const char *text, size_t n)
{
    app *a = ctx;
    if (!a->stream)
        return;
    fwrite(text, 1, n, stdout);
    tfm_check_stdout(prog);
}

/* An --nbest line's text: tabs and newlines would break the record. */
static void put_tsv_text(tfm_buf *b, const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tfm_buf_putc(b, text[i] == '\t' || text[i] == '\n' || text[i] == '\r' ? ' ' : text[i]);
}

static void put_hyp_json(tfm_buf *b, const app *a, const tfm_gen_hyp *h, int beam)
{
    tfm_buf_puts(b, "\"text\":");
    tfm_buf_put_json_string(b, h->text.data ? h->text.data : "", h->text.len);
    /* ids and logprobs end with end-of-text when it ended the text, so
     * that they add up to the score */
    const int eos = h->finish == TFM_FINISH_EOS && a->lm.eos >= 0;
    tfm_buf_puts(b, ",\"ids\":[");
    for (size_t i = 0; i < h->ids.len; i++)
        tfm_buf_printf(b, "%s%u", i ? "," : "", h->ids.data[i]);
    if (eos)
        tfm_buf_printf(b, "%s%" PRId64, h->ids.len ? "," : "", a->lm.eos);
    tfm_buf_puts(b, "],\"logprobs\":[");
    for (size_t i = 0; i < h->ids.len; i++) {
        tfm_buf_puts(b, i ? "," : "");
        tfm_buf_put_json_double(b, 6, h->logprobs[i]); /* -inf: null */
    }
    if (eos) {
        tfm_buf_puts(b, h->ids.len ? "," : "");
        tfm_buf_put_json_double(b, 6, h->eos_logprob);
    }
    tfm_buf_printf(b, "],\"finish_reason\":\"%s\"", tfm_finish_name(h->finish));
    if (beam) {
        tfm_buf_puts(b, ",\"score\":");
        tfm_buf_put_json_double(b, 6, h->score);
    }
}

static void print_result(app *a, size_t index, const char *prompt, size_t plen,
                         const tfm_gen_result *r)
{
    tfm_buf b = {0};
    if (a->json) {
        /* translations always carry a score (greedy, sampling: sum log p) */
        int beam = a->gen.opts.strategy == TFM_GEN_BEAM || a->encdec;
        tfm_buf_printf(&b, "{\"%s\":", a->encdec ? "source" : "prompt");
        tfm_buf_put_json_string(&b, prompt, plen);
        tfm_buf_printf(&b, ",\"%s_tokens\":%zu,", a->encdec ? "source" : "prompt", r->n_prompt);
        if (r->n_hyps)
            put_hyp_json(&b, a, &r->hyps[0], beam);
        if (r->n_hyps > 1) {
            tfm_buf_puts(&b, ",\"nbest\":[");
            for (size_t k = 0; k < r->n_hyps; k++) {
                tfm_buf_puts(&b, k ? ",{" : "{");
                put_hyp_json(&b, a, &r->hyps[k], beam);
                tfm_buf_putc(&b, '}');
            }
            tfm_buf_putc(&b, ']');
        }
        tfm_buf_printf(&b, ",\"timings\":{\"prefill_s\":%.6f,\"decode_s\":%.6f}}\n",
                       r->prefill_s, r->decode_s);
    } else if (a->nbest_tsv) {
        for (size_t k = 0; k < r->n_hyps; k++) {
            const tfm_gen_hyp *h = &r->hyps[k];
            tfm_buf_printf(&b, "%zu\t%zu\t%.6f\t", index + 1, k + 1, h->score);
            if (a->ids_mode)
                for (size_t i = 0; i < h->ids.len; i++)
                    tfm_buf_printf(&b, "%s%u", i ? " " : "", h->ids.data[i]);
            else
                put_tsv_text(&b, h->text.data, h->text.len);
            tfm_buf_putc(&b, a->end);
        }
    } else {
        for (size_t k = 0; k < r->n_hyps; k++) {
            const tfm_gen_hyp *h = &r->hyps[k];
            if (a->ids_mode) {
                for (size_t i = 0; i < h->ids.len; i++)
                    tfm_buf_printf(&b, "%s%u", i ? " " : "", h->ids.data[i]);
            } else if (!(a->stream && k == 0)) {
                tfm_buf_append(&b, h->text.data, h->text.len);
            }
            tfm_buf_putc(&b, a->end);
        }
    }
    fwrite(b.data, 1, b.len, stdout);
    tfm_buf_free(&b);
    tfm_check_stdout(prog); /* stop at the first lost result, not after all */
}

/* Generates for prompts[0..n) (texts kept for --json) and prints them.
 * input: the file they are lines of, for messages (NULL: arguments). */
static void run(app *a, char **texts, size_t *lens, size_t n, size_t first_index,
                const char *input)
{
    tfm_err err = {0};
    tfm_ids *ids = tfm_calloc(n ? n : 1, sizeof *ids);
    a->gen.input = input; /* the library's messages name its lines too */
    for (size_t i = 0; i < n; i++) {
        char where[1100];
        if (input)
            snprintf(where, sizeof where, "%s:%zu", input, first_index + i + 1);
        else
            snprintf(where, sizeof where, "%s %zu", a->encdec ? "source" : "prompt",
                     first_index + i + 1);
        if (encode_prompt(a, texts[i], lens[i], &ids[i], where, &err) < 0)
            tfm_die(prog, &err);
    }
    tfm_gen_result *res = tfm_calloc(n ? n : 1, sizeof *res);
    if (tfm_gen_run(&a->gen, ids, n, first_index, res, on_text, a, &err) < 0)
        tfm_die(prog, &err);
    for (size_t i = 0; i < n; i++) {
        print_result(a, first_index + i, texts[i], lens[i], &res[i]);
        tfm_gen_result_free(&res[i]);
        tfm_ids_free(&ids[i]);
    }
    free(res);
    free(ids);
}

/* Where the decode time goes: per step, each phase's time and, for the
 * weight products, the rate at which it read the weights (batch of one
 * prompt: every weight once per step). */
static void print_profile(const app *a)
{
    const tfm_gen *g = &a->gen;
    const double n = (double)g->prof_steps;
    static const char *names[TFM_PROF_N] = {"qkv", "attention", "attn-proj", "mlp-fc",
                                            "mlp-proj", "lm-head", "other"};
    double bytes[TFM_PROF_N];
    tfm_gen_profile_bytes(&a->lm.cfg, a->wbytes, bytes);
    double total = 0;
    for (int p = 0; p < TFM_PROF_N; p++)
        total += g->prof_s[p];
    fprintf(stderr, "%s: decode step %.3f ms in the model (%zu steps):", prog, total / n * 1e3,
            g->prof_steps);
    for (int p = 0; p < TFM_PROF_N; p++) {
        fprintf(stderr, " %s %.3f ms", names[p], g->prof_s[p] / n * 1e3);
        if (bytes[p] > 0 && g->prof_s[p] > 0)
            fprintf(stderr, " (%.1f GB/s)", bytes[p] * n / g->prof_s[p] / 1e9);
        fprintf(stderr, p + 1 < TFM_PROF_N ? "," : "");
    }
    const char *pf = tfm_infer_prefetch(&g->infer);
    if (pf)
        fprintf(stderr, "; bf16 prefetch into %s (timed)", pf);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    tfm_main_start(prog);
    argv[0] = (char *)prog; /* getopt names the program from it */
    const char *model = NULL, *prompt_file = NULL, *adapter = NULL, *task_prefix = NULL;
    const char *q8_gemm = NULL;
    int raw = 0, batch = 0, threads = 0, have_seed = 0, bf16 = 0;
    size_t bf16_bytes = 0, q8_bytes = 0;
    int q8 = 0;
    int greedy = 0, beam = 0, sampling_opt = 0, beam_opt = 0, nbest_opt = 0;
    int have_n = 0, have_len_a = 0, have_len_b = 0, truncate = 1;
    uint64_t seed = 0;
    tfm_gen_opts o;
    tfm_gen_opts_default(&o);
    const char **stops = NULL;
    size_t n_stops = 0;
    app a = {.end = '\n'};

    int c;
    while ((c = getopt_long(argc, argv, "m:n:qzh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case OPT_ADAPTER: adapter = optarg; break;
        case OPT_PROMPT_FILE: prompt_file = optarg; break;
        case OPT_RAW: raw = 1; break;
        case OPT_IDS: a.ids_mode = 1; break;
        case OPT_CHAT: a.chat = 1; break;
        case OPT_JSON: a.json = 1; break;
        case OPT_BATCH: batch = (int)tfm_opt_long(prog, "--batch", optarg, 1, 256); break;
        case OPT_GREEDY: greedy = 1; break;
        case OPT_BEAM: beam = (int)tfm_opt_long(prog, "--beam", optarg, 1, 64); break;
        case OPT_LENPEN:
            o.beam.alpha = (float)tfm_opt_double(prog, "--lenpen", optarg, -10, 10);
            beam_opt = 1;
            break;
        case OPT_NBEST:
            o.beam.nbest = (int)tfm_opt_long(prog, "--nbest", optarg, 1, 64);
            beam_opt = nbest_opt = 1;
            break;
        case OPT_LENPEN_STYLE:
            if (strcmp(optarg, "plain") == 0)
                o.beam.lenpen = TFM_LENPEN_POWER;
            else if (strcmp(optarg, "gnmt") == 0)
                o.beam.lenpen = TFM_LENPEN_GNMT;
            else
                tfm_usage_error(prog, "--lenpen-style is plain or gnmt, not '%s'", optarg);
            beam_opt = 1;
            break;
        case OPT_TRUNCATE:
            if (strcmp(optarg, "head") == 0)
                truncate = 1;
            else if (strcmp(optarg, "error") == 0)
                truncate = 0;
            else
                tfm_usage_error(prog, "--truncate is head or error, not '%s'", optarg);
            break;
        case OPT_TASK_PREFIX: task_prefix = optarg; break;
        case OPT_SPLIT_SPECIAL: a.split_special = 1; break;
        case OPT_TEMP:
            o.sample.temperature = (float)tfm_opt_double(prog, "--temp", optarg, 0, 1e6);
            sampling_opt = 1;
            break;
        case OPT_TOPK:
            o.sample.top_k = (uint32_t)tfm_opt_long(prog, "--top-k", optarg, 0, 1L << 30);
            sampling_opt = 1;
            break;
        case OPT_TOPP: {
            double p = tfm_opt_double(prog, "--top-p", optarg, 0, 1);
            if (p <= 0)
                tfm_usage_error(prog, "--top-p must be in (0, 1]");
            o.sample.top_p = (float)p;
            sampling_opt = 1;
            break;
        }
        case OPT_MINP:
            o.sample.min_p = (float)tfm_opt_double(prog, "--min-p", optarg, 0, 1);
            sampling_opt = 1;
            break;
        case OPT_REPEAT:
            o.sample.repeat_penalty = (float)tfm_opt_double(prog, "--repeat-penalty", optarg, 1e-3, 1e3);
            sampling_opt = 1;
            break;
        case OPT_REPEAT_N:
            o.sample.repeat_last_n = (uint32_t)tfm_opt_long(prog, "--repeat-last-n", optarg, 0, 1L << 30);
            sampling_opt = 1;
            break;
        case OPT_SEED: {
            long v = tfm_opt_long(prog, "--seed", optarg, 0, 0x7fffffffffffffffL);
            seed = (uint64_t)v;
            have_seed = 1;
            break;
        }
        case OPT_MAX_LEN_A:
            o.max_len_a = tfm_opt_double(prog, "--max-len-a", optarg, 0, 1e6);
            have_len_a = 1;
            break;
        case OPT_MAX_LEN_B:
            o.max_len_b = (int)tfm_opt_long(prog, "--max-len-b", optarg, 0, 1 << 24);
            have_len_b = 1;
            break;
        case 'n':
            o.max_tokens = (int)tfm_opt_long(prog, "--max-tokens", optarg, 1, 1 << 24);
            have_n = 1;
            break;
        case OPT_STOP:
            if (!*optarg)
                tfm_usage_error(prog, "--stop needs a non-empty string");
            stops = tfm_realloc(stops, sizeof *stops * (n_stops + 1));
            stops[n_stops++] = optarg;
            break;
        case OPT_IGNORE_EOS: o.ignore_eos = 1; break;
        case OPT_NO_CACHE: o.no_cache = 1; break;
        case OPT_PROFILE: o.profile = 1; break;
        case OPT_BF16: bf16 = 1; break;
        case OPT_Q8: q8 = 1; break;
        case OPT_THREADS: threads = (int)tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case OPT_Q8_GEMM:
            tfm_fwd_q8_option(prog, optarg);
            q8_gemm = optarg;
            break;
        case 'q': a.quiet = 1; break;
        case 'z': a.end = '\0'; break;
        case 'h': usage();
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, long_opts); /* getopt said what */
        }
    }
    if (!model)
        tfm_usage_error(prog, "no model given (-m MODEL.safetensors)");
    /* "-" alone is stdin, as everywhere (tfm(7)), not a prompt */
    if (!prompt_file && optind == argc - 1 && strcmp(argv[optind], "-") == 0)
        optind++;
    if (a.json && a.end == '\0')
        tfm_usage_error(prog, "-z applies to text output, not --json (one line a record)");
    /* Strategies exclude each other's knobs: a beam has no temperature. */
    if (greedy && beam)
        tfm_usage_error(prog, "--greedy and --beam exclude each other");
    if ((greedy || beam) && sampling_opt)
        tfm_usage_error(prog, "sampling options (--temp, --top-k, --top-p, --min-p, "
                        "--repeat-penalty) do not apply to %s", beam ? "--beam" : "--greedy");
    if ((greedy || beam) && have_seed)
        tfm_usage_error(prog, "--seed does not apply to %s", beam ? "--beam" : "--greedy");
    if (raw && optind < argc)
        tfm_usage_error(prog, "--raw reads the prompt from the input, not the arguments");
    if (prompt_file && optind < argc)
        tfm_usage_error(prog, "give prompts as arguments or with --prompt-file, not both");
    if (bf16 && q8)
        tfm_usage_error(prog, "--bf16 and --q8 exclude each other");

    tfm_blas_init(tfm_opt_threads(prog, "--threads", threads));
    tfm_err err = {0};
    /* decoding reads 8-bit and bfloat16 matrices as stored: no float32 copy
     * (but --bf16 makes its copies from float32) */
    if (tfm_lm_open_flags(&a.lm, model, adapter, bf16 ? 0 : TFM_LM_STORED, &err) < 0)
        tfm_die(prog, &err);
    /* Translation's defaults: beam 4, length a·S + b with a = 1, b = 50 */
    a.encdec = a.lm.cfg.kind == TFM_KIND_ENCODER_DECODER;
    if (a.encdec) {
        if (!greedy && !beam && !sampling_opt) /* --no-cache too: only slower */
            beam = 4;
        if (!have_len_a)
            o.max_len_a = 1;
        if (!have_len_b)
            o.max_len_b = 50;
        if (!have_n)
            o.max_tokens = 1024;
        a.truncate = truncate;
        a.nbest_tsv = nbest_opt && !a.json;
    }
    /* a prefix LM of pairs reads its input as a source: cut as one */
    if (a.lm.prefix_pairs)
        a.truncate = truncate;
    if (beam_opt && !beam)
        tfm_usage_error(prog, "--lenpen, --lenpen-style and --nbest need --beam");
    if (beam && o.beam.nbest > beam)
        tfm_usage_error(prog, "--nbest %d is larger than --beam %d", o.beam.nbest, beam);
    if (greedy)
        o.strategy = TFM_GEN_GREEDY;
    if (beam) {
        o.strategy = TFM_GEN_BEAM;
        o.beam.beam = beam;
    }
    if (o.strategy == TFM_GEN_SAMPLE && o.sample.temperature == 0)
        o.strategy = TFM_GEN_GREEDY;
    if (a.chat) {
        if (a.ids_mode || a.encdec)
            tfm_usage_error(prog, "--chat renders text prompts for a decoder, not %s",
                            a.ids_mode ? "--ids" : "an encoder-decoder's sources");
        if (tfm_chat_template_check(model, &err) < 0)
            tfm_die(prog, &err);
        stops = tfm_realloc(stops, sizeof *stops * (n_stops + 1));
        stops[n_stops++] = "<|im_end|>";
    }
    o.stops = stops;
    o.n_stops = n_stops;
    if (tfm_model_unchecked(model))
        fprintf(stderr, "%s: warning: %s has no checksum: its integrity is not checked\n", prog,
                model);
    if (!a.lm.tok && !a.ids_mode)
        tfm_fatal(prog, "%s has no tokenizer: give prompts as token ids with --ids", model);
    if (n_stops && !a.lm.tok)
        tfm_usage_error(prog, "--stop needs a model with a tokenizer");
    if (a.lm.tok)
        a.scratch = tfm_tok_scratch_new(a.lm.tok);
    if (a.encdec) {
        if (tfm_lm_sources_open(&a.src, &a.lm, a.scratch, &err) < 0)
            tfm_die(prog, &err);
    }
    if (a.split_special && a.ids_mode)
        tfm_usage_error(prog, "--split-special reads special tokens in text, not --ids");
    if (task_prefix && a.ids_mode)
        tfm_usage_error(prog, "--task-prefix is text put before text prompts, not --ids");
    if (task_prefix && !a.encdec && !a.lm.prefix_pairs)
        tfm_usage_error(prog, "--task-prefix is for encoder-decoders and prefix LMs of pairs");
    if (task_prefix)
        tfm_buf_puts(&a.prefix, task_prefix);
    else if ((a.encdec || a.lm.prefix_pairs) && tfm_gen_task_prefix(model, &a.prefix, &err) < 0)
        tfm_die(prog, &err);
    if (bf16)
        bf16_bytes = tfm_weights_to_bf16(&a.lm.w, &a.lm.cfg);
    if (q8) /* from the float32 or stored bfloat16 matrices; stored 8-bit ones stay */
        q8_bytes = tfm_weights_to_q8(&a.lm.w, &a.lm.cfg);
    /* how decode steps read a weight: 8-bit (a half-precision scale per
     * 32), bf16 */
    const tfm_layer_weights *L0 = a.lm.w.n_layer > 0 ? &a.lm.w.layers[0] : NULL;
    const tfm_weight_dtype Q8 = TFM_WEIGHTS_Q8_0;
    const int eight = a.lm.w.lm_head.dtype == Q8 ||
                      (L0 && (L0->qkv_w.dtype == Q8 || L0->proj_w.dtype == Q8 ||
                              L0->fc_w.dtype == Q8 || L0->fcp_w.dtype == Q8));
    const int half = a.lm.w.lm_head.dtype == TFM_WEIGHTS_BF16;
    a.wbytes = eight ? 1 + 2.0 / TFM_Q8_BLOCK : half ? 2 : 4;
    if (q8_gemm && strcmp(q8_gemm, "auto") && !eight && !a.quiet)
        fprintf(stderr, "%s: warning: --q8-gemm %s does nothing: %s has no 8-bit (q8_0) "
                "matrices (--q8 makes them)\n", prog, q8_gemm, model);
    if (o.strategy == TFM_GEN_SAMPLE) {
        if (!have_seed) {
            seed = tfm_rng_entropy_seed() & 0x7fffffffffffffffULL;
            if (!a.quiet)
                fprintf(stderr, "%s: seed %" PRIu64 "\n", prog, seed);
        }
        o.seed = seed;
    }

    /* Where prompts come from decides batching: arguments and files are
     * read up front and batched; stdin lines one at a time, so that each
     * is answered before the next is read. */
    int from_stdin_lines = optind >= argc && !raw &&
                           (!prompt_file || strcmp(prompt_file, "-") == 0);
    if (!batch && a.encdec) /* throughput, unless someone is typing */
        batch = from_stdin_lines && isatty(0) ? 1 : 32;
    if (!batch)
        batch = from_stdin_lines ? 1 : 8;
    if (tfm_gen_init(&a.gen, &a.lm, &o, batch, &err) < 0)
        tfm_die(prog, &err);

    size_t count = 0;
    if (optind < argc) {
        size_t n = (size_t)(argc - optind);
        size_t *lens = tfm_malloc(sizeof *lens * n);
        for (size_t i = 0; i < n; i++)
            lens[i] = strlen(argv[optind + i]);
        a.stream = n == 1 && !a.json && !a.ids_mode && !a.nbest_tsv;
        run(&a, argv + optind, lens, n, 0, NULL);
        free(lens);
        count = n;
    } else if (raw) {
        tfm_buf in = {0};
        FILE *fp = stdin;
        const char *name = prompt_file ? prompt_file : "-";
        if (prompt_file && strcmp(prompt_file, "-") != 0 && !(fp = fopen(prompt_file, "rb"))) {
            tfm_err_errno(&err, "%s", prompt_file);
            tfm_die(prog, &err);
        }
        if (tfm_read_all(fp, strcmp(name, "-") ? name : "stdin", &in, &err) < 0)
            tfm_die(prog, &err);
        if (fp != stdin)
            fclose(fp);
        char *text = in.data ? in.data : (char *)"";
        size_t len = in.len;
        a.stream = !a.json && !a.ids_mode && !a.nbest_tsv;
        run(&a, &text, &len, 1, 0, strcmp(name, "-") ? name : "stdin");
        tfm_buf_free(&in);
        count = 1;
    } else {
        FILE *fp = stdin;
        if (prompt_file && strcmp(prompt_file, "-") != 0 && !(fp = fopen(prompt_file, "rb"))) {
            tfm_err_errno(&err, "%s", prompt_file);
            tfm_die(prog, &err);
        }
        a.stream = batch == 1 && !a.json && !a.ids_mode && !a.nbest_tsv;
        const char *input = prompt_file && strcmp(prompt_file, "-") ? prompt_file : "stdin";
        tfm_buf line = {0};
        char **texts = tfm_malloc(sizeof *texts * batch);
        size_t *lens = tfm_malloc(sizeof *lens * batch);
        size_t nb = 0;
        int r;
        while ((r = tfm_getline(fp, &line)) > 0) {
            if (line.len && line.data[line.len - 1] == '\r')
                line.len--;
            texts[nb] = tfm_strndup(line.data ? line.data : "", line.len);
            lens[nb] = line.len;
            if (++nb == (size_t)batch) {
                run(&a, texts, lens, nb, count, input);
                for (size_t i = 0; i < nb; i++)
                    free(texts[i]);
                count += nb;
                nb = 0;
            }
        }
        if (r < 0) {
            tfm_err_errno(&err, "%s", prompt_file && strcmp(prompt_file, "-") ? prompt_file : "stdin");
            tfm_die(prog, &err);
        }
        if (nb) {
            run(&a, texts, lens, nb, count, input);
            for (size_t i = 0; i < nb; i++)
                free(texts[i]);
            count += nb;
        }
        if (fp != stdin)
            fclose(fp);
        free(texts);
        free(lens);
        tfm_buf_free(&line);
    }

    if (!a.quiet && a.n_cut)
        fprintf(stderr, "%s: %zu %s%s longer than the %s context (%d tokens) cut to it: %zu "
                "token%s dropped (--truncate error refuses them)\n", prog, a.n_cut,
                a.encdec ? "source" : "input", a.n_cut == 1 ? "" : "s",
                a.encdec ? "encoder's" : "model's", tfm_gen_source_limit(&a.lm.cfg),
                a.cut_tokens, a.cut_tokens == 1 ? "" : "s");
    if (!a.quiet && a.encdec) {
        const tfm_gen *g = &a.gen;
        double t = g->stat_prefill_s + g->stat_decode_s;
        fprintf(stderr,
                "%s: %zu sentence%s, %zu source token%s, %zu output token%s in %.3f s "
                "(encoding %.3f s, decoding %.3f s); model %.1f MB mapped, cache %.1f MB, "
                "%d thread%s; %.1f sentences/s, %.1f tokens/s\n",
                prog, count, count == 1 ? "" : "s", g->stat_prompt_tokens,
                g->stat_prompt_tokens == 1 ? "" : "s", g->stat_out_tokens,
                g->stat_out_tokens == 1 ? "" : "s", t, g->stat_prefill_s, g->stat_decode_s,
                a.lm.file_bytes / 1e6, g->infer_ready ? tfm_infer_bytes(&g->infer) / 1e6 : 0.0,
                tfm_blas_threads(), tfm_blas_threads() == 1 ? "" : "s",
                t > 0 ? g->stat_seqs / t : 0.0, t > 0 ? g->stat_out_tokens / t : 0.0);
    } else if (!a.quiet) {
        const tfm_gen *g = &a.gen;
        char extra[96] = "";
        if (eight && q8_bytes)
            snprintf(extra, sizeof extra, " + %.1f MB 8-bit copy (%s kernel)", q8_bytes / 1e6,
                     tfm_q8_kernel_name(tfm_q8_kernel(), NULL));
        else if (eight)
            snprintf(extra, sizeof extra, " (8-bit weights, %s kernel)",
                     tfm_q8_kernel_name(tfm_q8_kernel(), NULL));
        else if (bf16)
            snprintf(extra, sizeof extra, " + %.1f MB bfloat16 copy", bf16_bytes / 1e6);
        fprintf(stderr,
                "%s: %zu prompt%s; prompt %zu token%s, %.1f tok/s; generated %zu token%s, "
                "%.1f tok/s; model %.1f MB mapped%s, cache %.1f MB, %d thread%s\n",
                prog, count, count == 1 ? "" : "s", g->stat_prompt_tokens,
                g->stat_prompt_tokens == 1 ? "" : "s",
                g->stat_prefill_s > 0 ? g->stat_prompt_tokens / g->stat_prefill_s : 0.0,
                g->stat_gen_tokens, g->stat_gen_tokens == 1 ? "" : "s",
                g->stat_decode_s > 0 ? g->stat_gen_tokens / g->stat_decode_s : 0.0,
                a.lm.file_bytes / 1e6, extra,
                g->infer_ready ? tfm_infer_bytes(&g->infer) / 1e6 : 0.0,
                tfm_blas_threads(), tfm_blas_threads() == 1 ? "" : "s");
    }
    if (o.profile && a.gen.prof_steps)
        print_profile(&a);
    tfm_gen_free(&a.gen);
    if (a.scratch)
        tfm_tok_scratch_free(a.scratch);
    tfm_lm_sources_close(&a.src);
    tfm_lm_close(&a.lm);
    tfm_buf_free(&a.prefix);
    free(stops);
    return 0;
}
