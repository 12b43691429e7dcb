// TensorBoard event files (llmc/run/tfevents.c) against the `tensorboard` package's own writer:
// test/ref/tfevents/events.out.tfevents.1700000000.ref (dev/gen_tfevents_ref.py) is read by our
// reader (every length and both CRCs of every record checked, every Event decoded to the
// generator's table), and the same events written by our writer are that file byte for byte.
// Comparable: everything but what the reference's writer chose itself, the wall time and the
// SourceMetadata.writer of its first event ("tensorboard.summary.writer.event_file_writer"; ours
// names this tool), which our first event takes from the reference for the comparison; the file
// name is not compared (the reference's is renamed). A byte flipped anywhere, or a file cut
// anywhere but between records, is refused. The masked CRC of known bytes is tensorboard's
// masked_crc32c of them. Then a file written and continued in a directory as the trainers do.
//
//   test_tfevents              the checks
//   test_tfevents dump FILE    FILE's events, one line per scalar: "STEP TAG VALUE" (%.9g), after
//                              a line "version V writer W"; exit 1 naming a bad record
#define _GNU_SOURCE
#include "test.h"
#include "../llmc/run/tfevents.h"
#include "../llmc/base/fileio.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REF "test/ref/tfevents/events.out.tfevents.1700000000.ref"

// dev/gen_tfevents_ref.py's EVENTS (after its first event, the file version)
typedef struct {
    double wall;
    int64_t step;
    int n;
    TfValue v[3];
} RefEvent;
static const double REF_FIRST_WALL = 1700000000.25;
static const RefEvent REF_EVENTS[] = {
    {1700000001.5, 1, 3, {{"train/loss", 3.9453125f}, {"train/learning_rate", 0.0004f}, {"train/grad_norm", 0.875f}}},
    {1700000002.75, 300, 2, {{"train/loss", -0.5f}, {"train/epoch", 0.0f}}},
    {1700000003.0, 300, 2, {{"eval/loss", 4.25f}, {"eval/rewards/accuracies", 0.625f}}},
    {1700000004.0, ((int64_t)1 << 40) + 3, 1, {{"train/tokens_per_second", 123456.78f}}},
    {1700000005.0, 0, 1, {{"train/mfu", 1e-30f}}},
};
#define NREF ((int)(sizeof(REF_EVENTS) / sizeof(REF_EVENTS[0])))

static TfEvent ref_event(int i) {
    TfEvent e;
    memset(&e, 0, sizeof(e));
    e.wall_time = REF_EVENTS[i].wall;
    e.step = REF_EVENTS[i].step;
    e.nvalues = REF_EVENTS[i].n;
    for (int k = 0; k < e.nvalues; k++) e.values[k] = REF_EVENTS[i].v[k];
    return e;
}

// Reads every record of buf; returns the count of good records, *end the result of the last call
// (0: the end reached, -1: a bad record).
static int count_records(const uint8_t* buf, size_t len, int* end) {
    size_t pos = 0, n = 0;
    const uint8_t* d;
    int r, k = 0;
    while ((r = tfevents_next_record(buf, len, &pos, &d, &n)) == 1) k++;
    *end = r;
    return k;
}

static int same_event(const TfEvent* a, const TfEvent* b) {
    if (a->wall_time != b->wall_time || a->step != b->step || a->nvalues != b->nvalues || strcmp(a->file_version, b->file_version) ||
        strcmp(a->source_writer, b->source_writer))
        return 0;
    for (int k = 0; k < a->nvalues; k++)
        if (strcmp(a->values[k].tag, b->values[k].tag) || memcmp(&a->values[k].value, &b->values[k].value, 4)) return 0;
    return 1;
}

static void test_masked_crc(const uint8_t* ref, size_t len) {
    // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c of these bytes
    uint8_t seq[32];
    for (int i = 0; i < 32; i++) seq[i] = (uint8_t)i;
    TEST_CHECK(tfevents_masked_crc("123456789", 9) == 0xc78ab0e5u, "masked CRC of \"123456789\": %08x", tfevents_masked_crc("123456789", 9));
    TEST_CHECK(tfevents_masked_crc("", 0) == 0xa282ead8u, "masked CRC of nothing: %08x", tfevents_masked_crc("", 0));
    TEST_CHECK(tfevents_masked_crc(seq, 32) == 0x951f7892u, "masked CRC of 0..31: %08x", tfevents_masked_crc(seq, 32));
    // and the reference file's first header CRC, as its writer computed it
    TEST_CHECK(len >= 12, "reference too short: %zu bytes", len);
    const uint32_t want = (uint32_t)ref[8] | (uint32_t)ref[9] << 8 | (uint32_t)ref[10] << 16 | (uint32_t)ref[11] << 24;
    TEST_CHECK(tfevents_masked_crc(ref, 8) == want, "masked CRC of the first length: %08x, the file has %08x", tfevents_masked_crc(ref, 8), want);
}

