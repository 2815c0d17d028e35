# The T5 study's table of pre-training objectives, small, on the King James
# Bible, as make targets with real file dependencies:
#   the text (Debian's bible-kjv) -> a Unigram tokenizer with T5's sentinels
#   -> four models pre-trained on the text for the same steps and windows:
#        span    encoder-decoder, T5's span corruption (15% noise, mean
#                span 3, a sentinel per span)
#        bert    encoder-decoder, BERT-style denoising (15% of tokens: 80%
#                the mask, 10% a random token; the target the whole window)
#        prefix  decoder-only prefix LM (full attention over a random prefix)
#        lm      decoder-only causal LM
#   -> each fine-tuned text to text on three Bible tasks
#      (scripts/examples/bible-t2t), with the task prefix as data.prefix,
#      and the encoder-decoder fine-tuned from random weights (none: the
#      row without pre-training)
#   -> tfm-generate --greedy on each test split -> tfm-eval text -> a table
#
#   make -f scripts/examples/t5.mk                    # programs from PATH
#   make -f .../t5.mk BIN=/path/to/build OUT=run1     # programs of a build dir
#   make -f .../t5.mk PRE_STEPS=200 FT_STEPS=100      # a short trial run
#
# Variables (make VAR=value):
#   BIN        directory of the tfm programs (empty: from PATH)
#   OUT        where every file goes (default: t5)
#   ED_CONFIG  the encoder-decoder's YAML (default t5-small.yaml)
#   DEC_CONFIG the decoders' YAML (default t5-small-decoder.yaml)
#   VOCAB      Unigram vocabulary size, sentinels included (default 8000)
#   EXTRA_IDS  sentinels <extra_id_0> .. (default 100)
#   PRE_STEPS  pre-training steps of every objective (default: the
#              configs', 4000 of 32 windows of ~128 tokens)
#   FT_STEPS   fine-tuning steps of every (objective, task) (default 1000)
#   FT_BATCH   fine-tuning batch size (default 32)
#   FT_LR      fine-tuning peak learning rate (default 2e-3, as pre-training;
#              warmup 10%, cosine decay; not tuned)
#   TEST_LINES score N lines of each test split, evenly spread over it
#              (the splits are in Bible order; empty: all)
#   MAX_NEW    new tokens at most per answer (default 32)
#   DEC_CONTEXT  the decoders' context when fine-tuning (default 256: an
#              input and its answer; the encoder-decoder reads 128 source
#              and 128 target tokens; relative positions have no table, so
#              the context can grow)
#   THREADS    threads for every program (empty: all cores)
#   QUIET      -q to silence the programs' progress and summaries
#
# The tasks (OUT/t2t, input<TAB>target; splits of bible-tasks):
#   section  "section: " + verse                        -> section name
#   next     "next: sentence1: A sentence2: B"          -> next | other
#   begat    "question: " + question + " context: " + verse -> the answer
# The encoder-decoders fine-tune as seq2seq (train.task lm on the pairs),
# the decoders as prefix LMs of pairs (input + end-of-text the prefix):
# both read the input with full attention and are scored on the target
# only, so the rows differ by pre-training alone.
# Files in OUT: corpus.txt (a verse a line), tok.json, pre-OBJ/ (pre-training
# runs, with seconds: the wall time), OBJ-TASK/ (fine-tuning runs),
# OBJ-TASK.out (greedy outputs on the test split), OBJ-TASK.json (tfm-eval
# text), scores.tsv (the table, also printed; scripts/examples/t5-scores).
HERE := $(dir $(lastword $(MAKEFILE_LIST)))
BIN ?=
OUT ?= t5
ED_CONFIG ?= $(HERE)t5-small.yaml
DEC_CONFIG ?= $(HERE)t5-small-decoder.yaml
VOCAB ?= 8000
EXTRA_IDS ?= 100
PRE_STEPS ?=
FT_STEPS ?= 1000
FT_BATCH ?= 32
FT_LR ?= 2e-3
TEST_LINES ?=
MAX_NEW ?= 32
DEC_CONTEXT ?= 256
THREADS ?=
QUIET ?=

prefix = $(if $(BIN),$(BIN)/,)
TOKENIZE = $(prefix)tfm-tokenize
TRAIN = $(prefix)tfm-train
GENERATE = $(prefix)tfm-generate
EVAL = $(prefix)tfm-eval
threads = $(if $(THREADS),--threads $(THREADS),)
OBJECTIVES = span bert prefix lm
# the baseline row: the encoder-decoder fine-tuned from random weights
BASELINES = none
TASKS = section next begat

.PHONY: all clean
.DELETE_ON_ERROR:

all: $(OUT)/scores.tsv

$(OUT)/tasks/verses.tsv:
	mkdir -p $(OUT)/tasks
	$(HERE)bible-tasks $(OUT)/tasks > $(OUT)/tasks/counts.tsv

