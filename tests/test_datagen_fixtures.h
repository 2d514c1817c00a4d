// Test fixtures for datagen: images made with TurboJPEG or by hand (RGB, gray, CMYK, progressive,
// PNG 8/16-bit, palette, RGBA) and tar archives written with libarchive (plain, gz, nested).
#pragma once
#include <archive.h>
#include <archive_entry.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "shared/atomic_file.h"
#include "shared/mpi_context.h"

namespace fixtures {

// One MPI context for a whole test binary (a singleton without mpirun); run_datagen needs it.
inline const convoy::MpiContext& mpi() {
  static int argc = 0;
  static char** argv = nullptr;
  static convoy::MpiContext ctx(&argc, &argv);
  return ctx;
}

using Bytes = std::string;
using Members = std::vector<std::pair<std::string, Bytes>>;

inline std::string scratch(const std::string& name) {
  std::string dir = std::string(CONVOY_TEST_TMP) + "/datagen_" + name;
  std::filesystem::remove_all(dir);
  convoy::make_dirs(dir);
  return dir;
}

// A w x h test pattern: a horizontal ramp in R, vertical in G, `seed` in B.
inline std::vector<uint8_t> pattern(int w, int h, int seed) {
  std::vector<uint8_t> px(size_t(w) * size_t(h) * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &px[(size_t(y) * size_t(w) + size_t(x)) * 3];
      p[0] = uint8_t(x * 255 / std::max(1, w - 1));
      p[1] = uint8_t(y * 255 / std::max(1, h - 1));
      p[2] = uint8_t(seed * 37);
    }
  return px;
}

// pf: TJPF_RGB (3 bytes/px), TJPF_GRAY (1) or TJPF_CMYK (4); flags e.g. TJFLAG_PROGRESSIVE.
inline Bytes jpeg(const std::vector<uint8_t>& px, int w, int h, int pf = TJPF_RGB, int samp = TJSAMP_420, int flags = 0,
                  int quality = 95) {
  tjhandle t = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(t, px.data(), w, 0, h, pf, &buf, &size, samp, quality, flags) != 0) {
    tjDestroy(t);
    throw std::runtime_error(std::string("fixture JPEG: ") + tjGetErrorStr());
  }
  Bytes out(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(t);
  return out;
}

inline Bytes rgb_jpeg(int w, int h, int seed, int samp = TJSAMP_420, int flags = 0) {
  return jpeg(pattern(w, h, seed), w, h, TJPF_RGB, samp, flags);
}

inline Bytes gray_jpeg(int w, int h, uint8_t value) {
  std::vector<uint8_t> px(size_t(w) * size_t(h), value);
  return jpeg(px, w, h, TJPF_GRAY, TJSAMP_GRAY);
}

// Adobe (inverted) CMYK, the convention libjpeg-turbo uses: R = C * K / 255.
inline Bytes cmyk_jpeg(int w, int h, uint8_t c, uint8_t m, uint8_t y, uint8_t k) {
  std::vector<uint8_t> px;
  for (int i = 0; i < w * h; ++i) px.insert(px.end(), {c, m, y, k});
  return jpeg(px, w, h, TJPF_CMYK, TJSAMP_444);
}

inline uint32_t png_crc(const std::string& data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// A PNG written by hand with stored (uncompressed) deflate blocks, so the fixtures need no PNG
// library and can make every colour type and depth: `raw` holds the rows, each without its filter
// byte, in PNG's own sample order (big-endian 16-bit samples); extra chunks go before IDAT.
inline Bytes png_file(int w, int h, int bit_depth, int color_type, const std::string& raw, size_t row_bytes,
                      const std::string& extra_chunks_before_idat = "") {
  auto be32 = [](uint32_t v) { return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; };
  auto chunk = [&](const std::string& type, const std::string& data) {
    return be32(uint32_t(data.size())) + type + data + be32(png_crc(type + data));
  };
  std::string filtered;
  for (int y = 0; y < h; ++y) filtered += '\0' + raw.substr(size_t(y) * row_bytes, row_bytes);  // filter: none
  uint32_t a = 1, b = 0;
  for (unsigned char ch : filtered) a = (a + ch) % 65521, b = (b + a) % 65521;
  std::string z = "\x78\x01";
  size_t at = 0;
  do {
    const size_t len = std::min<size_t>(65535, filtered.size() - at);
    const bool last = at + len == filtered.size();
    const uint16_t l = uint16_t(len), nl = uint16_t(~l);
    z += {char(last ? 1 : 0), char(l & 0xFF), char(l >> 8), char(nl & 0xFF), char(nl >> 8)};
    z += filtered.substr(at, len);
    at += len;
  } while (at < filtered.size());
  z += be32((b << 16) | a);
  std::string ihdr = be32(uint32_t(w)) + be32(uint32_t(h)) + std::string{char(bit_depth), char(color_type), 0, 0, 0};
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + extra_chunks_before_idat + chunk("IDAT", z) +
         chunk("IEND", "");
}

// cv::Mat in OpenCV's channel order (gray, BGR, BGRA), 8 or 16 bits.
inline Bytes png(const cv::Mat& m) {
  const int ch = m.channels(), bytes = m.depth() == CV_16U ? 2 : 1;
  if ((m.depth() != CV_8U && m.depth() != CV_16U) || ch == 2 || ch > 4) throw std::runtime_error("fixture PNG type");
  static const int color_type[5] = {0, 0, 4, 2, 6};
  const size_t row = size_t(m.cols) * size_t(ch) * size_t(bytes);
  std::string raw;
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x < m.cols; ++x)
      for (int c = 0; c < ch; ++c) {
        const int src = ch >= 3 && c < 3 ? 2 - c : c;  // BGR(A) -> RGB(A)
        const unsigned v = bytes == 2 ? m.ptr<uint16_t>(y)[x * ch + src] : m.ptr<uint8_t>(y)[x * ch + src];
        if (bytes == 2) raw += char(v >> 8);
        raw += char(v & 0xFF);
      }
  return png_file(m.cols, m.rows, 8 * bytes, color_type[ch], raw, row);
}

// A palette PNG (colour type 3): each row of the w x h image uses palette index (x + y) % 2, and
// the palette is {red, blue}.
inline Bytes palette_png(int w, int h) {
  std::string raw;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) raw += char((x + y) % 2);
  const std::string plte = {'\xFF', 0, 0, 0, 0, '\xFF'};
  auto be32 = [](uint32_t v) { return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; };
  return png_file(w, h, 8, 3, raw, size_t(w), be32(6) + "PLTE" + plte + be32(png_crc("PLTE" + plte)));
}

