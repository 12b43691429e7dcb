# CPU backend (llmc/cpu/): benchmarks. The op tests (test/test_ops.c) are picked up by the
# Makefile's test/test_*.c rule. `make bench-cpu` builds the benchmarks; nothing runs them in
# `make test` (timings never gate CI).
CPU_BENCHES := $(BUILD)/dev/bench_gemm $(BUILD)/dev/bench_ops $(BUILD)/dev/bench_step

$(CPU_BENCHES): $(BUILD)/dev/%: dev/%.c $(LIB_OBJS) $(CPU_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB_OBJS) $(CPU_OBJS) -o $@ $(LDFLAGS) $(LDLIBS_CPU) $(EXTRA_LIBS)

bench-cpu: $(CPU_BENCHES)

.PHONY: bench-cpu
