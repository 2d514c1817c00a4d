// CRC32C (Castagnoli), the checksum of every batch file and checkpoint. Uses the SSE4.2 crc32
// instruction where the CPU has it and a table otherwise; both give the same value.
#pragma once
#include <cstddef>
#include <cstdint>

namespace convoy {

// Extends crc (0 for a fresh checksum) over n bytes. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace convoy
