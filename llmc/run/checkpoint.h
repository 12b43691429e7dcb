// Resumable training state. A checkpoint of step S in the output directory DIR is:
//   DIR/model_SSSSSSSS.bin          full training: the model, llm.c .bin v3 (fp32) - loads in llm.c
//   DIR/adapter_SSSSSSSS/           LoRA: the adapter as a PEFT directory (llmc/run/run_outputs.h);
//                                   resuming reads its adapter_model.safetensors (PEFT keys, fp32)
//   DIR/state_SSSSSSSS_RRRRR.bin    one per rank: its optimizer shard and the run's position
//   DIR/DONE_SSSSSSSS               the commit record, written last by rank 0 after every rank
//                                   finished: only checkpoints with a valid one are resumed from
//   DIR/PENDING_SSSSSSSS            the protocol's record that step S's files are being written
//                                   (or removed, pruning): written before the first of them,
//                                   removed once DONE_SSSSSSSS is written (or they are gone)
// Every file is written atomically, so a crash leaves the previous checkpoint intact; what an
// interrupted save or prune leaves is exactly what a PENDING marker names, which the next run in
// DIR removes (ckpt_clean). Files that merely have a checkpoint's name are never removed.
//
// Integrity. The DONE marker is a JSON manifest: the step, the number of ranks and every file's
// name, size and CRC-32C (llmc/base/crc32c.h), outside the files so that model_*.bin and the
// adapters' safetensors stay byte-for-byte the formats llm.c, transformers and PEFT read; written
// after everything else, it also proves the checkpoint complete. Before anything of a checkpoint
// is read, ckpt_verify checks every file against it; a flipped, truncated, missing or replaced
// file is refused with its name. The state file is a 1024-byte header of int64, then float32 m, v
// (and the fp32 master weights when has_master) of the rank's range of the flat trainable space;
// ckpt_read_state_header range-checks every field and ckpt_check_states cross-checks the ranks'
// headers and the manifest. Both layouts: docs/FORMATS.md ("Checkpoint state file", "Checkpoint
// manifest").
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stdint.h>
#include <stddef.h>
#include "base/fileio.h"
#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STATE_MAGIC 20261123
#define STATE_VERSION 1
#define CKPT_MANIFEST_VERSION 1
#define CKPT_MAX_STEP 99999999L       // eight digits in the file names
#define CKPT_MAX_WORLD 99999          // five digits in the state file names
#define CKPT_MAX_ELEMS (1LL << 40)    // trainable elements: far above any GPT-2

typedef enum {
    // SH_UNUSED_7: always 0 (every random draw of a run is a pure function of --seed and the
    // step, so there is no generator state to save); the slot keeps the later fields in place
    SH_MAGIC = 0, SH_VERSION, SH_WORLD, SH_RANK, SH_HAS_MASTER, SH_STEP, SH_OPT_T, SH_UNUSED_7,
    SH_DL_EPOCH, SH_DL_SHARD, SH_DL_CHUNK, SH_BEGIN, SH_END, SH_TOTAL, SH_MODE, SH_B, SH_T,
    SH_ACCUM, SH_SKIPPED, SH_ZERO, SH_SEED, SH_TOKENS_PER_STEP, SH_SHUFFLE,
    // the validation loss across evaluations before the step's own (--keep-best, early
    // stopping): SH_VAL_TRACKED 1 when the others are set (0 in files of earlier versions), the
    // best loss as the bits of an IEEE double, its step, evaluations since it last improved
    SH_VAL_TRACKED, SH_BEST_VAL_BITS, SH_BEST_STEP, SH_EVALS_SINCE_BEST,
    // steps whose every target was masked (no update): opt_t + skipped + no_targets = step
    SH_NO_TARGETS,
    // --dtype fp16's loss scale for the next step (the bits of its fp32; 0 in other runs and in
    // files of earlier versions) and its count of clean steps since it last changed
    SH_LOSS_SCALE_BITS, SH_SCALE_GROWTH,
    SH_NUM_FIELDS
} StateField;

typedef struct {
    int64_t h[128];
} StateHeader;

typedef struct {
    char name[64];
    uint64_t bytes;
    uint32_t crc;
} CkptFile;

typedef struct {
    long step;
    int world;
    int nfiles;       // world + 1
    CkptFile* files;  // malloc'd; ckpt_manifest_free
} CkptManifest;

// Newest step with a DONE marker in dir, or -1 when there is none.
long ckpt_find_latest(const char* dir);
// File name of a checkpoint file (kind "model", "adapter", "state", "DONE", "PENDING"), and its
// path in dir.
void ckpt_name(char* out, size_t cap, const char* kind, long step, int rank);
void ckpt_path(char* out, size_t cap, const char* dir, const char* kind, long step, int rank);

