/* tfm-train: train a transformer (language model, masked LM, translation,
 * fine-tuning) from a YAML configuration.
 * Options -> tfm_config -> tfm_train_run; everything else is in lib/train. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "base/thread.h"
#include "infer/generate.h"
#include "infer/translate.h"
#include "model/file.h"
#include "model/lora.h"
#include "train/run_config.h"
#include "tensor/gemm.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/plot.h"
#include "train/train.h"

static const char *prog = "tfm-train";

static void usage(void)
{
    printf("Usage: %s -c CONFIG.yaml [--set KEY=VALUE]... [-o RUNDIR] [options]\n"
           "       %s --plot RUNDIR... -o OUT.svg\n"
           "       %s --merge-adapter ADAPTER_DIR BASE -o OUT.safetensors\n"
           "       %s --convert q8_0|bf16|f32 MODEL -o OUT.safetensors\n"
           "Train a transformer (language model, masked LM, sequence-to-sequence, or\n"
           "fine-tuning: train.task classify, tag, span); resume when RUNDIR holds a\n"
           "checkpoint.\n"
           "\n"
           "  -c, --config FILE    YAML configuration (see tfm-config(5)); optional when\n"
           "                       resuming (the run's own configuration is used) or\n"
           "                       when --set gives what the defaults lack\n"
           "      --set KEY=VALUE  override one key, e.g. --set optim.lr=3e-4 (repeatable;\n"
           "                       defaults < CONFIG < --set)\n"
           "  -o, --output DIR     run directory (default: run)\n"
           "      --dump-config    print the effective configuration as YAML and exit\n"
           "      --dump-batches N  print the first N training sequences as JSON lines\n"
           "                       (input_ids, input, target_ids, target) and exit\n"
           "      --list-keys      print every configuration key as TSV (key, type,\n"
           "                       default, range or choices, description) and exit\n"
           "      --steps N        stop after N steps in this invocation (saved; rerun to\n"
           "                       continue)\n"
           "      --fresh-optimizer  resume from the weights and step in RUNDIR's\n"
           "                       model.safetensors with a new optimizer state (when\n"
           "                       state.safetensors is damaged)\n"
           "      --seed N         same as --set train.seed=N\n"
           "      --threads N      threads (default: train.threads, TFM_NUM_THREADS, or\n"
           "                       usable CPUs)\n"
           "      --data-parallel WHEN  auto (default: small models), yes or no: each\n"
           "                       thread a replica with a share of the batch, or each\n"
           "                       matrix product split across the threads\n"
           "      --plot           draw the curves of the run directories given as\n"
           "                       arguments (their log.tsv) in one SVG, -o OUT.svg\n"
           "      --merge-adapter DIR  write the model BASE (a tfm file or HuggingFace\n"
           "                       checkpoint) with the LoRA adapter in DIR merged in\n"
           "                       (W += lora_alpha/r B A) as one model file, -o OUT\n"
           "      --convert DTYPE  write the model MODEL (a tfm file or HuggingFace\n"
           "                       checkpoint) with its matrices stored as DTYPE: q8_0\n"
           "                       (8-bit blocks of 32 with a scale each), bf16 or f32\n"
           "                       (as one model file, -o OUT)\n"
           "  -q, --quiet          no progress bar or messages on stderr\n"
           "  -h, --help           this help\n"
           "      --version        print the version\n"
           "\n"
           "Writes RUNDIR/model.safetensors (last), best.safetensors (lowest validation\n"
           "loss), state.safetensors (for resuming), log.tsv and curves.svg.  SIGINT/SIGTERM\n"
           "save a checkpoint and exit 0.  Exit status: 0 success, 1 failure, 2 usage.\n",
           prog, prog, prog, prog);
    exit(0);
}

static const char *const type_names[] = {"int", "float", "bool", "string", "enum"};

static void list_keys(void)
{
    size_t n;
    const tfm_schema_key *k = tfm_config_keys(&n);
    for (size_t i = 0; i < n; i++) {
        printf("%s\t%s\t%s\t", k[i].path, type_names[k[i].type], k[i].def);
        if (k[i].type == TFM_SCHEMA_ENUM)
            printf("%s", k[i].choices);
        else if (k[i].type == TFM_SCHEMA_INT || k[i].type == TFM_SCHEMA_FLOAT)
            printf("%.10g..%.10g", k[i].min, k[i].max);
        printf("\t%s\n", k[i].doc);
    }
    exit(0); /* the exit handler reports a write error */
}

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    stop_flag = 1;
    /* A second signal is not ignored: the user means it. */
    signal(sig, SIG_DFL);
}

static void message(void *ctx, const char *msg)
{
    if (!*(int *)ctx)
        fprintf(stderr, "%s: %s\n", prog, msg);
}

enum { OPT_SET = 256, OPT_DUMP, OPT_LIST, OPT_STEPS, OPT_SEED, OPT_THREADS, OPT_VERSION,
       OPT_FRESH, OPT_PLOT, OPT_DP, OPT_DUMP_BATCHES, OPT_MERGE, OPT_CONVERT };

