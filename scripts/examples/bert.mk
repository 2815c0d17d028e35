# BERT on the King James Bible, end to end, as make targets with real file
# dependencies:
#   the text (Debian's bible-kjv) -> WordPiece -> masked-LM + NSP pre-training
#   -> four fine-tuning tasks (scripts/examples/bible-tasks), each trained
#   from the pre-trained model and from random weights -> test-set scores
#
#   make -f scripts/examples/bert.mk                  # programs from PATH
#   make -f .../bert.mk BIN=/path/to/build OUT=run1   # programs of a build dir
#   make -f .../bert.mk PRE_STEPS=200 FT_STEPS=100    # a short trial run
#
# Variables (make VAR=value):
#   BIN        directory of the tfm programs (empty: from PATH)
#   OUT        where every file goes (default: bert)
#   CONFIG     the pre-training YAML (default bible-bert.yaml); fine-tuning
#              uses it too, with the task's heads
#   VOCAB      WordPiece vocabulary size (default 8000)
#   PRE_STEPS  pre-training steps (default: the config's, 12000)
#   FT_EPOCHS  fine-tuning passes over each task's training split (default 4)
#   FT_MIN_STEPS  at least this many steps per task (default 300: the small
#              begat task gets more passes)
#   FT_STEPS   fixed fine-tuning steps of every task (empty: from FT_EPOCHS)
#   FT_BATCH   fine-tuning batch size (default 32)
#   FT_LR      fine-tuning peak learning rate (default 5e-4; warmup 10%,
#              linear decay)
#   FT_CLASS_BALANCE  train.class_balance of the classification tasks
#              (default 0: every example alike; 1: every class alike, which
#              trades section accuracy for macro F1)
#   THREADS    threads for every program (empty: all cores)
#   QUIET      -q to silence the programs' progress and summaries
#
# The tasks (OUT/tasks, from bible-tasks; test = 10% of the verses by a hash
# of the reference):
#   section  classify: which of eight sections of the Bible a verse is from
#   next     classify pairs: is verse B the verse after A?
#   names    tag: the proper names of a verse (entity F1, conlleval rules)
#   begat    span: "Who begat Seth?", "Whose son was Joshua?" on a verse
#            (SQuAD exact match and F1)
# Pre-training reads every verse (the test verses' text too, as BERT's
# pre-training read Wikipedia; no labels are in it).
# Files in OUT: corpus.txt (a chapter a document), tok.json, pre/
# (pre-training run), TASK-pre/ and TASK-scratch/ (fine-tuning runs),
# TASK-INIT.json (tfm-eval's predictions and metrics on the test split),
# scores.tsv (the table, also printed; scripts/examples/bert-scores).
HERE := $(dir $(lastword $(MAKEFILE_LIST)))
BIN ?=
OUT ?= bert
CONFIG ?= $(HERE)bible-bert.yaml
VOCAB ?= 8000
PRE_STEPS ?=
FT_EPOCHS ?= 4
FT_MIN_STEPS ?= 300
FT_STEPS ?=
FT_BATCH ?= 32
FT_LR ?= 5e-4
FT_CLASS_BALANCE ?= 0
THREADS ?=
QUIET ?=

prefix = $(if $(BIN),$(BIN)/,)
TOKENIZE = $(prefix)tfm-tokenize
TRAIN = $(prefix)tfm-train
EVAL = $(prefix)tfm-eval
threads = $(if $(THREADS),--threads $(THREADS),)
TASKS = section next names begat
RUNS = $(foreach t,$(TASKS),$(t)-pre $(t)-scratch)

.PHONY: all clean
.DELETE_ON_ERROR:

all: $(OUT)/scores.tsv

$(OUT)/tasks/verses.tsv:
	mkdir -p $(OUT)/tasks
	$(HERE)bible-tasks $(OUT)/tasks > $(OUT)/tasks/counts.tsv

# a chapter a document, a verse a line
$(OUT)/corpus.txt: $(OUT)/tasks/verses.tsv
	awk -F'\t' 'NR > 1 && $$1 SUBSEP $$2 != last { print "" } { print $$4; last = $$1 SUBSEP $$2 }' $< > $@