// Our reader on the reference: every record good, the events those of the generator's table.
static TfEvent test_read_reference(const uint8_t* ref, size_t len) {
    TfEvent first;
    memset(&first, 0, sizeof(first));
    size_t pos = 0, n = 0;
    const uint8_t* d;
    int i = 0, r;
    while ((r = tfevents_next_record(ref, len, &pos, &d, &n)) == 1) {
        TfEvent e;
        const int bad = tfevents_decode_event(d, n, &e);
        TEST_CHECK(!bad, "reference event %d does not decode", i);
        if (i == 0) {
            first = e;
            TEST_CHECK(!strcmp(e.file_version, TFEVENTS_FILE_VERSION) && e.wall_time == REF_FIRST_WALL && e.nvalues == 0 && e.step == 0,
                       "first event: version '%s', wall %.17g, %d values, step %lld", e.file_version, e.wall_time, e.nvalues, (long long)e.step);
            TEST_CHECK(!strcmp(e.source_writer, "tensorboard.summary.writer.event_file_writer"), "first event's writer '%s'", e.source_writer);
        } else if (i <= NREF) {
            const TfEvent want = ref_event(i - 1);
            TEST_CHECK(same_event(&e, &want), "reference event %d: step %lld, %d values, first '%s' %.9g", i, (long long)e.step, e.nvalues,
                       e.nvalues ? e.values[0].tag : "", e.nvalues ? e.values[0].value : 0.0);
        }
        i++;
    }
    TEST_CHECK(r == 0 && pos == len && i == NREF + 1, "reference: %d records read, then %d at byte %zu of %zu", i, r, pos, len);
    return first;
}

// Our writer on the same events: the reference, byte for byte.
static void test_write_like_reference(const uint8_t* ref, size_t len, const TfEvent* ref_first) {
    char* buf = NULL;
    size_t n = 0;
    TfWriter w = {open_memstream(&buf, &n), ""};
    TEST_CHECK(w.fp != NULL, "open_memstream");
    if (!w.fp) return;
    TfEvent first;
    memset(&first, 0, sizeof(first));
    first.wall_time = ref_first->wall_time; // (what the reference's writer chose for itself)
    snprintf(first.file_version, sizeof(first.file_version), "%s", TFEVENTS_FILE_VERSION);
    snprintf(first.source_writer, sizeof(first.source_writer), "%s", ref_first->source_writer);
    int bad = tfevents_write(&w, &first);
    for (int i = 0; i < NREF; i++) {
        const TfEvent e = ref_event(i);
        bad |= tfevents_write(&w, &e);
    }
    bad |= tfevents_close(&w);
    size_t at = 0;
    while (at < n && at < len && (uint8_t)buf[at] == ref[at]) at++;
    TEST_CHECK(!bad && n == len && at == len, "our file: %zu bytes, the reference %zu; first difference at byte %zu", n, len, at);
    free(buf);
}

// Every byte flipped in turn: some record is refused (never read as good data); every cut short
// of a record's end is refused, a cut between records reads as the end.
static void test_damage(const uint8_t* ref, size_t len) {
    uint8_t* b = malloc(len);
    int missed = 0, cut_wrong = 0, end;
    for (size_t i = 0; i < len; i++) {
        memcpy(b, ref, len);
        b[i] ^= 0xff;
        const int k = count_records(b, len, &end);
        if (end != -1 || k > NREF) missed++;
        memcpy(b, ref, len);
        b[i] ^= 0x01; // (a single bit, too)
        if (count_records(b, len, &end) > NREF || end != -1) missed++;
    }
    TEST_CHECK(missed == 0, "%d flipped bytes or bits read as good records", missed);
    size_t bounds[NREF + 2], nb = 0, pos = 0, n;
    const uint8_t* d;
    bounds[nb++] = 0;
    while (nb < NREF + 2 && tfevents_next_record(ref, len, &pos, &d, &n) == 1) bounds[nb++] = pos;
    for (size_t cut = 0; cut < len; cut++) {
        int boundary = 0;
        for (size_t j = 0; j < nb; j++) boundary |= bounds[j] == cut;
        const int k = count_records(ref, cut, &end);
        if (boundary ? end != 0 : end != -1 || k >= NREF + 1) cut_wrong++;
    }
    TEST_CHECK(cut_wrong == 0, "%d cuts of the file misread", cut_wrong);
    free(b);
}

