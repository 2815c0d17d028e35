/* tfm-train's configuration: its keys and the checks between them; the
 * engine that reads and prints them is io/schema.c. */
#include "train/run_config.h"

#include "config.h"

#include <pthread.h>
#include <string.h>

#include "model/lora.h"

#define OFF(f) offsetof(tfm_config, f)
#define I64 9.2e18

/* The keys of the sections after the model's: data, optim, schedule, train (up
 * to train.init) ... */
static const tfm_schema_key run_keys[] = {
    {"optim.type", TFM_SCHEMA_ENUM, OFF(optim.type), "adamw", 0, 0, "adamw|adam",
     "adamw (decoupled weight decay) or adam (weight decay added to the gradient)"},
    {"optim.lr", TFM_SCHEMA_FLOAT, OFF(optim.lr), "0.001", 0, 1e6, NULL,
     "peak learning rate (for inverse_sqrt: a multiplier of the schedule)"},
    {"optim.beta1", TFM_SCHEMA_FLOAT, OFF(optim.beta1), "0.9", 0, 0.999999, NULL,
     "Adam first-moment decay"},
    {"optim.beta2", TFM_SCHEMA_FLOAT, OFF(optim.beta2), "0.999", 0, 0.999999999, NULL,
     "Adam second-moment decay"},
    {"optim.eps", TFM_SCHEMA_FLOAT, OFF(optim.eps), "1e-08", 0, 1, NULL,
     "Adam epsilon"},
    {"optim.weight_decay", TFM_SCHEMA_FLOAT, OFF(optim.weight_decay), "0", 0, 10, NULL,
     "weight decay, applied to matrices only (not biases, norms)"},
    {"optim.grad_clip", TFM_SCHEMA_FLOAT, OFF(optim.grad_clip), "1", 0, 1e9, NULL,
     "clip the global gradient norm to this value; 0 disables"},

    {"schedule.warmup", TFM_SCHEMA_INT, OFF(schedule.warmup), "0", 0, I64, NULL,
     "steps of linear warmup from 0 to optim.lr"},
    {"schedule.decay", TFM_SCHEMA_ENUM, OFF(schedule.decay), "cosine", 0, 0,
     "cosine|linear|constant|inverse_sqrt",
     "after warmup: cosine or linear to min_lr at max_steps, constant, or inverse_sqrt"},
    {"schedule.min_lr", TFM_SCHEMA_FLOAT, OFF(schedule.min_lr), "0", 0, 1e6, NULL,
     "final learning rate of cosine and linear decay"},

    {"train.batch_size", TFM_SCHEMA_INT, OFF(train.batch_size), "12", 1, 1048576, NULL,
     "sequences per micro-batch"},
    {"train.grad_accum", TFM_SCHEMA_INT, OFF(train.grad_accum), "1", 1, 65536, NULL,
     "micro-batches accumulated per optimizer step"},
    {"train.max_steps", TFM_SCHEMA_INT, OFF(train.max_steps), "1000", 0, I64, NULL,
     "optimizer steps in the whole run"},
    {"train.eval_interval", TFM_SCHEMA_INT, OFF(train.eval_interval), "200", 0, I64, NULL,
     "evaluate on the validation set every N steps (and at the end); 0: only at the end"},
    {"train.eval_batches", TFM_SCHEMA_INT, OFF(train.eval_batches), "20", 1, 1000000, NULL,
     "validation batches per evaluation (the same batches every time); encoder-decoders "
     "evaluate every validation pair"},
    {"train.checkpoint_interval", TFM_SCHEMA_INT, OFF(train.checkpoint_interval), "0", 0, I64,
     NULL, "save a checkpoint every N steps; 0: every train.eval_interval steps"},
    {"train.log_interval", TFM_SCHEMA_INT, OFF(train.log_interval), "10", 1, I64, NULL,
     "write a log.tsv line every N steps"},
    {"train.patience", TFM_SCHEMA_INT, OFF(train.patience), "0", 0, I64, NULL,
     "stop after N evaluations without a new best validation loss; 0: never"},
    {"train.seed", TFM_SCHEMA_INT, OFF(train.seed), "1337", -1, I64, NULL,
     "random seed for initialisation, batches and dropout; -1: from the clock (printed "
     "without -q, and kept in the run's configuration: tfm-train -o RUN --dump-config)"},
    {"train.threads", TFM_SCHEMA_INT, OFF(train.threads), "0", 0, 4096, NULL,
     "threads; 0: --threads, TFM_NUM_THREADS or the CPUs usable"},
    {"train.label_smoothing", TFM_SCHEMA_FLOAT, OFF(train.label_smoothing), "0", 0, 0.999,
     NULL, "label smoothing of the cross-entropy loss"},
    {"train.max_tokens", TFM_SCHEMA_INT, OFF(train.max_tokens), "0", 0, 1 << 30, NULL,
     "encoder-decoders: a micro-batch is a run of pairs of similar length (sorted) whose "
     "padded size, pairs x longest side, stays within N tokens; 0: train.batch_size pairs "
     "drawn at random"},
    {"train.bucket_mb", TFM_SCHEMA_FLOAT, OFF(train.bucket_mb), "25", 0, 1e6, NULL,
     "MPI ranks: the gradients are summed in buckets of whole tensors from the top of the "
     "model down, each at least this many MiB (0: a bucket a tensor) but the one that holds "
     "the blocks' bottom and the last, the embeddings"},
    {"train.overlap", TFM_SCHEMA_BOOL, OFF(train.overlap), "true", 0, 0, NULL,
     "MPI ranks: each bucket's all-reduce starts as soon as backward has finished its "
     "gradients, overlapping the rest of backward; false: all of them after backward (the "
     "same sums, bit for bit)"},
    {"train.eval_bleu", TFM_SCHEMA_BOOL, OFF(train.eval_bleu), "false", 0, 0, NULL,
     "encoder-decoders: each evaluation also translates validation sources greedily and "
     "scores corpus BLEU against their targets"},
    {"train.bleu_sentences", TFM_SCHEMA_INT, OFF(train.bleu_sentences), "500", 1, I64, NULL,
     "with train.eval_bleu: the first N validation pairs are translated"},
    {"train.best_by", TFM_SCHEMA_ENUM, OFF(train.best_by), "loss", 0, 0,
     "loss|bleu|masked_accuracy|nsp_accuracy|accuracy|macro_f1|pearson|entity_f1|"
     "token_accuracy|squad_f1|squad_em",
     "best.safetensors keeps the evaluation of the best value of this validation metric: "
     "the lowest loss, the highest of the others; the task must report it (a log.tsv "
     "column val_<metric>): bleu (seq2seq, needs train.eval_bleu), masked_accuracy "
     "(mlm), nsp_accuracy (mlm+nsp), accuracy and macro_f1 (classify), pearson "
     "(classify, regression), entity_f1 (tag, chunk tags) and token_accuracy (tag), "
     "squad_f1 and squad_em (span)"},
    {"train.init", TFM_SCHEMA_STRING, OFF(train.init), "", 0, 0, NULL,
     "a model file (or HuggingFace BERT checkpoint) that starts the run (fine-tuning): "
     "model keys left out take its shape, one that contradicts it is an error; new heads "
     "are initialised, and the start report names them"},
};

