// Batch-file formats v1 and v2: encode, write atomically, read and verify. Every byte after the header is
// in exactly one CRC'd section (padding included), and the header is CRC'd itself, so any flipped
// byte or truncation is caught.
#include "shared/batch_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "shared/atomic_file.h"
#include "shared/crc32c.h"
#include "shared/error.h"

namespace convoy {
namespace {

constexpr char kMagic[8] = {'C', 'V', 'Y', 'B', 'A', 'T', 'C', 'H'};
constexpr size_t kHeaderCrcBytes = offsetof(BatchHeader, header_crc);

uint64_t align_up(uint64_t x) { return (x + kBatchAlign - 1) / kBatchAlign * kBatchAlign; }

std::string str(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string batch_file_name(uint64_t b) {
  char name[32];
  std::snprintf(name, sizeof name, "batch_%05llu.cvb", (unsigned long long)b);
  return name;
}

namespace {

// Where a file's sections start, from its version, encoding and count alone.
struct Offsets {
  uint64_t labels, ids, dims, index, images;
};

Offsets offsets_of(uint32_t version, bool jpeg, uint64_t n) {
  const bool v2 = version == kBatchVersion2;
  Offsets o;
  o.labels = align_up(sizeof(BatchHeader));
  o.ids = align_up(o.labels + n * sizeof(int32_t));
  o.dims = v2 ? align_up(o.ids + n * sizeof(int64_t)) : 0;
  o.index = v2 ? align_up(o.dims + n * 2 * sizeof(uint32_t)) : align_up(o.ids + n * sizeof(int64_t));
  o.images = jpeg || v2 ? align_up(o.index + (n + 1) * sizeof(uint64_t)) : o.index;
  return o;
}

}  // namespace

BatchHeader batch_layout(const ImageShape& shape, Encoding encoding, uint32_t batch_index, uint64_t n,
                         uint64_t images_bytes, uint32_t version) {
  const bool v2 = version == kBatchVersion2;
  BatchHeader h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = v2 ? kBatchVersion2 : kBatchVersion;
  h.header_bytes = sizeof(BatchHeader);
  h.count = static_cast<uint32_t>(n);
  h.height = v2 ? 0 : shape.height;
  h.width = v2 ? 0 : shape.width;
  h.channels = shape.channels;
  h.encoding = static_cast<uint32_t>(encoding);
  h.batch_index = batch_index;
  const Offsets o = offsets_of(h.version, encoding == Encoding::jpeg, n);
  h.labels_offset = o.labels;
  h.ids_offset = o.ids;
  h.dims_offset = o.dims;
  h.index_offset = o.index;
  h.images_offset = o.images;
  h.images_bytes = images_bytes;
  h.file_bytes = h.images_offset + h.images_bytes;
  return h;
}

const char* encoding_name(Encoding e) { return e == Encoding::jpeg ? "jpeg" : "raw"; }

Encoding parse_encoding(const std::string& name) {
  if (name == "raw") return Encoding::raw;
  if (name == "jpeg") return Encoding::jpeg;
  fail("unknown encoding '" + name + "' (expected raw or jpeg)");
}

namespace {

// The header of a batch: every offset and size, no CRCs yet. Checks that the batch is consistent.
BatchHeader layout(const Batch& b) {
  const uint64_t n = b.count();
  if (b.ids.size() != n) fail("batch " + str(b.batch_index) + ": ids and labels differ in count");
  const bool jpeg = b.encoding == Encoding::jpeg, v2 = b.version == kBatchVersion2;
  if (b.version != kBatchVersion && !v2) fail("batch " + str(b.batch_index) + ": unknown version " + str(b.version));
  if (!jpeg && !v2 && b.images.size() != n * b.shape.bytes())
    fail("batch " + str(b.batch_index) + ": image bytes do not match count x shape");
  if ((jpeg || v2) && (b.offsets.size() != n + 1 || b.offsets.back() != b.images.size()))
    fail("batch " + str(b.batch_index) + ": offsets do not match the image bytes");
  if (v2 && b.dims.size() != 2 * n) fail("batch " + str(b.batch_index) + ": dims do not match the count");
  return batch_layout(b.shape, b.encoding, b.batch_index, n, b.images.size(), b.version);
}

// One section's bytes as the file holds them: its data, then zero padding up to the next section.
struct Section {
  const void* data;
  uint64_t bytes, padded;
};

// The five sections of a layout, in file order (a v1 file's dims section is empty).
std::array<Section, 5> sections(const BatchHeader& h, const int32_t* labels, const int64_t* ids, const uint32_t* dims,
                                const uint64_t* offsets, const uint8_t* images) {
  const uint64_t n = h.count;
  const bool v2 = h.version == kBatchVersion2;
  const bool indexed = v2 || h.encoding == uint32_t(Encoding::jpeg);
  const uint64_t ids_end = v2 ? h.dims_offset : h.index_offset;
  return {{{labels, n * sizeof(int32_t), h.ids_offset - h.labels_offset},
           {ids, n * sizeof(int64_t), ids_end - h.ids_offset},
           {dims, v2 ? n * 2 * sizeof(uint32_t) : 0, v2 ? h.index_offset - h.dims_offset : 0},
           {offsets, indexed ? (n + 1) * sizeof(uint64_t) : 0, h.images_offset - h.index_offset},
           {images, h.images_bytes, h.file_bytes - h.images_offset}}};
}

std::array<Section, 5> sections(const Batch& b, const BatchHeader& h) {
  return sections(h, b.labels.data(), b.ids.data(), b.dims.data(), b.offsets.data(), b.images.data());
}

constexpr uint8_t kZeros[kBatchAlign] = {};

uint32_t section_crc(const Section& s) { return crc32c(kZeros, s.padded - s.bytes, crc32c(s.data, s.bytes)); }

// Fills in the section CRCs and then the header's own (a v1 file has no dims CRC: its field is 0).
void seal(BatchHeader& h, const std::array<Section, 5>& s) {
  h.labels_crc = section_crc(s[0]);
  h.ids_crc = section_crc(s[1]);
  h.dims_crc = h.version == kBatchVersion2 ? section_crc(s[2]) : 0;
  h.index_crc = section_crc(s[3]);
  h.images_crc = section_crc(s[4]);
  h.header_crc = crc32c(&h, kHeaderCrcBytes);
}

}  // namespace

void seal_batch_in_place(uint8_t* file, BatchHeader& h, const int32_t* labels, const int64_t* ids,
                         const uint64_t* offsets, const uint32_t* images_crc, const uint32_t* dims) {
  const std::array<Section, 5> secs = sections(h, labels, ids, dims, offsets, nullptr);
  std::memset(file + sizeof h, 0, h.labels_offset - sizeof h);
  uint64_t at = h.labels_offset;
  for (size_t k = 0; k < 4; ++k) {
    if (secs[k].bytes) std::memcpy(file + at, secs[k].data, secs[k].bytes);
    std::memset(file + at + secs[k].bytes, 0, secs[k].padded - secs[k].bytes);
    at += secs[k].padded;
  }
  h.labels_crc = crc32c(file + h.labels_offset, secs[0].padded);
  h.ids_crc = crc32c(file + h.ids_offset, secs[1].padded);
  h.dims_crc = h.version == kBatchVersion2 ? crc32c(file + h.dims_offset, secs[2].padded) : 0;
  h.index_crc = crc32c(file + h.index_offset, secs[3].padded);
  h.images_crc = images_crc ? *images_crc : crc32c(file + h.images_offset, h.images_bytes);
  h.header_crc = crc32c(&h, kHeaderCrcBytes);
  std::memcpy(file, &h, sizeof h);
}

std::vector<uint8_t> encode_batch(const Batch& b) {
  BatchHeader h = layout(b);
  const auto secs = sections(b, h);
  seal(h, secs);
  std::vector<uint8_t> out(h.file_bytes, 0);
  std::memcpy(out.data(), &h, sizeof h);
  uint64_t at = h.labels_offset;
  for (const Section& s : secs) {
    if (s.bytes) std::memcpy(out.data() + at, s.data, s.bytes);
    at += s.padded;
  }
  return out;
}

// Straight from the batch's own buffers: a copy of the whole file first would cost as much
// again as the write itself.
uint32_t write_batch(AtomicFile& f, const Batch& batch) {
  BatchHeader h = layout(batch);
  const auto secs = sections(batch, h);
  seal(h, secs);
  f.write(&h, sizeof h);
  f.write(kZeros, h.labels_offset - sizeof h);
  for (const Section& s : secs) {
    if (s.bytes) f.write(s.data, s.bytes);
    f.write(kZeros, s.padded - s.bytes);
  }
  return h.header_crc;
}

uint32_t write_batch_file(const std::string& path, const Batch& batch) {
  AtomicFile f(path);
  const uint32_t crc = write_batch(f, batch);
  f.commit();
  return crc;
}

BatchHeader check_batch_header(const std::string& path, const uint8_t* data, size_t size) {
  if (size < sizeof(BatchHeader))
    fail_file(path, "truncated: " + str(size) + " bytes, shorter than the 128-byte header");
  BatchHeader h;
  std::memcpy(&h, data, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) fail_file(path, "not a convoy batch file (bad magic)");
  if (crc32c(&h, kHeaderCrcBytes) != h.header_crc) fail_file(path, "header checksum mismatch (file is corrupt)");
  if (h.version != kBatchVersion && h.version != kBatchVersion2)
    fail_file(path, "batch-file version " + str(h.version) + " is not supported (this build reads 1 and 2)");
  const bool v2 = h.version == kBatchVersion2;
  if (h.header_bytes != sizeof(BatchHeader)) fail_file(path, "bad header size " + str(h.header_bytes));
  if (h.encoding > 1) fail_file(path, "unknown encoding " + str(h.encoding));
  // Written as zero (and a v1 file's dims fields too); a later version may give them a meaning
  // this build would ignore.
  if (std::any_of(std::begin(h.reserved), std::end(h.reserved), [](uint8_t b) { return b != 0; }) ||
      (!v2 && (h.dims_offset != 0 || h.dims_crc != 0)))
    fail_file(path, "non-zero reserved header bytes (file is corrupt or of a newer version)");
  const uint64_t n = h.count;
  const bool jpeg = h.encoding == static_cast<uint32_t>(Encoding::jpeg);
  const uint64_t img = uint64_t(h.height) * h.width * h.channels;
  const Offsets o = offsets_of(h.version, jpeg, n);
  bool ok = h.labels_offset == o.labels && h.ids_offset == o.ids && h.dims_offset == o.dims &&
            h.index_offset == o.index && h.images_offset == o.images &&
            h.file_bytes == h.images_offset + h.images_bytes && (jpeg || v2 || h.images_bytes == n * img) &&
            (!v2 || (h.height == 0 && h.width == 0 && h.channels > 0));
  if (!ok) fail_file(path, "inconsistent section layout in header");
  if (size < h.file_bytes) fail_file(path, "truncated: " + str(size) + " bytes, header says " + str(h.file_bytes));
  if (size > h.file_bytes) fail_file(path, "trailing bytes: " + str(size) + " bytes, header says " + str(h.file_bytes));
  return h;
}

std::array<BatchSection, 5> batch_sections(const BatchHeader& h) {
  const bool v2 = h.version == kBatchVersion2;
  const uint64_t ids_end = v2 ? h.dims_offset : h.index_offset;
  return {{{"labels", h.labels_offset, h.ids_offset, h.labels_crc},
           {"ids", h.ids_offset, ids_end, h.ids_crc},
           {"dims", ids_end, h.index_offset, h.dims_crc},  // v1: empty, CRC 0 (crc32c of nothing)
           {"index", h.index_offset, h.images_offset, h.index_crc},
           {"images", h.images_offset, h.file_bytes, h.images_crc}}};
}

ImageShape BatchView::sample_shape(size_t i) const {
  if (!varied()) return shape();
  uint32_t hw[2];
  std::memcpy(hw, data + header.dims_offset + i * sizeof hw, sizeof hw);
  return {hw[0], hw[1], header.channels};
}

const uint8_t* BatchView::sample(size_t i) const {
  const bool indexed = varied() || header.encoding == uint32_t(Encoding::jpeg);
  return images() + (indexed ? offset(i) : i * shape().bytes());
}

size_t BatchView::sample_bytes(size_t i) const {
  const bool indexed = varied() || header.encoding == uint32_t(Encoding::jpeg);
  return indexed ? size_t(offset(i + 1) - offset(i)) : shape().bytes();
}

namespace {

constexpr uint32_t kMaxSide = uint32_t(1) << 24;

// The offset index spans the images in order; a v2 file's samples have sizes of at least one
// pixel, and a raw one's bytes are its height x width x channels.
void check_index(const std::string& path, const BatchView& v) {
  const size_t n = v.count();
  const bool raw = v.header.encoding == uint32_t(Encoding::raw);
  if (v.offset(0) != 0 || v.offset(n) != v.header.images_bytes)
    fail_file(path, "offset index does not span the images section");
  for (size_t i = 0; i < n; ++i) {
    if (v.offset(i) > v.offset(i + 1)) fail_file(path, "offset index is not increasing");
    if (!v.varied()) continue;
    const ImageShape s = v.sample_shape(i);
    if (s.height == 0 || s.width == 0) fail_file(path, "sample " + str(i) + " has a zero height or width");
    // Within 2^24 a side, height x width x channels cannot wrap around 64 bits.
    if (s.height > kMaxSide || s.width > kMaxSide)
      fail_file(path, "sample " + str(i) + " is " + str(s.height) + "x" + str(s.width) + ", beyond " + str(kMaxSide) +
                          " pixels a side");
    if (raw && v.offset(i + 1) - v.offset(i) != s.bytes())
      fail_file(path, "sample " + str(i) + "'s bytes do not match its " + str(s.height) + "x" + str(s.width) + "x" +
                          str(s.channels) + " size");
  }
}

}  // namespace

int32_t BatchView::label(size_t i) const {
  int32_t v;
  std::memcpy(&v, data + header.labels_offset + i * sizeof v, sizeof v);
  return v;
}

int64_t BatchView::id(size_t i) const {
  int64_t v;
  std::memcpy(&v, data + header.ids_offset + i * sizeof v, sizeof v);
  return v;
}

uint64_t BatchView::offset(size_t i) const {
  uint64_t v;
  std::memcpy(&v, data + header.index_offset + i * sizeof v, sizeof v);
  return v;
}

BatchView verify_batch(const std::string& path, const uint8_t* data, size_t size, const uint32_t* section_crcs) {
  const BatchHeader h = check_batch_header(path, data, size);
  const std::array<BatchSection, 5> sections = batch_sections(h);
  for (size_t i = 0; i < sections.size(); ++i) {
    const BatchSection& s = sections[i];
    const uint32_t crc = section_crcs ? section_crcs[i] : crc32c(data + s.begin, s.end - s.begin);
    if (crc != s.crc) fail_file(path, std::string("checksum mismatch in the ") + s.name + " section (file is corrupt)");
  }
  // The gap between the header and the labels is padding: it must be zero (it is in no section).
  for (size_t i = sizeof(BatchHeader); i < h.labels_offset; ++i)
    if (data[i] != 0) fail_file(path, "non-zero padding after the header (file is corrupt)");
  BatchView v;
  v.header = h;
  v.data = data;
  if (h.encoding == static_cast<uint32_t>(Encoding::jpeg) || v.varied()) check_index(path, v);
  return v;
}

Batch decode_batch(const std::string& path, const uint8_t* data, size_t size) {
  const BatchView v = verify_batch(path, data, size);
  const BatchHeader& h = v.header;
  Batch b;
  const size_t n = h.count;
  b.version = h.version;
  b.shape = v.shape();
  b.encoding = static_cast<Encoding>(h.encoding);
  b.batch_index = h.batch_index;
  b.labels.resize(n);
  b.ids.resize(n);
  if (n) {
    std::memcpy(b.labels.data(), data + h.labels_offset, n * 4);
    std::memcpy(b.ids.data(), data + h.ids_offset, n * 8);
  }
  if (b.encoding == Encoding::jpeg || v.varied()) {
    b.offsets.resize(n + 1);
    std::memcpy(b.offsets.data(), data + h.index_offset, (n + 1) * 8);
  }
  if (v.varied()) {
    b.dims.resize(2 * n);
    if (n) std::memcpy(b.dims.data(), data + h.dims_offset, n * 8);
  }
  b.images.assign(data + h.images_offset, data + h.file_bytes);
  return b;
}

Batch read_batch_file(const std::string& path) {
  std::string bytes = read_whole_file(path);
  return decode_batch(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

BatchHeader read_batch_header(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(path, "cannot open: " + errno_text());
  struct stat st;
  uint8_t buf[sizeof(BatchHeader)] = {0};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    fail_file(path, "cannot stat: " + why);
  }
  // A read may return fewer bytes than asked without the file being shorter: only 0 ends it.
  size_t got = 0;
  while (got < sizeof buf) {
    const ssize_t r = ::pread(fd, buf + got, sizeof buf - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const std::string why = errno_text();
      ::close(fd);
      fail_file(path, "read failed: " + why);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  // check_batch_header wants the whole size: pass the file's size but only the header's bytes are read.
  if (got < sizeof buf) check_batch_header(path, buf, got);
  BatchHeader h;
  std::memcpy(&h, buf, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) fail_file(path, "not a convoy batch file (bad magic)");
  if (crc32c(&h, kHeaderCrcBytes) != h.header_crc) fail_file(path, "header checksum mismatch (file is corrupt)");
  if (uint64_t(st.st_size) != h.file_bytes)
    fail_file(path, "truncated or extended: " + str(st.st_size) + " bytes, header says " + str(h.file_bytes));
  return h;
}

std::string check_batch_file(const std::string& path, uint32_t* header_crc) {
  try {
    std::string bytes = read_whole_file(path);
    Batch b = decode_batch(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (header_crc) std::memcpy(header_crc, bytes.data() + offsetof(BatchHeader, header_crc), 4);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace convoy