int main(int argc, char **argv)
{
    tfm_main_start(prog);
    argv[0] = (char *)prog; /* getopt names the program from it */
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, OPT_SET},
        {"output", required_argument, NULL, 'o'},
        {"dump-config", no_argument, NULL, OPT_DUMP},
        {"list-keys", no_argument, NULL, OPT_LIST},
        {"dump-batches", required_argument, NULL, OPT_DUMP_BATCHES},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"fresh-optimizer", no_argument, NULL, OPT_FRESH},
        {"seed", required_argument, NULL, OPT_SEED},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"plot", no_argument, NULL, OPT_PLOT},
        {"merge-adapter", required_argument, NULL, OPT_MERGE},
        {"convert", required_argument, NULL, OPT_CONVERT},
        {"data-parallel", required_argument, NULL, OPT_DP},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = NULL, *rundir = "run", *merge = NULL, *convert = NULL;
    /* Static so that the early exits (usage, errors) leave it reachable. */
    static const char **sets;
    sets = calloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0, dump = 0, quiet = 0, threads = 0, fresh = 0, plot = 0, output_given = 0;
    int dp_given = 0;
    tfm_data_parallel dp = TFM_DP_AUTO;
    long steps = 0, dump_batches = 0;
    char seed_set[64];
    int c;
    while ((c = getopt_long(argc, argv, "c:o:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case 'o': rundir = optarg; output_given = 1; break;
        case 'q': quiet = 1; break;
        case 'h': usage(); break;
        case OPT_SET: sets[n_sets++] = optarg; break;
        case OPT_DUMP: dump = 1; break;
        case OPT_FRESH: fresh = 1; break;
        case OPT_PLOT: plot = 1; break;
        case OPT_MERGE: merge = optarg; break;
        case OPT_CONVERT: convert = optarg; break;
        case OPT_DP:
            if (!strcmp(optarg, "auto"))
                dp = TFM_DP_AUTO;
            else if (!strcmp(optarg, "yes"))
                dp = TFM_DP_YES;
            else if (!strcmp(optarg, "no"))
                dp = TFM_DP_NO;
            else
                tfm_usage_error(prog, "--data-parallel must be auto, yes or no");
            dp_given = 1;
            break;
        case OPT_LIST: list_keys(); break;
        case OPT_DUMP_BATCHES:
            dump_batches = tfm_opt_long(prog, "--dump-batches", optarg, 1, 1L << 40);
            break;
        case OPT_STEPS: steps = tfm_opt_long(prog, "--steps", optarg, 1, 1L << 62); break;
        case OPT_SEED:
            tfm_opt_long(prog, "--seed", optarg, -1, 1L << 62);
            snprintf(seed_set, sizeof seed_set, "train.seed=%s", optarg);
            sets[n_sets++] = seed_set;
            break;
        case OPT_THREADS: threads = (int)tfm_opt_long(prog, "--threads", optarg, 1, 4096); break;
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, longopts); /* getopt said what */
        }
    }
    if (convert) {
        /* a model file stored in another dtype: no training */
        tfm_weight_dtype dt;
        if (tfm_weight_dtype_parse(convert, &dt) < 0)
            tfm_usage_error(prog, "--convert must be q8_0, bf16 or f32");
        if (merge || plot || config_path || n_sets || dump || fresh || steps || threads ||
            dp_given || dump_batches)
            tfm_usage_error(prog, "--convert takes a model and -o OUT only");
        if (optind + 1 != argc)
            tfm_usage_error(prog, "--convert: give one model (a model file or HuggingFace "
                                  "folder)");
        if (!output_given || !*rundir)
            tfm_usage_error(prog, "--convert: no output file (-o OUT.safetensors)");
        tfm_err cerr = {0};
        if (tfm_model_convert_file(argv[optind], rundir, dt, &cerr) < 0)
            tfm_die(prog, &cerr);
        free(sets);
        return 0;
    }
    if (merge) {
        /* a model file from a base and an adapter: no training */
        if (plot || config_path || n_sets || dump || fresh || steps || threads || dp_given ||
            dump_batches)
            tfm_usage_error(prog, "--merge-adapter takes a base model and -o OUT only");
        if (optind + 1 != argc)
            tfm_usage_error(prog, "--merge-adapter: give one base model (a model file or "
                                  "HuggingFace folder)");
        if (!output_given || !*rundir)
            tfm_usage_error(prog, "--merge-adapter: no output file (-o OUT.safetensors)");
        tfm_err merr = {0};
        if (tfm_lora_merge_file(argv[optind], merge, rundir, &merr) < 0)
            tfm_die(prog, &merr);
        free(sets);
        return 0;
    }
    if (plot) {
        /* one plot of several runs: their log.tsv in, an SVG out */
        if (config_path || n_sets || dump || fresh || steps || threads || dp_given ||
            dump_batches)
            tfm_usage_error(prog, "--plot takes run directories and -o OUT.svg only");
        if (optind >= argc)
            tfm_usage_error(prog, "--plot: no run directory");
        if (!output_given || !*rundir)
            tfm_usage_error(prog, "--plot: no output file (-o OUT.svg)");
        tfm_err perr = {0};
        if (tfm_plot_write((const char *const *)argv + optind, argc - optind, rundir, &perr) < 0)
            tfm_die(prog, &perr);
        free(sets);
        return 0;
    }
    if (optind < argc)
        tfm_usage_error(prog, "unexpected argument '%s'", argv[optind]);
    if (!*rundir)
        tfm_usage_error(prog, "-o: empty run directory");

    tfm_config cfg;
    tfm_config_defaults(&cfg);
    tfm_err err = {0};
    if (config_path) {
        if (tfm_config_load_yaml(&cfg, config_path, &err) < 0)
            tfm_die(prog, &err);
    } else {
        /* Resuming: the run directory remembers its configuration (in the
         * model file too, for --fresh-optimizer when the state is damaged). */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.safetensors", rundir, fresh ? "model" : "state");
        struct stat st;
        if (stat(rundir, &st) == 0 && !S_ISDIR(st.st_mode))
            tfm_fatal(prog, "%s: not a directory", rundir);
        if (stat(path, &st) != 0) {
            /* a new run: the defaults and --set are a configuration too */
            if (!dump && n_sets == 0)
                tfm_usage_error(prog, "no configuration: give -c CONFIG.yaml or --set KEY=VALUE "
                                      "(or -o a run directory to resume)");
        } else if (tfm_train_run_config(rundir, fresh, &cfg, &err) < 0) {
            tfm_die(prog, &err);
        }
    }
    for (int i = 0; i < n_sets; i++)
        if (tfm_config_set(&cfg, sets[i], &err) < 0)
            tfm_usage_error(prog, "%s", err.msg); /* a bad argument: exit 2 */
    free(sets);
    if (dump) {
        tfm_buf b = {0};
        tfm_config_dump(&cfg, 1, &b);
        fwrite(b.data, 1, b.len, stdout);
        tfm_buf_free(&b);
        tfm_check_stdout(prog);
        return 0;
    }
    if (tfm_config_validate(&cfg, &err) < 0)
        tfm_die(prog, &err);
    if (dump_batches) {
        tfm_buf b = {0};
        if (tfm_train_dump_batches(&cfg, dump_batches, &b, &err) < 0)
            tfm_die(prog, &err);
        fwrite(b.data, 1, b.len, stdout);
        tfm_buf_free(&b);
        tfm_check_stdout(prog);
        return 0;
    }

    threads = threads ? tfm_opt_threads(prog, "--threads", threads)
                      : tfm_opt_threads(prog, "train.threads", (long)cfg.train.threads);
    tfm_blas_init(threads);
    /* Several processes when an MPI launcher started this one (mpirun -np N
     * tfm-train ...): the library shares the work among them. */
    tfm_dist_init();

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    tfm_train_opts o = {.rundir = rundir, .quiet = quiet, .run_steps = steps,
                        .fresh_optimizer = fresh,
                        .stop = &stop_flag, .message = message, .ctx = &quiet,
                        .translate = tfm_translate_greedy,
                        .sample = tfm_gen_sample_answers, .data_parallel = dp};
    tfm_train_result r;
    if (tfm_train_run(&cfg, &o, &r, &err) < 0)
        tfm_die(prog, &err); /* without tfm_dist_finalize: the launcher ends the other ranks */
    int rank = tfm_dist_rank(), ranks = tfm_dist_size();
    tfm_dist_finalize();
    /* without a step, the library's message said it all */
    if (!quiet && r.steps_run && rank == 0) {
        fprintf(stderr, "%s: step %lld/%lld  train loss %.4f", prog, (long long)r.step,
                (long long)cfg.train.max_steps, r.train_loss);
        int by_loss = cfg.train.best_by == TFM_CONFIG_BEST_LOSS;
        if (!isnan(r.val_loss))
            fprintf(stderr, by_loss ? "  val loss %.4f (best %.4f)" : "  val loss %.4f",
                    r.val_loss, r.best_val);
        if (!isnan(r.val_metric) && r.val_metric_name)
            fprintf(stderr, "  %s %.4g", r.val_metric_name, r.val_metric);
        if (!by_loss && !isnan(r.val_loss)) {
            char name[64];
            tfm_config_choice_name("train.best_by", cfg.train.best_by, name, sizeof name);
            fprintf(stderr, " (best %s %.4g)", name, r.best_higher ? -r.best_val : r.best_val);
        }
        if (r.steps_run)
            fprintf(stderr, "  %.1f ms/step on %d thread%s", r.ms_per_step, threads,
                    threads == 1 ? "" : "s");
        if (ranks > 1)
            fprintf(stderr, " in each of %d ranks", ranks);
        fprintf(stderr, "\n");
    }
    return 0;
}
