// Test fixtures for datagen: images made with TurboJPEG/OpenCV (RGB, gray, CMYK, progressive,
// PNG 8/16-bit, palette, RGBA) and tar archives written with libarchive (plain, gz, nested).
#pragma once
#include <archive.h>
#include <archive_entry.h>
#include <turbojpeg.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "shared/atomic_file.h"

namespace fixtures {

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
inline Bytes jpeg(const std::vector<uint8_t>& px, int w, int h, int pf = TJPF_RGB, int samp = TJSAMP_420,
                  int flags = 0, int quality = 95) {
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

// cv::Mat in OpenCV's channel order (BGR/BGRA), any depth.
inline Bytes png(const cv::Mat& m) {
  std::vector<uchar> buf;
  if (!cv::imencode(".png", m, buf)) throw std::runtime_error("fixture PNG");
  return Bytes(buf.begin(), buf.end());
}

inline uint32_t png_crc(const std::string& data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// A palette PNG (colour type 3) written by hand, with a stored (uncompressed) deflate stream:
// OpenCV cannot write one. Each row of the w x h image uses palette index (x + y) % 2, and the
// palette is {red, blue}.
inline Bytes palette_png(int w, int h) {
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    return be32(uint32_t(data.size())) + type + data + be32(png_crc(type + data));
  };
  std::string raw;
  for (int y = 0; y < h; ++y) {
    raw += '\0';  // filter: none
    for (int x = 0; x < w; ++x) raw += char((x + y) % 2);
  }
  uint32_t a = 1, b = 0;
  for (unsigned char ch : raw) a = (a + ch) % 65521, b = (b + a) % 65521;
  std::string z = "\x78\x01";
  z += '\x01';  // final stored block (raw must stay under 65536 bytes)
  const uint16_t len = uint16_t(raw.size()), nlen = uint16_t(~len);
  z += {char(len & 0xFF), char(len >> 8), char(nlen & 0xFF), char(nlen >> 8)};
  z += raw + be32((b << 16) | a);
  std::string ihdr = be32(uint32_t(w)) + be32(uint32_t(h)) + std::string{8, 3, 0, 0, 0};
  std::string plte = {'\xFF', 0, 0, 0, 0, '\xFF'};
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("PLTE", plte) + chunk("IDAT", z) +
         chunk("IEND", "");
}

// Writes a tar (pax, so long names work); filter: "", "gzip", "bzip2" or "zstd". Members whose
// content starts with "->" become symbolic links to the rest of it, "=>" hard links.
inline void write_tar(const std::string& path, const Members& members, const std::string& filter = "") {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (filter == "gzip") archive_write_add_filter_gzip(a);
  if (filter == "bzip2") archive_write_add_filter_bzip2(a);
  if (filter == "zstd" && archive_write_add_filter_zstd(a) != ARCHIVE_OK) throw std::runtime_error("no zstd in libarchive");
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