/* ... and those after train.prefix_from (model/config_keys.h declares
 * train.lora.*, train.task and train.prefix_from). */
static const tfm_schema_key run_keys_2[] = {
    {"train.noise_density", TFM_SCHEMA_FLOAT, OFF(train.noise_density), "0.15", 0.001, 0.999,
     NULL, "span-corruption: the share of a window's tokens in noise spans (round(density x "
     "length), at least 1, at most length - 1)"},
    {"train.mean_span", TFM_SCHEMA_FLOAT, OFF(train.mean_span), "3", 1, 1e6, NULL,
     "span-corruption: the mean noise span length (round(noise tokens / mean_span) spans, at "
     "least 1)"},
    {"train.noise", TFM_SCHEMA_ENUM, OFF(train.noise), "spans", 0, 0, "spans|iid|drop|bert",
     "span-corruption: the T5 study's objective: spans (random noise spans, a sentinel "
     "each), or each token noise with probability noise_density and iid (a sentinel per run "
     "of noise), drop (noise tokens dropped from the source, the target the dropped tokens) "
     "or bert (noise tokens become <extra_id_0>, random_token_prob of them a random token; "
     "the target the whole text)"},
    {"train.mask_ratio", TFM_SCHEMA_FLOAT, OFF(train.mask_ratio), "0.3", 0, 1, NULL,
     "denoise: the share of tokens planned in noise spans (ceil(ratio x length))"},
    {"train.poisson_lambda", TFM_SCHEMA_FLOAT, OFF(train.poisson_lambda), "3", 0.01, 50, NULL,
     "denoise: the mean of the Poisson span lengths; a length-0 span inserts a <mask>"},
    {"train.permute_sentences", TFM_SCHEMA_BOOL, OFF(train.permute_sentences), "true", 0, 0,
     NULL, "denoise: shuffle the sentences of each window (ends: . ! ? and line breaks)"},
    {"train.mask_prob", TFM_SCHEMA_FLOAT, OFF(train.mask_prob), "0.15", 0.001, 1, NULL,
     "mlm: the share of content positions chosen (round(p x length), at least 1)"},
    {"train.mask_token_prob", TFM_SCHEMA_FLOAT, OFF(train.mask_token_prob), "0.8", 0, 1, NULL,
     "mlm: a chosen position becomes [MASK] with this probability"},
    {"train.random_token_prob", TFM_SCHEMA_FLOAT, OFF(train.random_token_prob), "0.1", 0, 1,
     NULL, "mlm: a chosen position becomes a random non-special token with this probability "
     "(else it stays unchanged); denoise and span-corruption's noise bert: a noise span or "
     "token becomes one instead of the mask"},
    {"train.short_seq_prob", TFM_SCHEMA_FLOAT, OFF(train.short_seq_prob), "0.1", 0, 1, NULL,
     "mlm: with this probability a sequence aims at a uniform length in [2, block_size - 3] "
     "content tokens instead of filling the context, the rest padding (BERT's short "
     "sequences)"},
    {"train.whole_word_mask", TFM_SCHEMA_BOOL, OFF(train.whole_word_mask), "false", 0, 0, NULL,
     "mlm: choose whole words (a WordPiece token and its ## continuations; for BPE, from a "
     "token that starts with a space to the next), not single tokens; needs data.tokenizer"},
    {"train.beta", TFM_SCHEMA_FLOAT, OFF(train.beta), "0.1", 1e-6, 1e6, NULL,
     "dpo: β, how far the policy may move from the reference (TRL's default 0.1)"},
    {"train.reference", TFM_SCHEMA_STRING, OFF(train.reference), "", 0, 0, NULL,
     "dpo, ppo: the frozen reference model (a model file or folder of the policy's "
     "architecture); empty: train.init"},
    {"train.reward_model", TFM_SCHEMA_STRING, OFF(train.reward_model), "", 0, 0, NULL,
     "ppo: the frozen reward model (train.task reward's file) that scores each whole "
     "answer; its vocabulary is the policy's"},
    {"train.kl_coef", TFM_SCHEMA_FLOAT, OFF(train.kl_coef), "0.05", 0, 1e6, NULL,
     "ppo: the per-token KL penalty's coefficient, reward - kl_coef x (log pi - log pi_ref) "
     "(TRL's 0.05)"},
    {"train.gamma", TFM_SCHEMA_FLOAT, OFF(train.gamma), "1", 0, 1, NULL,
     "ppo: GAE's discount (TRL's 1)"},
    {"train.lam", TFM_SCHEMA_FLOAT, OFF(train.lam), "0.95", 0, 1, NULL,
     "ppo: GAE's lambda (TRL's 0.95)"},
    {"train.cliprange", TFM_SCHEMA_FLOAT, OFF(train.cliprange), "0.2", 0, 10, NULL,
     "ppo: the surrogate's clip on the ratio pi/pi_old, [1 - c, 1 + c] (TRL's 0.2)"},
    {"train.cliprange_value", TFM_SCHEMA_FLOAT, OFF(train.cliprange_value), "0.2", 0, 1e6,
     NULL, "ppo: the value loss's clip around the rollout's values (TRL's 0.2)"},
    {"train.vf_coef", TFM_SCHEMA_FLOAT, OFF(train.vf_coef), "0.1", 0, 1e6, NULL,
     "ppo: the value loss's weight in the loss (TRL's 0.1)"},
    {"train.ppo_epochs", TFM_SCHEMA_INT, OFF(train.ppo_epochs), "4", 1, 1000, NULL,
     "ppo: passes over each rollout batch (TRL's num_ppo_epochs 4)"},
    {"train.minibatches", TFM_SCHEMA_INT, OFF(train.minibatches), "1", 1, 1 << 20, NULL,
     "ppo: optimizer steps per pass, each on a share of the rollout's train.batch_size "
     "answers (TRL's num_mini_batches 1); a rollout is ppo_epochs x minibatches steps"},
    {"train.max_new_tokens", TFM_SCHEMA_INT, OFF(train.max_new_tokens), "53", 1, 1 << 20,
     NULL, "ppo: the longest answer sampled, in tokens (TRL's response_length 53)"},
    {"train.temperature", TFM_SCHEMA_FLOAT, OFF(train.temperature), "1", 0.01, 100, NULL,
     "ppo: the sampling temperature of the answers (the log-probabilities are the model's "
     "own)"},
    {"train.top_k", TFM_SCHEMA_INT, OFF(train.top_k), "0", 0, 1 << 30, NULL,
     "ppo: sample among the k most probable tokens only; 0: all"},
    {"train.lm_weight", TFM_SCHEMA_FLOAT, OFF(train.lm_weight), "0.5", 0, 100, NULL,
     "classify on a decoder: the weight of the language-model loss on the examples' text "
     "added to the classifier's (GPT's lambda); 0: none"},
    {"train.class_balance", TFM_SCHEMA_FLOAT, OFF(train.class_balance), "0", 0, 1, NULL,
     "classify with labels: a training example is drawn with probability proportional to "
     "n_c^-q, n_c its class's count in the training split: 0 draws every example alike, "
     "0.5 is square-root sampling, 1 draws every class alike (small classes seen more "
     "often: macro F1 for accuracy)"},
};

