// TensorBoard event files (--tensorboard DIR): the records TensorBoard's readers load, written by
// the trainers themselves, and read back by the tests.
//
// A file DIR/events.out.tfevents.<unix seconds>.<hostname> is a sequence of records:
//   uint64 n (little-endian) | uint32 masked CRC-32C of those 8 bytes | n bytes of data |
//   uint32 masked CRC-32C of the data,      masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
// Each record's data is a serialized `Event` protobuf (proto3: fields at their default value are
// left out): 1 wall_time (double, fixed64), 2 step (int64, varint), 3 file_version (string; the
// first event of a file has "brain.Event:2"), 5 summary (a `Summary`: repeated field 1 `Value`
// {1 tag (string), 2 simple_value (float, fixed32)}), 10 source_metadata (a `SourceMetadata`
// {1 writer (string)}: the program that wrote the file, in its first event, as TensorBoard's own
// writer names itself there).
// Encoding is by hand (varints, fixed64 / fixed32, length-delimited); decoding skips the fields
// it does not know, as protobuf readers do.
#ifndef LLMC_TFEVENTS_H
#define LLMC_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/fileio.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFEVENTS_MAX_VALUES 32   // scalars of one event (a log.jsonl line has at most 21)
#define TFEVENTS_MAX_TAG 64
#define TFEVENTS_FILE_VERSION "brain.Event:2"
#define TFEVENTS_WRITER "llmc-ft"   // this tool's SourceMetadata.writer
#define TFEVENTS_NO_FIT ((size_t)-1)

typedef struct {
    char tag[TFEVENTS_MAX_TAG];
    float value;
} TfValue;

typedef struct {
    double wall_time;            // seconds since the epoch
    int64_t step;
    char file_version[32];       // "" except in a file's first event ...
    char source_writer[TFEVENTS_MAX_TAG]; // ... and its writer ("": no source_metadata)
    int nvalues;                 // scalars of the summary (0: no summary)
    TfValue values[TFEVENTS_MAX_VALUES];
} TfEvent;

typedef struct {
    FILE* fp;                    // NULL: closed
    char path[LLMC_PATH_MAX];
} TfWriter;

// CRC-32C of data[0..n), masked as the record format masks it.
uint32_t tfevents_masked_crc(const void* data, size_t n);
// The Event protobuf of e into out[0..cap); returns its length (0 for an event of defaults only),
// TFEVENTS_NO_FIT when it does not fit.
size_t tfevents_encode_event(const TfEvent* e, uint8_t* out, size_t cap);
// The protobuf data[0..n) into e; 0, or -1 when it is malformed (a varint or a length running
// past the end, a wire type protobuf does not have, more values or a longer tag than TfEvent holds).
int tfevents_decode_event(const uint8_t* data, size_t n, TfEvent* e);
// The record at buf[*pos..len): 1 with *data, *n its data and *pos past it; 0 at the end; -1 when
// the record is cut short or a CRC does not match (*pos unchanged).
int tfevents_next_record(const uint8_t* buf, size_t len, size_t* pos, const uint8_t** data, size_t* n);

// A new event file in dir (made if missing), named for wall_time and the host, its first event
// the file version; fatal when it cannot be written.
void tfevents_create(TfWriter* w, const char* dir, double wall_time);
// The event file at path continued: appended to, and given its first event when it is empty.
void tfevents_append(TfWriter* w, const char* path, double wall_time);
// Appends one event of scalars and flushes it to the file; 0, or -1 when it cannot be written.
int tfevents_write(TfWriter* w, const TfEvent* e);
// 0, or -1 when the last writes could not be completed.
int tfevents_close(TfWriter* w);
// The newest event file of dir (the largest <unix seconds> of its name) into path: 1, or 0 when
// dir has none.
int tfevents_find_latest(const char* dir, char* path, size_t cap);
// Seconds since the epoch (the wall_time of an event).
double tfevents_now(void);

#ifdef __cplusplus
}
#endif
#endif // LLMC_TFEVENTS_H
