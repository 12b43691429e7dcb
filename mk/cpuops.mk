# CPU backend (llmc/cpu/): benchmarks. The op tests (test/test_ops.c) are picked up by the
# Makefile's test/test_*.c rule. `make bench-cpu` builds the benchmarks; nothing runs them in
# `make test` (timings never gate CI).
CPU_BENCHES := $(BUILD)/dev/bench_gemm $(BUILD)/dev/bench_ops

$(CPU_BENCHES): $(BUILD)/dev/%: dev/%.c $(LIB_ALL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB_ALL_OBJS) -o $@ $(LIB_LINK_FLAGS)

bench-cpu: $(CPU_BENCHES)

.PHONY: bench-cpu