#define NRUN (sizeof run_keys / sizeof run_keys[0])
#define NRUN2 (sizeof run_keys_2 / sizeof run_keys_2[0])

/* One table in --dump-config's order: the model's keys, then the others. */
static tfm_schema_key keys[TFM_CONFIG_MAX_KEYS];
static size_t nkeys;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void keys_join(void)
{
    size_t nm, nd, nl;
    const tfm_schema_key *mk = tfm_model_keys_table(&nm);
    const tfm_schema_key *dk = tfm_data_keys_table(&nd);
    const tfm_schema_key *lk = tfm_lora_keys_table(&nl);
    const tfm_schema_part parts[] = {
        {mk, nm, offsetof(tfm_config, model)},
        {dk, nd, offsetof(tfm_config, data)},
        {run_keys, NRUN, 0},
        {lk, nl, offsetof(tfm_config, train.lora)},
        {tfm_task_key(), 1, offsetof(tfm_config, train.task)},
        {tfm_prefix_from_key(), 1, offsetof(tfm_config, train.prefix_from)},
        {run_keys_2, NRUN2, 0},
    };
    nkeys = tfm_schema_join(keys, TFM_CONFIG_MAX_KEYS, parts, sizeof parts / sizeof parts[0]);
}

static const tfm_schema_alias aliases[] = {
    {"learning_rate", "optim.lr"}, {"layers", "model.n_layer"},
    {"heads", "model.n_head"},     {"d_model", "model.n_embd"},
    {"context", "model.block_size"}, {"seq_len", "model.block_size"},
    {"clip", "optim.grad_clip"},   {"steps", "train.max_steps"},
    {"warmup_steps", "schedule.warmup"}, {"epsilon", "optim.eps"},
};

