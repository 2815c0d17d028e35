# BERT on the King James Bible, end to end, as make targets with real file
# dependencies:
#   the text (Debian's bible-kjv) -> WordPiece -> masked-LM + NSP pre-training
#   -> four fine-tuning tasks (scripts/examples/bible-tasks), each trained
#   from the pre-trained model and from random weights -> test-set scores
#
#   make -f scripts/examples/bert.mk                  # programs from PATH
#   make -f .../bert.mk BIN=/path/to/build OUT=run1   # programs of a build dir
#   make -f .../bert.mk PRE_STEPS=200 FT_STEPS=100    # a shorter run
#
# Variables (make VAR=value):
#   BIN        directory of the tfm programs (empty: from PATH)
#   OUT        where every file goes (default: bert)
#   CONFIG     the pre-training YAML (default bible-bert.yaml); fine-tuning
#              uses it too, with the task's heads
#   VOCAB      WordPiece vocabulary size (default 8000)
#   PRE_STEPS  pre-training steps (default: the config's, 1000)
#   FT_STEPS   fine-tuning steps of each task (default 300)
#   FT_LR      fine-tuning learning rate (default 2e-4)
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
# scores.tsv (the table, also printed).
HERE := $(dir $(lastword $(MAKEFILE_LIST)))
BIN ?=
OUT ?= bert
CONFIG ?= $(HERE)bible-bert.yaml
VOCAB ?= 8000
PRE_STEPS ?=
FT_STEPS ?= 300
FT_LR ?= 2e-4
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
pooler_classify = true
pooler_tag = false
pooler_span = false
# pre: weights and tokenizer from the pre-trained model; scratch: random
# weights, the same tokenizer
init_pre = --set train.init=$(OUT)/pre/model.safetensors
init_scratch = --set data.tokenizer=$(OUT)/tok.json

define finetune
$(OUT)/$(1)-$(2)/model.safetensors: $(OUT)/pre/model.safetensors $(OUT)/tok.json $(CONFIG)
	rm -rf $(OUT)/$(1)-$(2)
	$(TRAIN) $(QUIET) $(threads) -c $(CONFIG) -o $(OUT)/$(1)-$(2) \
	    --set train.task=$(task_$(1)) --set data.text=$(OUT)/tasks/$(1).train.$(ext_$(1)) \
	    --set data.val=$(OUT)/tasks/$(1).valid.$(ext_$(1)) --set data.tokenizer= \
	    --set model.mlm_head=false --set model.nsp=false --set model.classes=0 \
	    --set model.pooler=$(pooler_$(task_$(1))) --set optim.lr=$(FT_LR) \
	    --set schedule.warmup=$$$$(( $(FT_STEPS) / 10 )) --set train.max_steps=$(FT_STEPS) \
	    --set train.eval_interval=$(FT_STEPS) --set train.log_interval=25 $(init_$(2))

$(OUT)/$(1)-$(2).json: $(OUT)/$(1)-$(2)/model.safetensors
	$(EVAL) $(task_$(1)) -q $(threads) --json -m $$< $(OUT)/tasks/$(1).test.$(ext_$(1)) > $$@
endef
$(foreach t,$(TASKS),$(foreach i,pre scratch,$(eval $(call finetune,$(t),$(i)))))

# the metric of each task on the test split, pre-trained vs random weights
# (accuracy and exact match in percent, macro and entity F1 from 0 to 1,
# SQuAD F1 from 0 to 100, as tfm-eval reports them); baseline: the majority
# label (section, next) or tagging every word O (names)
$(OUT)/scores.tsv: $(foreach r,$(RUNS),$(OUT)/$(r).json)
	{ printf 'task\tmetric\tpretrained\tscratch\tbaseline\n'; \
	  metric() { tail -n 1 $(OUT)/$$1.json | sed 's/.*"'"$$2"'":\([-0-9.e]*\).*/\1/'; }; \
	  majority() { cut -f1 $(OUT)/tasks/$$1.train.tsv | sort | uniq -c | sort -rn | awk 'NR == 1 { print $$2 }'; }; \
	  base() { m=$$(majority $$1); cut -f1 $(OUT)/tasks/$$1.test.tsv > $(OUT)/$$1.gold; \
	      sed "s/.*/$$m/" $(OUT)/$$1.gold | $(EVAL) score -q --task classify --gold $(OUT)/$$1.gold --json | \
	      sed 's/.*"accuracy":\([-0-9.e]*\).*/\1/'; }; \
	  pct() { awk -v x="$$1" 'BEGIN { printf "%.1f%%", 100 * x }'; }; \
	  fix() { awk -v x="$$1" -v d="$$2" 'BEGIN { printf "%." d "f", x }'; }; \
	  printf 'section\taccuracy\t%s\t%s\t%s\n' $$(pct $$(metric section-pre accuracy)) $$(pct $$(metric section-scratch accuracy)) $$(pct $$(base section)); \
	  printf 'section\tmacro F1\t%s\t%s\t-\n' $$(fix $$(metric section-pre f1_macro) 3) $$(fix $$(metric section-scratch f1_macro) 3); \
	  printf 'next\taccuracy\t%s\t%s\t%s\n' $$(pct $$(metric next-pre accuracy)) $$(pct $$(metric next-scratch accuracy)) $$(pct $$(base next)); \
	  printf 'names\tentity F1\t%s\t%s\t0\n' $$(fix $$(metric names-pre f1) 3) $$(fix $$(metric names-scratch f1) 3); \
	  printf 'begat\texact match\t%s%%\t%s%%\t-\n' $$(fix $$(metric begat-pre exact_match) 1) $$(fix $$(metric begat-scratch exact_match) 1); \
	  printf 'begat\tF1\t%s\t%s\t-\n' $$(fix $$(metric begat-pre f1) 1) $$(fix $$(metric begat-scratch f1) 1); \
	} > $@.tmp
	mv $@.tmp $@
	column -t -s '	' $@

clean:
	rm -rf $(OUT)