$(OUT)/tok.json: $(OUT)/corpus.txt
	$(TOKENIZE) train $(QUIET) $(threads) -m wordpiece --lowercase -v $(VOCAB) -o $@ $<

$(OUT)/pre/model.safetensors: $(OUT)/corpus.txt $(OUT)/tok.json $(CONFIG)
	rm -rf $(OUT)/pre
	$(TRAIN) $(QUIET) $(threads) -c $(CONFIG) -o $(OUT)/pre --set data.text=$(OUT)/corpus.txt \
	    --set data.tokenizer=$(OUT)/tok.json $(if $(PRE_STEPS),--set train.max_steps=$(PRE_STEPS),)

# fine-tuning: the task, its data, and its heads in place of MLM and NSP
task_section = classify
task_next = classify
task_names = tag
task_begat = span
ext_section = tsv
ext_next = tsv
ext_names = conll
ext_begat = jsonl
# training examples: a line (tsv, jsonl), a sentence (conll)
count_tsv = awk 'END { print NR }'
count_jsonl = awk 'END { print NR }'
count_conll = awk '!NF { n++ } END { print n + 0 }'
pooler_classify = true
pooler_tag = false
pooler_span = false
# pre: weights and tokenizer from the pre-trained model; scratch: random
# weights, the same tokenizer
init_pre = --set train.init=$(OUT)/pre/model.safetensors
init_scratch = --set data.tokenizer=$(OUT)/tok.json
# what a run waits for: the scratch runs can train beside pre-training (make -j)
needs_pre = $(OUT)/pre/model.safetensors
needs_scratch = $(OUT)/tasks/verses.tsv

define finetune
$(OUT)/$(1)-$(2)/model.safetensors: $(needs_$(2)) $(OUT)/tok.json $(CONFIG)
	rm -rf $(OUT)/$(1)-$(2)
	n=$$$$($(count_$(ext_$(1))) < $(OUT)/tasks/$(1).train.$(ext_$(1))); \
	steps=$$$$(( ($(FT_EPOCHS) * n + $(FT_BATCH) - 1) / $(FT_BATCH) )); \
	[ $$$$steps -ge $(FT_MIN_STEPS) ] || steps=$(FT_MIN_STEPS); \
	$(if $(FT_STEPS),steps=$(FT_STEPS);) \
	$(TRAIN) $(QUIET) $(threads) -c $(CONFIG) -o $(OUT)/$(1)-$(2) \
	    --set train.task=$(task_$(1)) --set data.text=$(OUT)/tasks/$(1).train.$(ext_$(1)) \
	    --set data.val=$(OUT)/tasks/$(1).valid.$(ext_$(1)) --set data.tokenizer= \
	    --set model.mlm_head=false --set model.nsp=false --set model.classes=0 \
	    --set model.pooler=$(pooler_$(task_$(1))) --set optim.lr=$(FT_LR) \
	    --set train.batch_size=$(FT_BATCH) --set schedule.warmup=$$$$((steps / 10)) \
	    --set train.max_steps=$$$$steps --set train.eval_interval=$$$$steps \
	    --set train.log_interval=25 $(init_$(2)) \
	    $(if $(filter classify,$(task_$(1))),--set train.class_balance=$(FT_CLASS_BALANCE),)

$(OUT)/$(1)-$(2).json: $(OUT)/$(1)-$(2)/model.safetensors
	$(EVAL) $(task_$(1)) -q $(threads) --json -m $$< $(OUT)/tasks/$(1).test.$(ext_$(1)) > $$@
endef
$(foreach t,$(TASKS),$(foreach i,pre scratch,$(eval $(call finetune,$(t),$(i)))))

# each task's metric on the test split, pre-trained vs random weights, next
# to the majority label and TF-IDF + logistic regression (bert-scores)
$(OUT)/scores.tsv: $(foreach r,$(RUNS),$(OUT)/$(r).json)
	$(HERE)bert-scores $(OUT) $(EVAL) > $@.tmp
	mv $@.tmp $@
	column -t -s '	' $@ 2>/dev/null || cat $@

clean:
	rm -rf $(OUT)