$(OUT)/t2t/begat.test.ref: $(OUT)/tasks/verses.tsv
	$(HERE)bible-t2t $(OUT)/tasks $(OUT)/t2t

$(OUT)/corpus.txt: $(OUT)/tasks/verses.tsv
	cut -f4 $< > $@

# byte fallback: the task prefixes' digits ("sentence1: ") are not in the
# KJV
$(OUT)/tok.json: $(OUT)/corpus.txt
	$(TOKENIZE) train $(QUIET) $(threads) -m unigram -v $(VOCAB) --byte-fallback \
	    --extra-ids $(EXTRA_IDS) -o $@ $<

# pre-training: the architecture and the task of each objective
arch_span = ED
arch_bert = ED
arch_prefix = DEC
arch_lm = DEC
arch_none = ED
pre_span = --set train.task=span-corruption
pre_bert = --set train.task=span-corruption --set train.noise=bert
pre_prefix = --set train.task=prefix-lm
pre_lm = --set train.task=lm
# fine-tuning: input<TAB>target pairs, the loss on the target
ft_ED = --set train.task=lm
ft_DEC = --set train.task=prefix-lm --set train.prefix_from=pairs \
    --set model.block_size=$(DEC_CONTEXT)
prefix_section = section:
prefix_next = next:
prefix_begat = question:

define pretrain
$(OUT)/pre-$(1)/model.safetensors: $(OUT)/corpus.txt $(OUT)/tok.json $($(arch_$(1))_CONFIG)
	rm -rf $(OUT)/pre-$(1)
	start=$$$$(date +%s); \
	$(TRAIN) $(QUIET) $(threads) -c $($(arch_$(1))_CONFIG) -o $(OUT)/pre-$(1) $(pre_$(1)) \
	    --set data.text=$(OUT)/corpus.txt --set data.tokenizer=$(OUT)/tok.json \
	    $(if $(PRE_STEPS),--set train.max_steps=$(PRE_STEPS),) && \
	echo $$$$(( $$$$(date +%s) - start )) > $(OUT)/pre-$(1)/seconds
endef
$(foreach o,$(OBJECTIVES),$(eval $(call pretrain,$(o))))

# a test file, or TEST_LINES of its lines evenly spread (the same for the
# inputs and the references)
test_lines = $(if $(TEST_LINES),awk -v n=$(TEST_LINES) -v t=$$$$(wc -l < $(1)) \
    'n >= t || int(NR * n / t) > int((NR - 1) * n / t)' $(1),cat $(1))

# (none: from random weights, the row without pre-training)
init = $(if $(filter none,$(1)),,$(OUT)/pre-$(1)/model.safetensors)
define finetune
$(OUT)/$(1)-$(2)/model.safetensors: $(call init,$(1)) $(OUT)/tok.json $(OUT)/t2t/begat.test.ref
	rm -rf $(OUT)/$(1)-$(2)
	$(TRAIN) $(QUIET) $(threads) -c $($(arch_$(1))_CONFIG) -o $(OUT)/$(1)-$(2) $(ft_$(arch_$(1))) \
	    $(if $(call init,$(1)),--set train.init=$(call init,$(1)),) \
	    --set data.tokenizer=$(OUT)/tok.json --set data.text=$(OUT)/t2t/$(2).train.tsv \
	    --set data.val=$(OUT)/t2t/$(2).valid.tsv --set 'data.prefix=$(prefix_$(2)) ' \
	    --set optim.lr=$(FT_LR) --set train.batch_size=$(FT_BATCH) \
	    --set train.max_steps=$(FT_STEPS) --set schedule.warmup=$$$$(( $(FT_STEPS) / 10 )) \
	    --set train.eval_interval=$(FT_STEPS) --set train.log_interval=25

# the test inputs without the prefix: the model file has it
$(OUT)/$(1)-$(2).out: $(OUT)/$(1)-$(2)/model.safetensors
	$(call test_lines,$(OUT)/t2t/$(2).test.in) | \
	    $(GENERATE) -q $(threads) -m $$< --greedy -n $(MAX_NEW) --batch 32 > $$@

$(OUT)/$(1)-$(2).json: $(OUT)/$(1)-$(2).out
	$(call test_lines,$(OUT)/t2t/$(2).test.ref) | \
	    $(EVAL) text -q --json --ref - $$< > $$@
endef
$(foreach o,$(OBJECTIVES) $(BASELINES),$(foreach t,$(TASKS),$(eval $(call finetune,$(o),$(t)))))

$(OUT)/scores.tsv: $(foreach o,$(OBJECTIVES) $(BASELINES),$(foreach t,$(TASKS),$(OUT)/$(o)-$(t).json))
	$(HERE)t5-scores $(OUT) > $@.tmp
	mv $@.tmp $@
	column -t -s '	' $@ 2>/dev/null || cat $@

clean:
	rm -rf $(OUT)
