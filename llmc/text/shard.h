// Token shards (.bin, llm.c's format) and their loss masks (.mask): the header fields, the
// integrity fields data/prepare writes into them, and the check of a shard with its mask that
// every reader runs before it uses a token (the data loader, llmc/run/dataloader.c, and
// data/prepare --show). docs/FORMATS.md has the layout; data/prepare.c writes it.
//
// Shard header: 256 int32, then n uint16 tokens. llm.c reads fields 0-2 only, so every shard
// written here loads there as a plain token stream. Fields 3 and up are 0 in llm.c's shards and
// in those of an older data/prepare, and mean "not stated":
//   [3] window length T (--record-windows T / --pack T), [4] 1 = packed records,
//   [5] 1 = the shard has a loss mask X.mask, which must be beside it,
//   [6] this shard's number in its split, [7] the number of shards in the split (0: fields 6,
//   8 and 9 are not stated), [8] CRC-32C of the token bytes, [9] the split's id (a CRC-32C of
//   its layout, tokens and masks: shards of one data/prepare output share it), [10] 1 = the
//   records are preference pairs (packed; mask version 3).
// Mask header: 256 int32 (magic, version, n, then the shard's fields 3-9, so a mask names the
// shard it belongs to), [10] CRC-32C of the mask bytes; then n uint8.
// Preference pairs (data/prepare on {"prompt", "chosen", "rejected"} records): each pair is two
// records, prompt + chosen then prompt + rejected, back to back in one window (--pack T: whole
// pairs packed; --record-windows T: one pair a window), every record attending to itself only.
// Their mask (version 3) marks a record's first token with bit 1 and, for the chosen one, bit 2,
// for the rejected one, bit 3; a start with neither is the window's padding. So a window is
// pairs (a chosen start, then the rejected start) and at most one padding after them.
#ifndef LLMC_SHARD_H
#define LLMC_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "text/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define MASK_MAGIC 20261122
#define MASK_VERSION 1
#define MASK_VERSION_PACKED 2 // bit 1 of a mask byte: the token starts a record
#define MASK_VERSION_PAIRS 3  // + bits 2 / 3: the record is a pair's chosen / rejected
#define SHARD_HEADER_BYTES 1024
#define SHARD_WINDOW 3        // header fields, see above
#define SHARD_PACKED 4
#define SHARD_HAS_MASK 5
#define SHARD_INDEX 6
#define SHARD_COUNT 7
#define SHARD_CRC 8
#define SHARD_SET 9
#define SHARD_PAIRS 10        // (a shard's field; field 10 of a mask is its CRC)
#define MASK_CRC 10
#define MASK_TRAINED 1        // mask byte bits
#define MASK_START 2
#define MASK_CHOSEN 4
#define MASK_REJECTED 8

typedef struct {
    int32_t h[256];           // the shard's header
    int64_t ntok;
    int mask_version;         // 0: no mask (every target trained), 1, 2 (packed) or 3 (preference pairs)
    int64_t targets, trained; // tokens 1..n-1 (the targets a shard holds) and how many are trained
    int64_t pairs;            // preference pairs (mask version 3)
} ShardInfo;

// X.bin -> X.mask (any other name: NAME.mask)
void shard_mask_path(char* out, size_t cap, const char* bin);
// The header h of a shard (elem_bytes 2) or mask (1) file, checked: magic, version 1..max_version,
// file size 1024 + n * elem_bytes. Returns n; fatal with the file named.
int64_t shard_read_header(const char* path, int magic, int max_version, int elem_bytes, const char* what, int32_t* h);
// Everything a reader must know before it uses a token of shard `path`, read once: the header;
// its mask (required when the shard says it has one; it must name this shard; refused beside a
// shard written without one); every token below vocab_size (fatal naming the first one that is
// not, with its offset); the checksums data/prepare wrote; every mask byte (0/1, + 2 for a
// record start in packed shards; every window of a packed shard starts a record). Fatal with
// the file named on any of these; fills si. Pairs: every window starts with a pair's chosen
// record, each chosen is followed by its rejected record in the same window, padding comes last.
void shard_check(const char* path, int vocab_size, ShardInfo* si);
// data/prepare --show: tokens [from, from + count) of a checked shard (vocab: the tokenizer's)
// as text, the trained targets between [[ and ]] (color: in green instead), a line before every
// window; or (ids) one token a line: position, id, label (the id when trained, else -100, as
// Hugging Face labels), its text. A summary of the file and its mask first.
void shard_show(FILE* out, const char* path, const Tokenizer* tk, int64_t from, int64_t count, int ids, int color);

#ifdef __cplusplus
}
#endif
#endif // LLMC_SHARD_H
