// IDX -> tar of PNGs. The IDX files are read through libarchive (raw format plus its gzip filter),
// so gzip'ed and plain IDX files both work; the tar is written with libarchive's writer.
#include "datagen/idx_to_tar.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "datagen/png_codec.h"
#include "shared/atomic_file.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

struct ReadArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct WriteArchiveFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

// The whole decompressed content of a (possibly gzip'ed) file.
std::string read_idx_file(const std::string& path) {
  std::unique_ptr<archive, ReadArchiveFree> a(archive_read_new());
  archive_read_support_filter_all(a.get());
  archive_read_support_format_raw(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
    fail_file(path, std::string("cannot open: ") + archive_error_string(a.get()));
  archive_entry* entry = nullptr;
  if (archive_read_next_header(a.get(), &entry) != ARCHIVE_OK)
    fail_file(path, std::string("cannot read: ") + archive_error_string(a.get()));
  std::string data;
  char buf[1 << 16];
  for (;;) {
    la_ssize_t n = archive_read_data(a.get(), buf, sizeof buf);
    if (n < 0) fail_file(path, std::string("cannot read: ") + archive_error_string(a.get()));
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

uint32_t be32(const std::string& d, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(d.data()) + at;
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

// Checks the IDX magic (unsigned byte data, `dims` dimensions) and returns the dimensions.
std::vector<uint32_t> idx_dims(const std::string& path, const std::string& d, int dims) {
  if (d.size() < 4 + 4 * size_t(dims)) fail_file(path, "too short for an IDX header");
  if (d[0] != 0 || d[1] != 0 || static_cast<unsigned char>(d[2]) != 0x08 || d[3] != dims)
    fail_file(path, "not an IDX file of unsigned bytes with " + std::to_string(dims) + " dimension(s)");
  std::vector<uint32_t> out;
  uint64_t total = 1;
  for (int i = 0; i < dims; ++i) {
    out.push_back(be32(d, 4 + 4 * size_t(i)));
    total *= out.back();
  }
  if (d.size() != 4 + 4 * size_t(dims) + total)
    fail_file(path, "size " + std::to_string(d.size()) + " does not match its header (" +
                        std::to_string(4 + 4 * dims + total) + " bytes expected)");
  return out;
}

// The member name of image i: in its class's folder, or at the root for a flat tar.
std::string member_name(size_t i, const std::string& cls, bool flat) {
  char name[64];
  std::snprintf(name, sizeof name, "%s%s%05zu.png", flat ? "" : cls.c_str(), flat ? "" : "/", i);
  return name;
}

la_ssize_t write_cb(archive*, void* client, const void* buf, size_t n) {
  static_cast<AtomicFile*>(client)->write(buf, n);
  return static_cast<la_ssize_t>(n);
}

}  // namespace

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle_boot"};
  return names;
}

size_t idx_to_tar(const IdxToTarOptions& opt) {
  const std::string images = read_idx_file(opt.images);
  const std::string labels = read_idx_file(opt.labels);
  const auto idim = idx_dims(opt.images, images, 3);
  const auto ldim = idx_dims(opt.labels, labels, 1);
  const size_t all = idim[0], h = idim[1], w = idim[2];
  if (ldim[0] != all)
    fail_file(opt.labels, std::to_string(ldim[0]) + " labels for " + std::to_string(all) + " images in " + opt.images);
  const size_t n = opt.first > 0 ? std::min(opt.first, all) : all;
  const bool flat = !opt.flat_labels.empty();
  std::string label_lines;
  const auto& classes = fashion_mnist_classes();
  const size_t header = 16, lheader = 8;

  AtomicFile out(opt.out);
  std::unique_ptr<archive, WriteArchiveFree> a(archive_write_new());
  archive_write_set_format_pax_restricted(a.get());
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open(a.get(), &out, nullptr, write_cb, nullptr) != ARCHIVE_OK)
    fail_file(opt.out, std::string("cannot start the tar: ") + archive_error_string(a.get()));
  std::unique_ptr<archive_entry, EntryFree> entry(archive_entry_new());
  for (size_t i = 0; i < n; ++i) {
    const unsigned label = static_cast<unsigned char>(labels[lheader + i]);
    if (label >= classes.size())
      fail_file(opt.labels, "label " + std::to_string(label) + " of image " + std::to_string(i) + " is out of range");
    const std::string png = png_encode(reinterpret_cast<const uint8_t*>(images.data() + header + i * h * w), int(w),
                                       int(h), 1);
    const std::string name = member_name(i, classes[label], flat);
    if (flat) label_lines += name + " " + classes[label] + "\n";
    archive_entry_clear(entry.get());
    archive_entry_set_pathname(entry.get(), name.c_str());
    archive_entry_set_size(entry.get(), static_cast<la_int64_t>(png.size()));
    archive_entry_set_filetype(entry.get(), AE_IFREG);
    archive_entry_set_perm(entry.get(), 0644);
    if (archive_write_header(a.get(), entry.get()) != ARCHIVE_OK ||
        archive_write_data(a.get(), png.data(), png.size()) != static_cast<la_ssize_t>(png.size()))
      fail_file(opt.out, std::string("tar write failed: ") + archive_error_string(a.get()));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK)
    fail_file(opt.out, std::string("tar write failed: ") + archive_error_string(a.get()));
  out.commit();
  if (flat) write_file_atomic(opt.flat_labels, label_lines);

  if (!opt.classes_out.empty()) {
    std::string text;
    for (const auto& c : classes) text += c + "\n";
    write_file_atomic(opt.classes_out, text);
  }
  return n;
}

}  // namespace convoy::datagen
