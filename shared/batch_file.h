// Batch-file formats v1 and v2 (docs/FORMAT.md): a 128-byte versioned header, then labels (int32),
// sample ids (int64), each sample's height and width (v2 only), an offset index (JPEG and v2) and
// the images, each section 64-byte aligned and covered by its own CRC32C; the header carries those
// CRCs and a CRC of itself. v1 holds images of one shape; v2 each image at its own size.
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
  char magic[8];                     // "CVYBATCH"
  uint32_t version;                  // 1 or 2
  uint32_t header_bytes;             // 128
  uint32_t count;                    // samples in this file
  uint32_t height, width, channels;  // v2: 0, 0, channels (each sample's size is in the dims section)
  uint32_t encoding;                 // Encoding
  uint32_t batch_index;              // this file's number in its dataset
  uint64_t labels_offset;            // int32[count]
  uint64_t ids_offset;               // int64[count]
  uint64_t index_offset;             // uint64[count + 1] offsets into the images section (JPEG, and every v2 file)
  uint64_t images_offset;
  uint64_t images_bytes;
  uint64_t file_bytes;
  uint32_t labels_crc, ids_crc, index_crc, images_crc;  // each over its section and its padding
  uint64_t dims_offset;                                 // v2: uint32[count][2] height, width; v1: 0
  uint32_t dims_crc;                                    // v2: over the dims section; v1: 0
  uint8_t reserved[8];                                  // zero
  uint32_t header_crc;                                  // over bytes [0, 124)
};
#pragma pack(pop)
static_assert(sizeof(BatchHeader) == 128, "batch header is 128 bytes");

constexpr uint32_t kBatchVersion = 1;   // one image shape for every sample
constexpr uint32_t kBatchVersion2 = 2;  // each sample its own height and width
constexpr size_t kBatchAlign = 64;

// The name of a dataset's batch file b: batch_00042.cvb (five digits, so that a listing sorts the
// files in batch order up to 100 000 of them; more digits where there are more).
std::string batch_file_name(uint64_t b);

// One batch file in memory.
struct Batch {
  uint32_t version = kBatchVersion;
  ImageShape shape;  // v2: height and width 0
  Encoding encoding = Encoding::raw;
  uint32_t batch_index = 0;
  std::vector<int32_t> labels;
  std::vector<int64_t> ids;       // index of each sample in the dataset's input index
  std::vector<uint8_t> images;    // raw: count * shape.bytes(); JPEG: the encoded samples back to back
  std::vector<uint64_t> offsets;  // JPEG and v2: count + 1 offsets into images
  std::vector<uint32_t> dims;     // v2 only: height, width of each sample (2 x count)

  size_t count() const { return labels.size(); }
  // Sample i's shape: the batch's (v1) or its own (v2).
  ImageShape sample_shape(size_t i) const {
    return version == kBatchVersion ? shape : ImageShape{dims[2 * i], dims[2 * i + 1], shape.channels};
  }
  const uint8_t* raw_image(size_t i) const {
    return images.data() + (version == kBatchVersion ? i * shape.bytes() : offsets[i]);
  }
};

// The header of a batch file of n samples whose images take images_bytes (raw v1: n x shape
// bytes): every offset and size, no CRCs yet. version 2: shape's height and width are ignored
// (written as 0), and the file has a dims section and an index for either encoding.
BatchHeader batch_layout(const ImageShape& shape, Encoding encoding, uint32_t batch_index, uint64_t n,
                         uint64_t images_bytes, uint32_t version = kBatchVersion);
// A batch file built in memory in place (h.file_bytes at `file`, the images already at
// h.images_offset): the header, labels, ids, dims (v2: 2n; v1: nullptr), offsets (n + 1, JPEG and
// v2; else nullptr) and padding written before the images, and every CRC filled in, into h too.
// images_crc: the images' CRC if the caller has it (from its pieces, crc32c.h's Crc32cAppend),
// else nullptr and it is computed here.
void seal_batch_in_place(uint8_t* file, BatchHeader& h, const int32_t* labels, const int64_t* ids,
                         const uint64_t* offsets, const uint32_t* images_crc, const uint32_t* dims = nullptr);

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
  bool varied() const { return header.version == kBatchVersion2; }  // each sample its own size
  ImageShape shape() const { return {header.height, header.width, header.channels}; }
  // Sample i's shape: the file's (v1) or its own from the dims section (v2).
  ImageShape sample_shape(size_t i) const;
  int32_t label(size_t i) const;
  int64_t id(size_t i) const;
  uint64_t offset(size_t i) const;  // JPEG and v2, i <= count
  const uint8_t* images() const { return data + header.images_offset; }
  // Sample i's bytes (raw pixels or a JPEG stream) and their length.
  const uint8_t* sample(size_t i) const;
  size_t sample_bytes(size_t i) const;
};

// The five CRC'd sections in file order (labels, ids, dims, index, images): together they cover
// every byte after the header. A v1 file's dims section is empty.
struct BatchSection {
  const char* name;
  uint64_t begin, end;
  uint32_t crc;  // as the header records it
};
std::array<BatchSection, 5> batch_sections(const BatchHeader& h);

// Checks a header against itself and the file's `size` (magic, version, header CRC, layout, size):
// `data` holds the file's first min(size, 128) bytes. Throws Error("<path>: <problem>").
BatchHeader check_batch_header(const std::string& path, const uint8_t* data, size_t size);
// Checks bytes read from `path` (used in messages) without copying them: the header, every
// section CRC, the padding, the index and (v2) each sample's size against its bytes. `section_crcs`, when given, are
// the sections' CRCs computed by the caller while reading (in batch_sections order); else they are computed here.
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
