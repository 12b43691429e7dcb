// AdamW over the trainable parameters, seen as one flat space made of segments (one segment
// per trainable tensor: the whole GPT-2 table for full training, the adapters for LoRA). The
// optimizer owns m, v (and fp32 master weights when parameters are stored in bf16) for the
// range [begin, end) of that flat space that this rank updates (everything on a single rank,
// its ZeRO shard otherwise).
#ifndef LLMC_OPTIMIZER_H
#define LLMC_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>
#include "ops/ops.h"
#include "model/trainseg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    TrainSeg* segs;
    int nseg;
    size_t total;       // elements of the flat trainable space
    size_t begin, end;  // this rank's range
    float* m;           // (end - begin) each, backend memory
    float* v;
    float* master;      // NULL when parameters are fp32
    floatX* gshard;     // ZeRO-2: this rank's reduced gradients for [begin, end) (then the
                        // segments' g pointers are not used by the optimizer); NULL otherwise
    int t;              // updates applied so far (AdamW bias correction)
    // offload (opt_offload): m, v and master in pinned host memory, the update on the CPU
    int offload;
    void* stage_g;      // (end - begin) floatX on the host: the gradients brought over
    void* stage_p;      //   ... and the updated parameters sent back
    size_t moved_down, moved_up; // bytes moved by the last opt_step (backend -> host, host -> backend)
    size_t offload_chunk; // elements per transfer piece (OPT_OFFLOAD_CHUNK; a test may lower it)
    int pieces;         // pieces of the last opt_step
    char* trace;        // LLMC_OFFLOAD_TRACE=1: each step's order of transfers and updates (printed)
    size_t trace_len, trace_cap;
} Optimizer;

#define OPT_OFFLOAD_CHUNK ((size_t)1 << 20)

// segs are copied; offsets are assigned here in order.
void opt_init(Optimizer* o, const TrainSeg* segs, int nseg, size_t begin, size_t end);
void opt_free(Optimizer* o);
// Optimizer offload (--offload-optimizer), right after opt_init: m, v and the master weights move
// to pinned host memory (ops_alloc_host) and opt_step runs AdamW on the CPU (llmc/model/adamw_host.h).
// The range goes in pieces (a segment's part, at most offload_chunk elements), pipelined on the
// backend's copy stream (ops_copy_*): while the CPU updates piece i, the gradients of piece i + 1
// come down and the parameters of piece i - 1 go up (moved_down / moved_up count the bytes).
// The result equals the backend's own update. LLMC_OFFLOAD_TRACE=1 prints each step's order:
// "Dk" piece k's copies to the host issued, "Uk" its update done, "uk" its parameters' copy back
// issued.
void opt_offload(Optimizer* o);
// An optimizer state array (o->m, o->v or o->master) to / from host memory, wherever it lives.
void opt_state_to_host(const Optimizer* o, const float* state, float* host);
void opt_state_from_host(const Optimizer* o, float* state, const float* host);
// Sum of squares of the gradients in [begin, end) of the flat space (with gshard: of this
// rank's range, whatever begin/end say).
double opt_grad_sumsq(const Optimizer* o, size_t begin, size_t end);
// The same sum added into *acc (one double in backend memory), nothing read back.
void opt_grad_sumsq_acc(const Optimizer* o, size_t begin, size_t end, double* acc);
// One AdamW update of this rank's range; each segment's learning rate is lr times its lr_scale
// (the decoupled decay too, as torch.optim.AdamW's per-group lr).
void opt_step(Optimizer* o, float lr, float beta1, float beta2, float eps, float weight_decay,
              float grad_scale, uint32_t seed);
// Gradient scale that clips the global norm to max_norm, exactly as
// torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0.
float opt_clip_scale(double norm, float max_norm);
// Bytes of optimizer state held by this rank.
size_t opt_state_bytes(const Optimizer* o);
// The same for n elements of a range, before any optimizer exists (a plan's): m, v and, with
// master weights (bf16 parameters), the fp32 master copy.
size_t opt_state_bytes_for(size_t n, int master);

#ifdef __cplusplus
}
#endif
#endif // LLMC_OPTIMIZER_H