// ---- writing (every rank)
void ckpt_write_state(const char* path, const StateHeader* hdr, const float* m, const float* v, const float* master);
// The same file written piece by piece, so that the state never needs a host copy: begin, then
// m, v (and master when has_master) in order, each as consecutive ckpt_state_put calls of any
// sizes, then end, which refuses a file whose arrays did not come whole (nothing committed) and
// commits it atomically. A caller stages each piece through one buffer of
// ckpt_stage_elems(n) floats (the memory plan counts it, llmc/plan/memplan.c).
#define CKPT_STAGE_ELEMS ((size_t)1 << 20)
typedef struct {
    AtomicFile af;
    size_t n, written;   // elements of each array; put so far, over every array
    int arrays;          // 2, or 3 with the master weights
} CkptStateWriter;
size_t ckpt_stage_elems(size_t n);
void ckpt_state_begin(CkptStateWriter* w, const char* path, const StateHeader* hdr);
void ckpt_state_put(CkptStateWriter* w, const float* x, size_t n);
void ckpt_state_end(CkptStateWriter* w);
// After every rank has written its state file (and rank 0 the model or adapter, main_kind
// "model" or "adapter"): each rank checksums its own file, the checksums are gathered, and rank 0
// writes DONE_SSSSSSSS. Collective: every rank calls it. Returns when the marker is written.
void ckpt_commit(Comm* c, const char* dir, long step, const char* main_kind);
// Rank 0: PENDING_SSSSSSSS before any rank writes a file of step S (the caller then waits for
// it: a barrier), and its removal after DONE_SSSSSSSS is written.
void ckpt_pending_begin(const char* dir, long step);
void ckpt_pending_end(const char* dir, long step);
// Remove complete checkpoints older than the newest `keep` (0 = keep all), except the step
// `protect` (the newest one known good; -1: none): each under a PENDING marker, the DONE marker
// first, then every file of that step (whatever number of ranks wrote it).
void ckpt_prune(const char* dir, int keep, long protect);
// Remove one complete checkpoint the same way.
void ckpt_remove(const char* dir, long step);

// ---- resuming
// Checks every file of the checkpoint against its manifest (size and CRC-32C), the files split
// over the ranks; fatal with the file's name on any difference. Collective: every rank calls it
// before reading anything of the checkpoint; it returns when all files have been checked.
void ckpt_verify(Comm* c, const char* dir, long step);
// Reads one header; validates magic, version, every field's range and that the file size matches.
void ckpt_read_state_header(const char* path, StateHeader* hdr);
// Reads and cross-checks the headers of every rank's state file of the checkpoint (same run,
// step and settings; shard ranges that tile [0, total)); returns rank 0's header.
void ckpt_check_states(const char* dir, long step, StateHeader* h0);
// Copy the part of the file's range [SH_BEGIN, SH_END) that overlaps [begin, end) into m, v and
// master (arrays indexed from begin; master may be NULL). Returns the number of elements copied.
// Used to re-shard optimizer state when resuming with a different number of ranks or ZeRO stage.
size_t ckpt_read_state_overlap(const char* path, const StateHeader* hdr, size_t begin, size_t end,
                               float* m, float* v, float* master);

// ---- the manifest
void ckpt_manifest_write(const char* dir, const CkptManifest* mf);
// Reads and validates DIR/DONE_SSSSSSSS (its step must be `step`, the file names those of that
// step). try_: returns -1 with a message in err instead of exiting. 0 on success.
int ckpt_manifest_try_read(const char* dir, long step, CkptManifest* mf, char* err, size_t errcap);
void ckpt_manifest_read(const char* dir, long step, CkptManifest* mf);
// Parse manifest text (what ckpt_manifest_try_read does after reading the file; for tests and
// fuzzing). `what` names the source in messages.
int ckpt_manifest_parse(const char* text, size_t len, const char* what, long step, CkptManifest* mf,
                        char* err, size_t errcap);
void ckpt_manifest_free(CkptManifest* mf);

// ---- leftovers
// Removes what interrupted runs of this program left in dir (and dir/merged, dir/base, dir/best,
// dir/best/merged), and nothing else: temporary files of atomic writes ("NAME.tmp.<pid>") of the
// files a run writes, and the files of every step a PENDING marker names that has no DONE marker
// (an interrupted save or prune); a PENDING marker beside a DONE one is removed alone (the
// checkpoint is complete). Prints what it removed. Call it when a run starts in dir, holding its
// lock (llmc/run/runlock.h), before any rank writes there.
void ckpt_clean(const char* dir);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CHECKPOINT_H
