/* Writes a model file with random weights, for tests, man page examples and
 * the generation benchmark: the same layout tfm-train writes (weights, the
 * YAML config and optionally a character tokenizer in __metadata__).
 *
 *   mkmodel OUT.safetensors [--text FILE | --tokenizer FILE] [--layers L] [--heads H] [--embd C]
 *           [--context T] [--vocab V] [--seed S] [--scale X] [--post-ln] [--hf]
 *           [--nan] [--set KEY=VALUE ...]
 *
 * With --text, a character tokenizer is trained on FILE (plus <unk> and
 * <|endoftext|>) and sets the vocabulary; without it the file has no
 * tokenizer (prompts as --ids); --tokenizer stores any tokenizer file
 * (tfm_tokenizer_load: e.g. a WordPiece tokenizer.json) and takes its
 * size.  --scale multiplies the matrices so that a random model is not
 * almost uniform.  --hf writes the layout of a
 * HuggingFace GPT-2 checkpoint instead: "transformer."-prefixed names, no
 * metadata (so no config: the loader reads the shape off the tensors and
 * assumes 64-wide heads).  --nan makes every weight NaN: a diverged model,
 * for the tests of what programs print then.  --set overrides any config key
 * (tfm-config(5)) after the options above, e.g. model.positions=rope. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/opt.h"
#include "io/safetensors.h"
#include "model/file.h"
#include "model/file.h"
#include "train/run_config.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

static const char *prog = "mkmodel";

int main(int argc, char **argv)
{
    const char *text = NULL, *tok_path = NULL;
    long layers = 2, heads = 2, embd = 32, context = 64, vocab = 64, seed = 1;
    double scale = 1;
    int post = 0, hf = 0, nan = 0, n_sets = 0;
    const char *sets[16];
    static const struct option opts[] = {
        {"text", required_argument, 0, 't'}, {"layers", required_argument, 0, 'l'},
        {"heads", required_argument, 0, 'H'}, {"embd", required_argument, 0, 'c'},
        {"context", required_argument, 0, 'T'}, {"vocab", required_argument, 0, 'v'},
        {"seed", required_argument, 0, 's'}, {"scale", required_argument, 0, 'x'},
        {"post-ln", no_argument, 0, 'p'}, {"hf", no_argument, 0, 'f'},
        {"nan", no_argument, 0, 'N'}, {"set", required_argument, 0, 'S'},
        {"tokenizer", required_argument, 0, 'k'}, {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't': text = optarg; break;
        case 'k': tok_path = optarg; break;
        case 'S':
            if (n_sets < 16)
                sets[n_sets++] = optarg;
            break;
        case 'l': layers = tfm_opt_long(prog, "--layers", optarg, 1, 96); break;
        case 'H': heads = tfm_opt_long(prog, "--heads", optarg, 1, 96); break;
        case 'c': embd = tfm_opt_long(prog, "--embd", optarg, 1, 1 << 14); break;
        case 'T': context = tfm_opt_long(prog, "--context", optarg, 1, 1 << 16); break;
        case 'v': vocab = tfm_opt_long(prog, "--vocab", optarg, 1, 1 << 20); break;
        case 's': seed = tfm_opt_long(prog, "--seed", optarg, 0, 1L << 40); break;
        case 'x': scale = tfm_opt_double(prog, "--scale", optarg, 0, 1e6); break;
        case 'p': post = 1; break;
        case 'f': hf = 1; break;
        case 'N': nan = 1; break;
        default: tfm_usage_error(prog, "unknown option");
        }
    }
    if (optind + 1 != argc)
        tfm_usage_error(prog, "usage: mkmodel OUT.safetensors [options]");
    const char *out = argv[optind];
    tfm_err err = {0};

    tfm_tokenizer *tok = NULL;
    if (tok_path) {
        if (tfm_tokenizer_load(&tok, tok_path, &err) < 0)
            tfm_die(prog, &err);
        vocab = tfm_tokenizer_vocab_size(tok);
    } else if (text) {
        tfm_buf t = {0};
        FILE *fp = fopen(text, "rb");
        if (!fp) {
            tfm_err_errno(&err, "%s", text);
            tfm_die(prog, &err);
        }
        if (tfm_read_all(fp, text, &t, &err) < 0)
            tfm_die(prog, &err);
        fclose(fp);
        static const char *specials[] = {"<unk>", "<|endoftext|>"};
        tfm_tok_train_opts to = {.kind = TFM_TOK_CHAR, .vocab_size = 1 << 20,
                                 .specials = specials, .n_specials = 2,
                                 .lowercase = -1, .threads = 1};
        tfm_tok_trainer *tr = tfm_tok_trainer_new(&to);
        tfm_tok_trainer_feed(tr, t.data ? t.data : "", t.len);
        if (tfm_tok_trainer_finish(tr, &tok, &err) < 0)
            tfm_die(prog, &err);
        tfm_tok_trainer_free(tr);
        tfm_buf_free(&t);
        vocab = tfm_tokenizer_vocab_size(tok);
    }

    tfm_config cfg;
    tfm_config_defaults(&cfg);
    cfg.model.n_layer = layers;
    cfg.model.n_head = heads;
    cfg.model.n_embd = embd;
    cfg.model.block_size = context;
    cfg.model.vocab_size = vocab;
    cfg.model.dropout = 0;
    cfg.model.norm = post ? TFM_LN_POST : TFM_LN_PRE;
    for (int i = 0; i < n_sets; i++)
        if (tfm_config_set(&cfg, sets[i], &err) < 0)
            tfm_die(prog, &err);
    tfm_model_config g;
    if (tfm_model_config_from(&cfg, &g, &err) < 0)
        tfm_die(prog, &err);
    tfm_model m;
    if (tfm_model_init(&m, &g, &err) < 0)
        tfm_die(prog, &err);
    tfm_model_init_weights(&m, (uint64_t)seed);
    for (int i = 0; i < m.n_table; i++)
        if (m.table[i].ndim == 2)
            for (size_t j = 0; j < m.table[i].numel; j++)
                m.params[m.table[i].offset + j] *= (float)scale;
    if (nan)
        for (size_t j = 0; j < m.n_params; j++)
            m.params[j] = NAN;

    tfm_buf yaml = {0}, tj = {0};
    tfm_config_dump(&cfg, 0, &yaml);
    if (!hf) {
        /* as tfm-train writes it, checksum included */
        if (tok)
            tfm_tokenizer_to_json(tok, &tj);
        if (tfm_model_save(out, &m, tfm_buf_cstr(&yaml), tok ? tj.data : NULL, tj.len,
                                      0, &err) < 0)
            tfm_die(prog, &err);
        tfm_buf_free(&yaml);
        tfm_buf_free(&tj);
        tfm_model_free(&m);
        if (tok)
            tfm_tokenizer_free(tok);
        return 0;
    }
    tfm_safetensors_writer w;
    tfm_safetensors_writer_init(&w);
    for (int i = 0; i < m.n_table; i++) {
        char name[96];
        snprintf(name, sizeof name, "transformer.%s", m.table[i].name);
        tfm_safetensors_writer_add(&w, name, TFM_ST_F32, m.table[i].ndim,
                                   m.table[i].shape, m.params + m.table[i].offset);
    }
    if (tfm_safetensors_writer_write(&w, out, &err) < 0)
        tfm_die(prog, &err);
    tfm_safetensors_writer_free(&w);
    tfm_buf_free(&yaml);
    tfm_buf_free(&tj);
    tfm_model_free(&m);
    if (tok)
        tfm_tokenizer_free(tok);
    return 0;
}
