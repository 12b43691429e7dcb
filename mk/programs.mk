# The library and the four programs of the selected tree (mk/config.mk), for either backend.
#
#   $(TREE)/libllmc.a       the shared C (llmc/<layer>/*.c) + the backend's objects (BACKEND_OBJS, from
#                           mk/cpu.mk or mk/cuda.mk). Programs link the archive, so each one pulls
#                           only the objects it uses (data/prepare needs no backend at all).
#   $(TREE)/bin/            train_gpt2, train_lora, generate, convert (entry files *.cu: plain C
#                           on the CPU backend, nvcc on CUDA) and prepare (data/prepare.c)
#   ./train_gpt2 ./train_lora ./generate ./convert ./data/prepare
#                           where the README expects them: copies of the selected tree's
#                           programs, refreshed by every `make` whose tree they do not match (so
#                           switching BACKEND or ARCH never leaves another build's binary
#                           standing). Sanitizer builds leave them alone.

LIB_SRCS := $(wildcard $(addsuffix /*.c,$(LLMC_DIRS)))
LIB_OBJS := $(patsubst %.c,$(TREE)/obj/%.o,$(LIB_SRCS))

# host C of the tree: the shared library, data/prepare, tests and dev tools (BACKEND_CFLAGS: the
# backend's view of the shared C, e.g. -DLLMC_CUDA)
$(TREE)/obj/%.o: %.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BACKEND_CFLAGS) -c $< -o $@

# NF4 quantization is compiled without floating-point contraction so that every multiply and add
# rounds separately, as in bitsandbytes' CPU path (nf4.c calls fmaf itself where bitsandbytes'
# binary fuses one). Every tree and the harness' copy of the library get the flag.
NF4_CFLAGS := -ffp-contract=off
$(TREE)/obj/llmc/ops/nf4.o: CFLAGS += $(NF4_CFLAGS)

# (made afresh each time: members with the same name, llmc/ops/nf4.o and llmc/cuda/nf4.o, both stay)
$(LIB): $(LIB_OBJS) $(BACKEND_OBJS)
	@rm -f $@
	ar rcs $@ $^

PROGRAMS := $(TREE)/bin/train_gpt2 $(TREE)/bin/train_lora $(TREE)/bin/generate $(TREE)/bin/convert $(TREE)/bin/prepare

# (ENTRY_LINK, PROGRAM_LIBS: the backend's linker and libraries)
$(TREE)/bin/train_gpt2 $(TREE)/bin/train_lora $(TREE)/bin/generate $(TREE)/bin/convert: $(TREE)/bin/%: $(TREE)/obj/%.entry.o $(LIB)
	@mkdir -p $(dir $@)
	$(ENTRY_LINK) $< $(LIB) -o $@ $(LDFLAGS) $(PROGRAM_LIBS)

# data/prepare is a host tool on either backend: no ops, no CUDA libraries
$(TREE)/bin/prepare: $(TREE)/obj/data/prepare.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $< $(LIB) -o $@ $(LDFLAGS) $(HOST_LIBS)

# the root copies
ROOT_PROGRAMS := train_gpt2 train_lora generate convert data/prepare
root_install = $(if $(SAN),@true,@cmp -s $< $@ || { cp $< $@.tmp && mv -f $@.tmp $@ && echo "$@ <- $<"; })
train_gpt2 train_lora generate convert: %: $(TREE)/bin/% FORCE
	$(root_install)
data/prepare: $(TREE)/bin/prepare FORCE
	$(root_install)
FORCE:
.PHONY: FORCE

# The README's main job (scripts/lora_tiny.sh): pretrain a tiny GPT-2 on most of the bundled
# tinyshakespeare with train_gpt2, fine-tune it with train_lora on the held-out plays in another
# style, report the validation loss on them before and after, samples and loss plots.
quickstart: all
	bash scripts/lora_tiny.sh
.PHONY: quickstart