static tfm_schema schema_;

static void schema_init(void)
{
    keys_join();
    schema_ = (tfm_schema){keys, nkeys, sizeof(tfm_config), offsetof(tfm_config, given),
                           "model, data, optim, schedule or train", aliases,
                           sizeof aliases / sizeof aliases[0], 0};
}

const tfm_schema *tfm_config_schema(void)
{
    pthread_once(&keys_once, schema_init);
    return &schema_;
}

const tfm_schema_key *tfm_config_keys(size_t *n)
{
    const tfm_schema *s = tfm_config_schema();
    *n = s->n;
    return s->keys;
}

const tfm_schema_key *tfm_config_find(const char *path)
{
    return tfm_schema_find(tfm_config_schema(), path);
}

void tfm_config_defaults(tfm_config *c)
{
    tfm_schema_defaults(tfm_config_schema(), c);
}

int tfm_config_apply_yaml(tfm_config *c, const char *text, size_t len, const char *name,
                          tfm_err *err)
{
    return tfm_schema_apply_yaml(tfm_config_schema(), c, text, len, name, err);
}

int tfm_config_load_yaml(tfm_config *c, const char *path, tfm_err *err)
{
    return tfm_schema_load_yaml(tfm_config_schema(), c, path, err);
}

int tfm_config_set(tfm_config *c, const char *assignment, tfm_err *err)
{
    return tfm_schema_set(tfm_config_schema(), c, assignment, err);
}