// Malformed protobufs: refused, not read past their end.
static void test_malformed(void) {
    TfEvent e = ref_event(0), got;
    uint8_t data[512];
    const size_t n = tfevents_encode_event(&e, data, sizeof(data));
    TEST_CHECK(n != TFEVENTS_NO_FIT && tfevents_decode_event(data, n, &got) == 0 && same_event(&got, &e), "round trip of an event");
    int accepted = 0;
    for (size_t cut = 1; cut < n; cut++) accepted += tfevents_decode_event(data, cut, &got) == 0 && same_event(&got, &e);
    TEST_CHECK(accepted == 0, "%d cut protobufs decoded as the whole event", accepted);
    const uint8_t long_len[] = {0x2a, 0x7f, 0x0a}; // summary of 127 bytes, 1 there
    const uint8_t bad_wire[] = {0x0b};              // field 1, wire type 3 (groups: not in these files)
    const uint8_t endless[] = {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    TEST_CHECK(tfevents_decode_event(long_len, sizeof(long_len), &got) == -1, "a length past the end is refused");
    TEST_CHECK(tfevents_decode_event(bad_wire, sizeof(bad_wire), &got) == -1, "wire type 3 is refused");
    TEST_CHECK(tfevents_decode_event(endless, sizeof(endless), &got) == -1, "an 11-byte varint is refused");
    TEST_CHECK(tfevents_encode_event(&e, data, 10) == TFEVENTS_NO_FIT, "an event that does not fit: TFEVENTS_NO_FIT");
    TfEvent empty;
    memset(&empty, 0, sizeof(empty));
    TEST_CHECK(tfevents_encode_event(&empty, data, sizeof(data)) == 0 && tfevents_decode_event(data, 0, &got) == 0 && same_event(&got, &empty),
               "an event of defaults only: 0 bytes, and 0 bytes decode to it");
}

// A file made in a directory as the trainers make it, found again, continued.
static void test_directory(void) {
    char dir[] = "/tmp/llmc-tfevents.XXXXXX", path[LLMC_PATH_MAX], found[LLMC_PATH_MAX];
    TEST_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    TEST_CHECK(!tfevents_find_latest(dir, found, sizeof(found)), "an empty directory has no event file");
    TfWriter w;
    tfevents_create(&w, dir, 1700000100.5);
    snprintf(path, sizeof(path), "%s", w.path);
    TEST_CHECK(strstr(path, "/events.out.tfevents.1700000100.") != NULL, "file name '%s'", path);
    TfEvent e = ref_event(0);
    TEST_CHECK(tfevents_write(&w, &e) == 0 && tfevents_close(&w) == 0, "write and close");
    char older[LLMC_PATH_MAX + 64];
    snprintf(older, sizeof(older), "%s/events.out.tfevents.999.other", dir); // an older file beside it
    FILE* f = fopen(older, "wb");
    if (f) fclose(f);
    TEST_CHECK(tfevents_find_latest(dir, found, sizeof(found)) && !strcmp(found, path), "newest file: '%s', want '%s'", found, path);
    tfevents_append(&w, found, 1700000200.0);
    e = ref_event(1);
    TEST_CHECK(tfevents_write(&w, &e) == 0 && tfevents_close(&w) == 0, "append and close");
    size_t len = 0;
    uint8_t* buf = (uint8_t*)read_file_all(path, &len);
    size_t pos = 0, n;
    const uint8_t* d;
    TfEvent got[4];
    int k = 0;
    while (k < 4 && tfevents_next_record(buf, len, &pos, &d, &n) == 1 && tfevents_decode_event(d, n, &got[k]) == 0) k++;
    TEST_CHECK(k == 3 && pos == len && !strcmp(got[0].source_writer, TFEVENTS_WRITER) && got[0].wall_time == 1700000100.5 &&
               got[1].step == 1 && got[2].step == 300, "continued file: %d events, %zu of %zu bytes", k, pos, len);
    free(buf);
    // an empty file continued gets its first event
    tfevents_append(&w, older, 1700000300.0);
    TEST_CHECK(tfevents_close(&w) == 0, "close");
    buf = (uint8_t*)read_file_all(older, &len);
    pos = 0;
    TEST_CHECK(tfevents_next_record(buf, len, &pos, &d, &n) == 1 && tfevents_decode_event(d, n, &got[0]) == 0 &&
               !strcmp(got[0].file_version, TFEVENTS_FILE_VERSION) && pos == len, "an empty file continued starts with the file version");
    free(buf);
    unlink(older);
    unlink(path);
    rmdir(dir);
}

static int dump(const char* path) {
    size_t len = 0, pos = 0, n;
    uint8_t* buf = (uint8_t*)read_file_all(path, &len);
    const uint8_t* d;
    int r, i = 0;
    while ((r = tfevents_next_record(buf, len, &pos, &d, &n)) == 1) {
        TfEvent e;
        if (tfevents_decode_event(d, n, &e)) { fprintf(stderr, "%s: event %d (byte %zu) does not decode\n", path, i, pos); return 1; }
        if (e.file_version[0]) printf("version %s writer %s\n", e.file_version, e.source_writer[0] ? e.source_writer : "-");
        for (int k = 0; k < e.nvalues; k++) printf("%lld %s %.9g\n", (long long)e.step, e.values[k].tag, e.values[k].value);
        i++;
    }
    free(buf);
    if (r < 0) { fprintf(stderr, "%s: record %d at byte %zu of %zu is cut short or fails its CRC\n", path, i, pos, len); return 1; }
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "dump")) return dump(argv[2]);
    size_t len = 0;
    uint8_t* ref = (uint8_t*)read_file_all(REF, &len);
    test_masked_crc(ref, len);
    const TfEvent first = test_read_reference(ref, len);
    test_write_like_reference(ref, len, &first);
    test_damage(ref, len);
    test_malformed();
    test_directory();
    free(ref);
    return test_finish("test_tfevents");
}
