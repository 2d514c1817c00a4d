// CRC32C (Castagnoli), the checksum of every batch file and checkpoint. Uses the SSE4.2 crc32
// instruction where the CPU has it and a table otherwise; both give the same value.
#pragma once
#include <cstddef>
#include <cstdint>

namespace convoy {

// Extends crc (0 for a fresh checksum) over n bytes. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The checksum of A followed by B from crc32c(A) and crc32c(B), for pieces B of one length: each
// piece can be checksummed where it is made (while in cache), and the whole from the pieces'
// checksums without reading the bytes again.
class Crc32cAppend {
 public:
  explicit Crc32cAppend(size_t piece_bytes);
  // crc32c(A || B) for crc_a = crc32c(A) and crc_b = crc32c(B), B of piece_bytes.
  uint32_t operator()(uint32_t crc_a, uint32_t crc_b) const;

 private:
  uint32_t column_[32];  // the register after piece_bytes zero bytes, for each bit set alone
};

}  // namespace convoy