void tfm_config_dump(const tfm_config *c, int comments, tfm_buf *out)
{
    tfm_schema_dump(tfm_config_schema(), c, comments, out);
}

int tfm_config_given(const tfm_config *c, const char *path)
{
    return tfm_schema_given(tfm_config_schema(), c, path);
}

const char *tfm_config_suggest(const char *path)
{
    return tfm_schema_suggest(tfm_config_schema(), path);
}

const char *tfm_config_choice_name(const char *path, int value, char *buf, size_t size)
{
    return tfm_schema_choice_name(tfm_config_schema(), path, value, buf, size);
}

int tfm_config_validate(const tfm_config *c, tfm_err *err)
{
    if (tfm_model_keys_check(&c->model, err) < 0)
        return -1;
    int dec = c->model.kind == TFM_KIND_DECODER;
    int ed = c->model.kind == TFM_KIND_ENCODER_DECODER;
    const char *kind = dec ? "decoder" : ed ? "encoder-decoder" : "encoder";
    if (!dec && c->data.packing)
        return tfm_err_set(err, "data.packing with model.kind %s: packing is for decoders",
                           kind);
    int pairs = c->data.source[0] || c->data.target[0] || c->data.val_source[0] ||
                c->data.val_target[0] || c->data.source_tokenizer[0];
    if (!ed && pairs)
        return tfm_err_set(err, "data.source/target/val_source/val_target/source_tokenizer with "
                           "model.kind %s: "
                           "parallel data is for encoder-decoders (use data.text or data.train)",
                           kind);
    if (!ed && (c->train.max_tokens || c->train.eval_bleu ||
                c->train.best_by == TFM_CONFIG_BEST_BLEU))
        return tfm_err_set(err, "train.max_tokens, train.eval_bleu and train.best_by bleu are "
                           "for encoder-decoders, not model.kind %s", kind);
    /* the pre-training tasks of encoder-decoders: raw text corrupted */
    int sc = c->train.task == TFM_CONFIG_TASK_SPAN_CORRUPTION ||
             c->train.task == TFM_CONFIG_TASK_DENOISE;
    const char *scn = c->train.task == TFM_CONFIG_TASK_DENOISE ? "denoise" : "span-corruption";
    if (sc && !ed)
        return tfm_err_set(err, "train.task %s needs model.kind encoder-decoder, not %s", scn,
                           kind);
    if (sc && (pairs || c->train.eval_bleu))
        return tfm_err_set(err, "train.task %s reads raw text (data.text, data.val): data."
                           "source/target/val_source/val_target/source_tokenizer and "
                           "train.eval_bleu are for train.task lm", scn);
    /* prefix-lm: the prefix mask of a causal stack */
    int plm = c->train.task == TFM_CONFIG_TASK_PREFIX_LM;
    if (plm && !dec)
        return tfm_err_set(err, "train.task prefix-lm needs model.kind decoder (full attention "
                           "over a prefix of a causal stack), not %s%s", kind,
                           ed ? " (its encoder reads the whole source already: use lm on "
                           "pairs, or span-corruption)" : "");
    int dpo = c->train.task == TFM_CONFIG_TASK_DPO;
    int rwd = c->train.task == TFM_CONFIG_TASK_REWARD;
    if (rwd && !dec)
        return tfm_err_set(err, "train.task reward needs model.kind decoder (its score is read "
                           "at the answer's last token), not %s", kind);
    if (rwd && c->data.packing)
        return tfm_err_set(err, "data.packing with train.task reward: a row is one answer");
    int ppo = c->train.task == TFM_CONFIG_TASK_PPO;
    if (!dpo && !ppo && c->train.reference[0])
        return tfm_err_set(err, "train.reference is for train.task dpo and ppo");
    if (!ppo && c->train.reward_model[0])
        return tfm_err_set(err, "train.reward_model is for train.task ppo");
    if (ppo && !dec)
        return tfm_err_set(err, "train.task ppo needs model.kind decoder (the policy samples "
                           "answers), not %s", kind);
    if (ppo && !c->train.init[0])
        return tfm_err_set(err, "train.task ppo needs train.init: the policy to start from "
                           "(the SFT model), and its reference unless train.reference names one");
    if (ppo && !c->train.reward_model[0])
        return tfm_err_set(err, "train.task ppo needs train.reward_model: the reward model "
                           "(train.task reward's) that scores the answers");
    if (ppo && c->data.packing)
        return tfm_err_set(err, "data.packing with train.task ppo: a row is one answer");
    if (ppo && (c->train.label_smoothing > 0 || c->train.grad_accum > 1))
        return tfm_err_set(err, "train.label_smoothing and train.grad_accum with train.task ppo: "
                           "its loss reads each token's log-probability, and a minibatch is "
                           "one step (train.minibatches)");
    if (ppo && c->train.lora.r > 0)
        return tfm_err_set(err, "train.lora.r with train.task ppo: the answers are sampled "
                           "from the model's own weights, which LoRA's adapters are not "
                           "merged into (fine-tune the whole model)");
    if (ppo && c->train.batch_size % c->train.minibatches)
        return tfm_err_set(err, "train.batch_size %lld is not a multiple of train.minibatches "
                           "%lld (each step takes an equal share of the rollout)",
                           (long long)c->train.batch_size, (long long)c->train.minibatches);
    if (dpo && !dec)
        return tfm_err_set(err, "train.task dpo needs model.kind decoder (it scores answers "
                           "by their log-probabilities), not %s", kind);
    if (dpo && !c->train.init[0])
        return tfm_err_set(err, "train.task dpo needs train.init: the model to align, and its "
                           "reference unless train.reference names one");
    if (dpo && c->data.packing)
        return tfm_err_set(err, "data.packing with train.task dpo: a row is one answer");
    if (dpo && c->train.label_smoothing > 0)
        return tfm_err_set(err, "train.label_smoothing with train.task dpo: the loss reads "
                           "the answers' log-probabilities");
    if (c->train.task == TFM_CONFIG_TASK_SFT || dpo || rwd || ppo) {
        const char *tn = dpo ? "dpo" : rwd ? "reward" : ppo ? "ppo" : "sft";
        if (!dec)
            return tfm_err_set(err, "train.task sft needs model.kind decoder (it learns to "
                               "continue a prompt), not %s", kind);
        if (c->data.train[0] || !c->data.text[0])
            return tfm_err_set(err, "train.task %s reads JSON Lines examples from data.text "
                               "(and data.val)%s", tn, c->data.train[0] ? ", not token ids "
                               "(data.train)" : ": set data.text");
        if (!c->data.tokenizer[0] && !c->train.init[0])
            return tfm_err_set(err, "train.task %s needs a tokenizer: data.tokenizer, or "
                               "train.init's", tn);
    }
    if (plm && c->data.packing)
        return tfm_err_set(err, "data.packing with train.task prefix-lm: a row is one prefix "
                                "and its continuation, not packed documents");
    if (!plm && c->train.prefix_from != TFM_CONFIG_PREFIX_RANDOM)
        return tfm_err_set(err, "train.prefix_from is for train.task prefix-lm");
    if (plm && c->train.prefix_from == TFM_CONFIG_PREFIX_PAIRS && !c->data.text[0])
        return tfm_err_set(err, "train.prefix_from pairs reads input<TAB>target lines from "
                                "data.text (with data.tokenizer), not token ids");
    /* a task prefix is text put before each pair's source or input */
    if (c->data.prefix[0] && !(ed && c->train.task == TFM_CONFIG_TASK_LM) &&
        !(plm && c->train.prefix_from == TFM_CONFIG_PREFIX_PAIRS))
        return tfm_err_set(err, "data.prefix is for pairs: model.kind encoder-decoder with "
                                "train.task lm, or train.task prefix-lm with train.prefix_from "
                                "pairs");
    if ((c->train.task == TFM_CONFIG_TASK_LM || sc || plm) &&
        (c->train.whole_word_mask || c->data.documents != TFM_CONFIG_DOCS_BLANK_LINE))
        return tfm_err_set(err, "train.whole_word_mask and data.documents are for train.task "
                                "mlm and mlm+nsp");
    if (c->train.best_by == TFM_CONFIG_BEST_BLEU && !c->train.eval_bleu)
        return tfm_err_set(err, "train.best_by bleu needs train.eval_bleu true");
    if (c->train.class_balance > 0 && c->train.task != TFM_CONFIG_TASK_CLASSIFY)
        return tfm_err_set(err, "train.class_balance is for train.task classify");
    if (ed) {
        if (c->data.train[0] && sc)
            return tfm_err_set(err, "data.train with train.task %s: give the raw text as "
                               "data.text (with data.tokenizer)", scn);
        if (c->data.train[0])
            return tfm_err_set(err, "data.train with model.kind encoder-decoder: give pairs as "
                               "data.text (source<TAB>target lines) or data.source and "
                               "data.target");
        if (!c->data.tokenizer[0] && !c->train.init[0]) /* or train.init's */
            return tfm_err_set(err, "model.kind encoder-decoder needs data.tokenizer (one "
                               "tokenizer for both sides, with an end-of-text token)");
        if (c->data.source_tokenizer[0] && c->model.tie_source)
            return tfm_err_set(err, "data.source_tokenizer with model.tie_source true: a "
                               "source vocabulary of its own needs its own embedding (set "
                               "model.tie_source false)");
        if (!!c->data.source[0] != !!c->data.target[0])
            return tfm_err_set(err, "data.source and data.target go together");
        if (!!c->data.val_source[0] != !!c->data.val_target[0])
            return tfm_err_set(err, "data.val_source and data.val_target go together");
        if (c->data.source[0] && c->data.text[0])
            return tfm_err_set(err, "data.text and data.source/data.target are exclusive: "
                               "set one of them");
        if (c->data.val_source[0] && c->data.val[0])
            return tfm_err_set(err, "data.val and data.val_source/data.val_target are "
                               "exclusive: set one of them");
        if (!c->data.text[0] && !c->data.source[0])
            return tfm_err_set(err, sc ? "no training data: set data.text (the text to "
                               "corrupt)" : "no training data: set data.text (source<TAB>target "
                               "lines) or data.source and data.target");
    }
    int ft = c->train.task == TFM_CONFIG_TASK_CLASSIFY || c->train.task == TFM_CONFIG_TASK_TAG ||
             c->train.task == TFM_CONFIG_TASK_SPAN;
    if (ft) {
        char task[16];
        tfm_config_choice_name("train.task", c->train.task, task, sizeof task);
        if (ed)
            return tfm_err_set(err, "train.task %s with model.kind encoder-decoder: fine-tuning "
                               "is for encoders%s", task,
                               c->train.task == TFM_CONFIG_TASK_CLASSIFY ? " and decoders" : "");
        if (c->train.task != TFM_CONFIG_TASK_CLASSIFY && dec)
            return tfm_err_set(err, "train.task %s with model.kind decoder: it needs an encoder "
                               "(every position sees the whole text)", task);
        if (c->data.train[0])
            return tfm_err_set(err, "data.train with train.task %s: give the examples as "
                               "data.text (data.train holds token ids)", task);
        if (!c->data.text[0])
            return tfm_err_set(err, "no training data: set data.text (the examples of train.task "
                               "%s)", task);
        if (!c->data.tokenizer[0] && !c->train.init[0])
            return tfm_err_set(err, "train.task %s needs a tokenizer: data.tokenizer, or "
                               "train.init's", task);
    }
    if (!ed && !c->data.train[0] && !c->data.text[0])
        return tfm_err_set(err, "no training data: set data.train (a .npy token file) or "
                                "data.text with data.tokenizer");
    if (c->data.train[0] && c->data.text[0])
        return tfm_err_set(err, "data.train and data.text are exclusive: set one of them");
    /* train.init's own tokenizer serves (train/train.c checks it has one) */
    if (c->data.text[0] && !c->data.tokenizer[0] && !c->train.init[0])
        return tfm_err_set(err, "data.text needs data.tokenizer");
    if (c->schedule.decay != TFM_CONFIG_DECAY_INVERSE_SQRT &&
        c->schedule.min_lr > c->optim.lr)
        return tfm_err_set(err, "schedule.min_lr (%g) is above optim.lr (%g)", c->schedule.min_lr,
                           c->optim.lr);
    if (c->schedule.decay == TFM_CONFIG_DECAY_INVERSE_SQRT && c->schedule.warmup == 0)
        return tfm_err_set(err, "schedule.decay inverse_sqrt needs schedule.warmup > 0");
    return 0;
}

