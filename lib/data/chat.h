/* Instruction data (train.task sft; tfm-generate --chat): JSON Lines in
 * TRL's formats, the one chat template tfm applies, and the encoding that
 * says which tokens the loss counts, as TRL's SFTTrainer builds them.
 *
 *     tfm_chat_data d;
 *     tfm_chat_read_file(&d, "sft.jsonl", &err);
 *     tfm_ids ids = {0}, mask = {0};
 *     tfm_chat_encode(&d.ex[i], tok, scratch, &ids, &mask);  // mask[k] 1: a completion token
 *     tfm_chat_data_free(&d);
 *
 * Formats (one object a line, blank lines skipped; every error names
 * file:line):
 *   {"prompt": P, "completion": C}  strings: the text P + C + the
 *       end-of-text token's text (unless C ends with it), no template, as
 *       TRL does for plain text; the completion starts where the ids of P
 *       and of the whole text first differ (TRL's common_prefix_length).
 *   {"prompt": [messages], "completion": [messages]}  conversational: P
 *       rendered with the assistant's header (add_generation_prompt), and
 *       P + C rendered; the completion starts where their ids differ.
 *   {"messages": [{"role": R, "content": X}, ...]}  rendered; the loss on
 *       every token that overlaps an assistant message's content and its
 *       <|im_end|> (transformers' assistant mask of a {% generation %}
 *       block around them, which TRL's assistant_only_loss reads).  At
 *       least one assistant message.
 * A message is exactly {"role": string, "content": string}; any other key
 * in a line or a message is an error naming it.
 *
 * The template is ChatML, the one transformers' documentation writes out
 * and TRL's chat formats have used: model-neutral (its markers are text,
 * so no token has to be added to a vocabulary), unambiguous (a turn ends
 * with <|im_end|>), and the format Qwen's and many GPT-2-sized chat models
 * use:
 *     <|im_start|>ROLE\nCONTENT<|im_end|>\n      for each message
 *     <|im_start|>assistant\n                    with add_generation_prompt
 * A model folder's tokenizer_config.json chat_template (or its
 * chat_template.jinja) is accepted only when it is this template byte for
 * byte (tfm_chat_template, the Jinja text): tfm runs no Jinja, and any
 * other template is refused naming the file.  Text is encoded with
 * special tokens read (split_special), as transformers does.
 *
 * Ownership: the data owns its strings; an example points into them. */
#ifndef TFM_DATA_CHAT_H
#define TFM_DATA_CHAT_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"
#include "text/tokenizer.h"

/* The Jinja text of the template tfm applies (ChatML). */
extern const char tfm_chat_template[];

typedef struct tfm_chat_msg {
    char *role, *content;
} tfm_chat_msg;

typedef enum tfm_chat_format {
    TFM_CHAT_PROMPT_COMPLETION, /* strings */
    TFM_CHAT_CONVERSATION,      /* prompt and completion messages */
    TFM_CHAT_MESSAGES,
    TFM_CHAT_PREFERENCE,        /* prompt, chosen (completion), rejected */
    TFM_CHAT_PROMPT,            /* a prompt alone: a string, or messages */
} tfm_chat_format;

typedef struct tfm_chat_example {
    long line;
    tfm_chat_format format;
    char *prompt, *completion;      /* PROMPT_COMPLETION, PREFERENCE (chosen) */
    size_t prompt_len, completion_len;
    char *rejected;                 /* PREFERENCE */
    size_t rejected_len;
    tfm_chat_msg *msg;              /* CONVERSATION (prompt then completion), MESSAGES */
    size_t n_msg, n_prompt;         /* n_prompt: CONVERSATION's prompt messages */
} tfm_chat_example;

typedef struct tfm_chat_data {
    char name[1100];
    tfm_chat_example *ex;
    size_t n;
} tfm_chat_data;

/* preference 0: the formats above; 1: preferences (see below);
 * TFM_CHAT_READ_PROMPTS: prompts alone (see below). */
#define TFM_CHAT_READ_PROMPTS 2
int tfm_chat_read(tfm_chat_data *d, const char *text, size_t len, const char *name,
                  int preference, tfm_err *err);
/* The file at path ("-": stdin). */
int tfm_chat_read_file(tfm_chat_data *d, const char *path, int preference, tfm_err *err);
void tfm_chat_data_free(tfm_chat_data *d);

/* Appends the rendering of msg[0..n) to out; with spans, the byte ranges
 * [spans[2k], spans[2k+1]) of out that the assistant messages' content and
 * <|im_end|> take (*n_spans of them; spans holds 2·n). */
void tfm_chat_render(const tfm_chat_msg *msg, size_t n, int add_generation_prompt,
                     tfm_buf *out, size_t *spans, size_t *n_spans);
/* A prompt as one user message with the assistant's header after it:
 * what tfm-generate --chat gives the model. */
void tfm_chat_render_prompt(const char *prompt, size_t len, tfm_buf *out);

/* The example's ids (ids and mask cleared first): mask[k] is 1 for the
 * tokens the loss counts (see the top). */
void tfm_chat_encode(const tfm_chat_example *e, const tfm_tokenizer *tok,
                     tfm_tok_scratch *sc, tfm_ids *ids, tfm_ids *mask);

/* Preferences (train.task dpo and reward, tfm-eval reward): {"prompt": P,
 * "chosen": C, "rejected": R}, strings, C and R non-empty and different
 * (else an error naming the line).  Each answer is encoded as TRL's
 * DPOTrainer and RewardTrainer do: the ids of P + answer + the
 * end-of-text token's text (unless the answer ends with it) into chosen
 * and rejected; returns where the answers start, the shorter of the two
 * common prefixes of P's ids with them. */
size_t tfm_pref_encode(const tfm_chat_example *e, const tfm_tokenizer *tok,
                       tfm_tok_scratch *sc, tfm_ids *chosen, tfm_ids *rejected);
/* One answer so (a PROMPT_COMPLETION example's completion; tfm-eval
 * reward's single answers). */
void tfm_pref_encode_one(const tfm_chat_example *e, const tfm_tokenizer *tok,
                         tfm_tok_scratch *sc, tfm_ids *ids);

/* Prompts (train.task ppo): {"prompt": P}, TRL's prompt-only formats, P
 * a string (its ids as they are, as TRL's plain text) or a non-empty
 * array of messages (rendered with the assistant's header, as the sft
 * template's prompts); any other key is an error naming the line.  Their
 * ids into ids (cleared first). */
void tfm_chat_prompt_encode(const tfm_chat_example *e, const tfm_tokenizer *tok,
                            tfm_tok_scratch *sc, tfm_ids *ids);

/* The chat template of the model at path (a folder, or a file in one):
 * 0 when its tokenizer_config.json and chat_template.jinja name none or
 * tfm_chat_template; else an error naming the file. */
int tfm_chat_template_check(const char *path, tfm_err *err);

#endif
