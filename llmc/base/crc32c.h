// CRC-32C (Castagnoli polynomial, reflected 0x82F63B78; the checksum of iSCSI, ext4 and SCTP),
// used to detect flipped or lost bytes in the checkpoint files this tool writes for itself.
// Hardware CRC instruction (x86-64 SSE4.2) when the CPU has it, else a slicing-by-8 table
// method; both give the same value.
#ifndef LLMC_CRC32C_H
#define LLMC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// CRC of data[0..n) continuing from crc (0 for the first piece), so that
// crc32c(crc32c(0, a, na), b, nb) == crc32c(0, a || b, na + nb). crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);
// The portable table method alone (tests compare it with the hardware path).
uint32_t crc32c_sw(uint32_t crc, const void* data, size_t n);
// 1 when crc32c() uses the CPU's CRC instruction.
int crc32c_hw_available(void);
// Size and CRC-32C of a whole file, read in 1 MiB chunks; fatal if it cannot be read.
void crc32c_file(const char* path, uint64_t* size, uint32_t* crc);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CRC32C_H