/* ---- model files ---------------------------------------------------- */

int tfm_model_config_from(const tfm_config *c, tfm_model_config *g, tfm_err *err)
{
    if (tfm_model_config_from_keys(&c->model, &c->train.lora, g, err) < 0)
        return -1;
    g->label_smoothing = (float)c->train.label_smoothing; /* the schema's range is the model's */
    return 0;
}

static int file_config(const char *path, tfm_config *c, tfm_err *err)
{
    return tfm_model_file_apply_config(path, tfm_config_schema(), c, err);
}

int tfm_model_file_config(const char *path, tfm_config *c, tfm_err *err)
{
    int has = file_config(path, c, err);
    if (has == 0)
        return tfm_err_set(err, "%s: no 'config' in __metadata__", path);
    return has < 0 ? -1 : 0;
}

int tfm_model_load(const char *path, tfm_config *c, tfm_model *m, tfm_tokenizer **tok,
                   tfm_err *err)
{
    return tfm_model_load_adapter(path, NULL, c, m, tok, err);
}

int tfm_model_load_adapter(const char *path, const char *adapter, tfm_config *c, tfm_model *m,
                           tfm_tokenizer **tok, tfm_err *err)
{
    tfm_model_file_keys k;
    if (tfm_model_load_keys_adapter(path, adapter, &k, m, tok, err) < 0)
        return -1;
    /* a tfm file's whole configuration; a HuggingFace checkpoint has none */
    tfm_config_defaults(c);
    if (!k.stored) {
        c->model = k.model;
        /* a BERT folder's task head (BertForSequenceClassification, ...):
         * the file it is converted to stays fine-tuned for that task */
        if (k.task == TFM_CONFIG_TASK_CLASSIFY || k.task == TFM_CONFIG_TASK_TAG ||
            k.task == TFM_CONFIG_TASK_SPAN)
            c->train.task = k.task;
    } else if (file_config(path, c, err) < 0) {
        tfm_model_free(m);
        if (tok && *tok) {
            tfm_tokenizer_free(*tok);
            *tok = NULL;
        }
        return -1;
    }
    m->cfg.label_smoothing = (float)c->train.label_smoothing;
    return 0;
}

