#include "base/crc32c.h"
#include "base/check.h"
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u // reflected Castagnoli polynomial

// table[k][b]: CRC of byte b followed by k zero bytes; slicing-by-8 folds 8 bytes per step.
static uint32_t g_table[8][256];
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void crc32c_init_table(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        g_table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++) g_table[k][b] = (g_table[k - 1][b] >> 8) ^ g_table[0][g_table[k - 1][b] & 0xFF];
}

uint32_t crc32c_sw(uint32_t crc, const void* data, size_t n) {
    pthread_once(&g_table_once, crc32c_init_table);
    const unsigned char* p = (const unsigned char*)data;
    uint32_t c = ~crc;
    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--) c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xFF];
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8); // little-endian hosts only (checked in checkpoint.c's formats)
        w ^= c;
        c = g_table[7][w & 0xFF] ^ g_table[6][(w >> 8) & 0xFF] ^ g_table[5][(w >> 16) & 0xFF] ^
            g_table[4][(w >> 24) & 0xFF] ^ g_table[3][(w >> 32) & 0xFF] ^ g_table[2][(w >> 40) & 0xFF] ^
            g_table[1][(w >> 48) & 0xFF] ^ g_table[0][w >> 56];
    }
    for (; n > 0; n--) c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xFF];
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
// The CRC32 instruction computes exactly this polynomial, 8 bytes per instruction. Compiled for
// SSE4.2 whatever -march says, and only called after the CPU was asked (crc32c_hw_available).
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    uint64_t c = ~crc;
    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    for (; n > 0; n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
int crc32c_hw_available(void) { return __builtin_cpu_supports("sse4.2"); }
#else
static uint32_t crc32c_hw(uint32_t crc, const void* data, size_t n) { return crc32c_sw(crc, data, n); }
int crc32c_hw_available(void) { return 0; }
#endif

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
    return crc32c_hw_available() ? crc32c_hw(crc, data, n) : crc32c_sw(crc, data, n);
}

void crc32c_file(const char* path, uint64_t* size, uint32_t* crc) {
    const size_t chunk = (size_t)1 << 20;
    unsigned char* buf = (unsigned char*)mallocCheck(chunk);
    FILE* fp = fopenCheck(path, "rb");
    uint64_t n = 0;
    uint32_t c = 0;
    for (;;) {
        size_t got = fread(buf, 1, chunk, fp);
        c = crc32c(c, buf, got);
        n += got;
        if (got < chunk) break;
    }
    int err = ferror(fp);
    fclose(fp);
    free(buf);
    if (err) fatal("the file system returned a read error", "'%s': read error while computing its checksum", path);
    *size = n;
    *crc = c;
}
