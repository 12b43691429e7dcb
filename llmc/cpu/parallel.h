// How the CPU backend splits work between OpenMP threads.
//
// Determinism: every reduction over rows (weight, bias and embedding gradients) is done by a thread
// that owns a block of COLBLOCK output columns and walks the rows in order, so results do not
// depend on the thread count or timing. Element-wise loops go in EW_CHUNK-element chunks, so
// small calls stay on one thread.
#ifndef LLMC_CPU_PARALLEL_H
#define LLMC_CPU_PARALLEL_H

#define COLBLOCK 64
#define EW_CHUNK 16384

#endif // LLMC_CPU_PARALLEL_H