/* Writes the model loaded from in, with configuration c, to out. */
static int resave(const char *in, const tfm_config *c, const tfm_model *m,
                  const tfm_tokenizer *tok, const char *out, tfm_weight_dtype dt, tfm_err *err)
{
    tfm_buf yaml = {0};
    tfm_config_dump(c, 0, &yaml);
    int rc = tfm_model_resave(in, tfm_buf_cstr(&yaml), m, tok, out, dt, err);
    tfm_buf_free(&yaml);
    return rc;
}

int tfm_model_convert_file(const char *in, const char *out, tfm_weight_dtype dt, tfm_err *err)
{
    tfm_config c;
    tfm_model m;
    tfm_tokenizer *tok = NULL;
    if (tfm_model_load(in, &c, &m, &tok, err) < 0)
        return -1;
    int rc = resave(in, &c, &m, tok, out, dt, err);
    if (tok)
        tfm_tokenizer_free(tok);
    tfm_model_free(&m);
    return rc;
}

int tfm_lora_merge_file(const char *base, const char *dir, const char *out, tfm_err *err)
{
    tfm_config c;
    tfm_model m;
    tfm_tokenizer *tok = NULL;
    if (tfm_model_load_adapter(base, dir, &c, &m, &tok, err) < 0)
        return -1;
    c.train.lora.r = 0; /* the adapters are in the weights now */
    int rc = resave(base, &c, &m, tok, out, TFM_WEIGHTS_F32, err);
    if (tok)
        tfm_tokenizer_free(tok);
    tfm_model_free(&m);
    return rc;
}
