// Batch-file format v1 (docs/FORMAT.md): a 128-byte versioned header, then labels (int32), sample
// ids (int64), an offset index (JPEG only) and the images, each section 64-byte aligned and
// covered by its own CRC32C; the header carries those CRCs and a CRC of itself.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace convoy {

class AtomicFile;

enum class Encoding : uint32_t { raw = 0, jpeg = 1 };
const char* encoding_name(Encoding e);
Encoding parse_encoding(const std::string& name);  // "raw" | "jpeg"

struct ImageShape {
  uint32_t height = 0, width = 0, channels = 0;
  size_t bytes() const { return size_t(height) * width * channels; }
  bool operator==(const ImageShape& o) const {
    return height == o.height && width == o.width && channels == o.channels;
  }
};

#pragma pack(push, 1)
struct BatchHeader {
  char magic[8];          // "CVYBATCH"
  uint32_t version;       // 1
  uint32_t header_bytes;  // 128
  uint32_t count;         // samples in this file
  uint32_t height, width, channels;
  uint32_t encoding;       // Encoding
  uint32_t batch_index;    // this file's number in its dataset
  uint64_t labels_offset;  // int32[count]
  uint64_t ids_offset;     // int64[count]
  uint64_t index_offset;   // uint64[count + 1] offsets into the images section (JPEG only)
  uint64_t images_offset;
  uint64_t images_bytes;
  uint64_t file_bytes;
  uint32_t labels_crc, ids_crc, index_crc, images_crc;  // each over its section and its padding
  uint8_t reserved[20];                                 // zero
  uint32_t header_crc;                                  // over bytes [0, 124)
};
#pragma pack(pop)
static_assert(sizeof(BatchHeader) == 128, "batch header is 128 bytes");

constexpr uint32_t kBatchVersion = 1;
constexpr size_t kBatchAlign = 64;

// The name of a dataset's batch file b: batch_00042.cvb (five digits, so that a listing sorts the
// files in batch order up to 100 000 of them; more digits where there are more).
std::string batch_file_name(uint64_t b);

// One batch file in memory.
struct Batch {
  ImageShape shape;
  Encoding encoding = Encoding::raw;
  uint32_t batch_index = 0;
  std::vector<int32_t> labels;
  std::vector<int64_t> ids;       // index of each sample in the dataset's input index
  std::vector<uint8_t> images;    // raw: count * shape.bytes(); JPEG: the encoded samples back to back
  std::vector<uint64_t> offsets;  // JPEG only: count + 1 offsets into images

  size_t count() const { return labels.size(); }
  const uint8_t* raw_image(size_t i) const { return images.data() + i * shape.bytes(); }
};

// The header of a batch file of n samples whose images take images_bytes (raw: n x shape bytes):
// every offset and size, no CRCs yet.
BatchHeader batch_layout(const ImageShape& shape, Encoding encoding, uint32_t batch_index, uint64_t n,
                         uint64_t images_bytes);
// A batch file built in memory in place (h.file_bytes at `file`, the images already at
// h.images_offset): the header, labels, ids, JPEG offsets (n + 1; raw: nullptr) and padding written
// before the images, and every CRC filled in, into h too. images_crc: the images' CRC if the caller
// has it (from its pieces, crc32c.h's Crc32cAppend), else nullptr and it is computed here.
void seal_batch_in_place(uint8_t* file, BatchHeader& h, const int32_t* labels, const int64_t* ids,
                         const uint64_t* offsets, const uint32_t* images_crc);

// Lays the batch out as file bytes (header and CRCs filled in).
std::vector<uint8_t> encode_batch(const Batch& batch);
// Writes it atomically (temporary name, fsync, rename); returns the header CRC, which covers
// every section's CRC and so stands for the whole file in dataset.json.
uint32_t write_batch_file(const std::string& path, const Batch& batch);
// The same bytes into an open file, not yet committed (the caller times or orders the commit).
uint32_t write_batch(AtomicFile& file, const Batch& batch);

// A batch file checked in place: its header and accessors into the caller's bytes, which must
// outlive the view. Lets a reader use a file's samples without copying the file.
struct BatchView {
  BatchHeader header;
  const uint8_t* data = nullptr;  // the whole file

  size_t count() const { return header.count; }
  ImageShape shape() const { return {header.height, header.width, header.channels}; }
  int32_t label(size_t i) const;
  int64_t id(size_t i) const;
  uint64_t offset(size_t i) const;  // JPEG only, i <= count
  const uint8_t* images() const { return data + header.images_offset; }
};

// The four CRC'd sections in file order (labels, ids, index, images): together they cover every
// byte after the header.
struct BatchSection {
  const char* name;
  uint64_t begin, end;
  uint32_t crc;  // as the header records it
};
std::array<BatchSection, 4> batch_sections(const BatchHeader& h);

// Checks a header against itself and the file's `size` (magic, version, header CRC, layout, size):
// `data` holds the file's first min(size, 128) bytes. Throws Error("<path>: <problem>").
BatchHeader check_batch_header(const std::string& path, const uint8_t* data, size_t size);
// Checks bytes read from `path` (used in messages) without copying them: the header, every
// section CRC, the padding and the JPEG index. `section_crcs`, when given, are the sections' CRCs
// computed by the caller while reading (in batch_sections order); else they are computed here.
BatchView verify_batch(const std::string& path, const uint8_t* data, size_t size,
                       const uint32_t* section_crcs = nullptr);
// verify_batch, then copies the sections out.
Batch decode_batch(const std::string& path, const uint8_t* data, size_t size);
Batch read_batch_file(const std::string& path);
// The header alone, checked against its CRC and the file's size (no section CRCs).
BatchHeader read_batch_header(const std::string& path);
// Full check without throwing: returns "" if the file is sound, else the problem.
std::string check_batch_file(const std::string& path, uint32_t* header_crc = nullptr);

}  // namespace convoy
