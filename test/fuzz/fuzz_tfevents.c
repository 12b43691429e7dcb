// TensorBoard event files (llmc/run/tfevents.c; a resumed run reads its event file back): any
// bytes through tfevents_next_record, and every good record's data, and the input itself as one
// protobuf (a record's CRCs stop most mutations before the decoder), through
// tfevents_decode_event. A record is accepted only inside the input and positions only advance;
// a decoded event's strings end inside their arrays, and it encodes and decodes back to itself.
// The reader never calls fatal(), so LeakSanitizer stays on.
#include "fuzz.h"
#include "run/tfevents.h"

static int same_bits(const void* a, const void* b, size_t n) { return memcmp(a, b, n) == 0; }

// e encoded and decoded again is e (a zero wall time of either sign is left out, so reads as +0).
static void round_trip(const TfEvent* e) {
    if (strnlen(e->file_version, sizeof(e->file_version)) >= sizeof(e->file_version) ||
        strnlen(e->source_writer, sizeof(e->source_writer)) >= sizeof(e->source_writer) || e->nvalues < 0 || e->nvalues > TFEVENTS_MAX_VALUES)
        abort();
    static uint8_t buf[8192];
    TfEvent again;
    const size_t n = tfevents_encode_event(e, buf, sizeof(buf));
    if (n == TFEVENTS_NO_FIT || tfevents_decode_event(buf, n, &again) != 0) abort(); // (every decodable event fits)
    const int wall_same = e->wall_time == 0.0 ? again.wall_time == 0.0 : same_bits(&e->wall_time, &again.wall_time, 8);
    if (!wall_same || again.step != e->step || strcmp(again.file_version, e->file_version) || strcmp(again.source_writer, e->source_writer) ||
        again.nvalues != e->nvalues)
        abort();
    for (int k = 0; k < e->nvalues; k++) {
        if (strnlen(e->values[k].tag, TFEVENTS_MAX_TAG) >= TFEVENTS_MAX_TAG) abort();
        if (strcmp(again.values[k].tag, e->values[k].tag) || !same_bits(&again.values[k].value, &e->values[k].value, 4)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    size_t pos = 0, n = 0, last = 0;
    const uint8_t* d = NULL;
    TfEvent e;
    while (tfevents_next_record(data, size, &pos, &d, &n) == 1) {
        if (pos <= last || pos > size || d < data + last || n > size || d + n > data + size) abort();
        last = pos;
        if (tfevents_decode_event(d, n, &e) == 0) round_trip(&e);
    }
    if (pos != last) abort(); // (a refused record leaves the position where it starts)
    if (tfevents_decode_event(data, size, &e) == 0) round_trip(&e);
    return 0;
}
