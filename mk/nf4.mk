# NF4 quantization (llmc/nf4.c): compiled without floating-point contraction so that every
# multiply and add rounds separately, as in bitsandbytes' CPU path (nf4.c calls fmaf itself
# where bitsandbytes' binary fuses one).
$(BUILD)/llmc/nf4.o: CFLAGS += -ffp-contract=off