// Writes a tar (pax, so long names work); filter: "", "gzip", "bzip2" or "zstd". Members whose
// content starts with "->" become symbolic links to the rest of it, "=>" hard links.
inline void write_tar(const std::string& path, const Members& members, const std::string& filter = "") {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (filter == "gzip") archive_write_add_filter_gzip(a);
  if (filter == "bzip2") archive_write_add_filter_bzip2(a);
  if (filter == "zstd" && archive_write_add_filter_zstd(a) != ARCHIVE_OK)
    throw std::runtime_error("no zstd in libarchive");
  if (archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) throw std::runtime_error("fixture tar open");
  for (const auto& [name, data] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_perm(e, 0644);
    if (data.rfind("=>", 0) == 0) {
      archive_entry_set_filetype(e, AE_IFREG);
      archive_entry_set_hardlink(e, data.substr(2).c_str());
      archive_entry_set_size(e, 0);
      archive_write_header(a, e);
    } else if (data.rfind("->", 0) == 0) {
      archive_entry_set_filetype(e, AE_IFLNK);
      archive_entry_set_symlink(e, data.substr(2).c_str());
      archive_entry_set_size(e, 0);
      archive_write_header(a, e);
    } else {
      archive_entry_set_filetype(e, AE_IFREG);
      archive_entry_set_size(e, la_int64_t(data.size()));
      archive_write_header(a, e);
      archive_write_data(a, data.data(), data.size());
    }
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

inline Bytes read_file(const std::string& path) { return convoy::read_whole_file(path); }

inline void write_file(const std::string& path, const Bytes& data) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

}  // namespace fixtures
