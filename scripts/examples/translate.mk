# English->German translation of software messages, end to end, as make
# targets with real file dependencies:
#   corpus (Debian's German .mo catalogues) -> joint BPE -> encoder-decoder
#   -> test-set translations (greedy, beam 4) -> BLEU and chrF vs copying
#
#   make -f scripts/examples/translate.mk                  # programs from PATH
#   make -f .../translate.mk BIN=/path/to/build OUT=run1   # programs of a build dir
#   make -f .../translate.mk STEPS=200 THREADS=2           # a shorter run
#
# Variables (make VAR=value):
#   BIN      directory of the tfm programs (empty: from PATH)
#   OUT      where every file goes (default: translate)
#   CONFIG   tfm-train YAML (default debian-de.yaml); data paths are set here
#   VOCAB    joint BPE vocabulary size (default 2000)
#   STEPS    override the config's train.max_steps (empty: keep it)
#   CKPT     model file of the run to translate with: best (highest
#            validation BLEU, the default) or model (the last step)
#   BEAM     beams of the beam-search translations (default 4)
#   LOCALEDIR  where the German .mo files are (default
#            /usr/share/locale/de/LC_MESSAGES)
#   THREADS  threads for every program (empty: all cores)
#   QUIET    -q to silence the programs' progress and summaries
#
# Files in OUT: train.tsv valid.tsv test.tsv (english<TAB>german, from
# scripts/examples/debian-de), tok.json, run/ (tfm-train's run directory;
# run/done once it has finished),
# test.en test.de, greedy.de beam.de (translations of test.en), scores.tsv
# (the table, also printed), examples.txt (the first test sentences with
# their translations).
HERE := $(dir $(lastword $(MAKEFILE_LIST)))
BIN ?=
OUT ?= translate
CONFIG ?= $(HERE)debian-de.yaml
VOCAB ?= 2000
STEPS ?=
CKPT ?= best
BEAM ?= 4
LOCALEDIR ?= /usr/share/locale/de/LC_MESSAGES
THREADS ?=
QUIET ?=

prefix = $(if $(BIN),$(BIN)/,)
TOKENIZE = $(prefix)tfm-tokenize
TRAIN = $(prefix)tfm-train
GENERATE = $(prefix)tfm-generate
EVAL = $(prefix)tfm-eval
threads = $(if $(THREADS),--threads $(THREADS),)
steps = $(if $(STEPS),--set train.max_steps=$(STEPS),)
MODEL = $(OUT)/run/$(CKPT).safetensors

.PHONY: all corpus tokenizer model translations scores clean
all: scores $(OUT)/examples.txt
corpus: $(OUT)/train.tsv
tokenizer: $(OUT)/tok.json
model: $(OUT)/run/done
translations: $(OUT)/greedy.de $(OUT)/beam.de
scores: $(OUT)/scores.tsv

$(OUT)/.dir:
	mkdir -p $(OUT) && touch $@

# One run writes the three splits; valid and test hang on train.
$(OUT)/train.tsv: $(HERE)debian-de | $(OUT)/.dir
	$(HERE)debian-de $(QUIET) --locale-dir $(LOCALEDIR) -o $(OUT)
$(OUT)/valid.tsv $(OUT)/test.tsv: $(OUT)/train.tsv
	@test -f $@ || { rm -f $<; echo "$@ missing: rerun make" >&2; exit 1; }

# One BPE over both sides of the training pairs.
$(OUT)/tok.json: $(OUT)/train.tsv
	{ cut -f 1 $(OUT)/train.tsv; cut -f 2 $(OUT)/train.tsv; } > $(OUT)/both.txt
	$(TOKENIZE) train $(QUIET) $(threads) --model bpe --vocab-size $(VOCAB) -o $@ $(OUT)/both.txt

# A fresh run each time (tfm-train would otherwise resume the old one);
# run/done marks a finished run (tfm-train writes best.safetensors before
# model.safetensors, so neither stands for the run).
$(OUT)/run/done: $(OUT)/train.tsv $(OUT)/valid.tsv $(OUT)/tok.json $(CONFIG)
	rm -rf $(OUT)/run
	$(TRAIN) $(QUIET) $(threads) -c $(CONFIG) --set data.text=$(OUT)/train.tsv \
	    --set data.val=$(OUT)/valid.tsv --set data.tokenizer=$(OUT)/tok.json $(steps) \
	    -o $(OUT)/run
	@test -f $(MODEL) || { echo "no $(MODEL) (train.best_by?): make CKPT=model" >&2; exit 1; }
	touch $@

$(OUT)/test.en: $(OUT)/test.tsv
	cut -f 1 $< > $@
$(OUT)/test.de: $(OUT)/test.tsv
	cut -f 2 $< > $@

$(OUT)/greedy.de: $(OUT)/run/done $(OUT)/test.en
	$(GENERATE) $(QUIET) $(threads) -m $(MODEL) --greedy < $(OUT)/test.en > $@.tmp && mv $@.tmp $@
$(OUT)/beam.de: $(OUT)/run/done $(OUT)/test.en
	$(GENERATE) $(QUIET) $(threads) -m $(MODEL) --beam $(BEAM) < $(OUT)/test.en > $@.tmp && mv $@.tmp $@

# BLEU and chrF of each system against the German references; "copy" is
# the English source itself as the translation.
$(OUT)/scores.tsv: $(OUT)/greedy.de $(OUT)/beam.de $(OUT)/test.en $(OUT)/test.de
	{ printf 'system\tBLEU\tchrF\n'; \
	  for s in copy:test.en greedy:greedy.de beam$(BEAM):beam.de; do \
	    h=$(OUT)/$${s#*:}; \
	    b=$$($(EVAL) bleu -q --json --ref $(OUT)/test.de $$h) || exit 1; \
	    c=$$($(EVAL) chrf -q --json --ref $(OUT)/test.de $$h) || exit 1; \
	    printf '%s\t%.2f\t%.2f\n' $${s%%:*} \
	      "$$(echo "$$b" | sed -n 's/.*"bleu":\([0-9.]*\).*/\1/p')" \
	      "$$(echo "$$c" | sed -n 's/.*"chrf":\([0-9.]*\).*/\1/p')"; \
	  done; } > $@.tmp && mv $@.tmp $@
	@echo "$$(wc -l < $(OUT)/test.en) test pairs:"; column -t -s '	' $@ 2>/dev/null || cat $@

$(OUT)/examples.txt: $(OUT)/test.tsv $(OUT)/greedy.de $(OUT)/beam.de
	paste $(OUT)/test.tsv $(OUT)/greedy.de $(OUT)/beam.de | head -n 12 | \
	    awk -F '\t' '{ print "en:     " $$1; print "ref:    " $$2; \
	                   print "greedy: " $$3; print "beam:   " $$4; print "" }' > $@.tmp && mv $@.tmp $@

clean:
	rm -rf $(OUT)/run $(OUT)/tok.json $(OUT)/both.txt $(OUT)/test.en $(OUT)/test.de \
	    $(OUT)/greedy.de $(OUT)/beam.de $(OUT)/scores.tsv $(OUT)/examples.txt
