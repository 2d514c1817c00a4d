// Member walking over libarchive. Uncompressed tars are read through callbacks over a byte range
// of one file descriptor, so the offset of every member's data (also inside inner tars) is known
// from the stream position after its header; compressed inputs are only streamed.
#include "datagen/archive_walk.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <vector>

#include "datagen/stream_decoder.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

// A byte range [base, base + len) of a file, read through pread so that inner tars need no copy.
// For an uncompressed tar the buffer is small on purpose: a scan reads each header and skips the
// member's data, and a large read-ahead would turn the scan of a big tar into a read of all of it.
// A compressed stream is read whole anyway, in large pieces.
constexpr size_t kHeaderReadBytes = 16 << 10, kStreamReadBytes = 1 << 20;

struct RangeSource {
  int fd;
  uint64_t base, len, pos = 0;
  std::vector<char> buf;
  std::string* io_error;  // set by a read that fails, which libarchive would report as damage
};

// The file's first bytes, up to n: fewer only where the file is shorter.
size_t read_head(int fd, unsigned char* buf, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail_file(path, "read failed at byte " + std::to_string(got) + ": " + errno_text());
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

// True when the file starts with the magic of a compression libarchive may find there.
bool looks_compressed(const unsigned char* m, size_t n) {
  if (n < 4) return false;
  return (m[0] == 0x1F && m[1] == 0x8B) ||                                  // gzip
         (m[0] == 'B' && m[1] == 'Z' && m[2] == 'h') ||                     // bzip2
         (m[0] == 0x28 && m[1] == 0xB5 && m[2] == 0x2F && m[3] == 0xFD) ||  // zstd
         (m[0] == 0xFD && m[1] == '7' && m[2] == 'z' && m[3] == 'X') ||     // xz
         (m[0] == 0x04 && m[1] == 0x22 && m[2] == 0x4D && m[3] == 0x18);    // lz4
}

la_ssize_t range_read(archive* a, void* client, const void** out) {
  auto* s = static_cast<RangeSource*>(client);
  const uint64_t n = std::min<uint64_t>(s->buf.size(), s->len - s->pos);
  if (n == 0) return 0;
  ssize_t got;
  do got = ::pread(s->fd, s->buf.data(), n, static_cast<off_t>(s->base + s->pos));
  while (got < 0 && errno == EINTR);
  if (got < 0) {
    const int e = errno;
    const std::string why = "read failed at byte " + std::to_string(s->base + s->pos) + ": " + errno_text();
    if (s->io_error->empty()) *s->io_error = why;
    archive_set_error(a, e, "%s", why.c_str());
    return -1;
  }
  s->pos += static_cast<uint64_t>(got);
  *out = s->buf.data();
  return got;
}

la_int64_t range_seek(archive*, void* client, la_int64_t offset, int whence) {
  auto* s = static_cast<RangeSource*>(client);
  int64_t target = whence == SEEK_SET   ? offset
                   : whence == SEEK_CUR ? int64_t(s->pos) + offset
                                        : int64_t(s->len) + offset;
  if (target < 0 || uint64_t(target) > s->len) return ARCHIVE_FATAL;
  s->pos = uint64_t(target);
  return target;
}

la_int64_t range_skip(archive*, void* client, la_int64_t request) {
  auto* s = static_cast<RangeSource*>(client);
  const uint64_t n = std::min<uint64_t>(uint64_t(request), s->len - s->pos);
  s->pos += n;
  return static_cast<la_int64_t>(n);
}

la_ssize_t decompressed_read(archive* a, void* client, const void** out) {
  auto* f = static_cast<DecompressedFile*>(client);
  const ptrdiff_t n = f->read(out);
  if (n < 0) archive_set_error(a, EIO, "%s", f->error().c_str());
  return la_ssize_t(n);
}

// An inner tar read straight out of the enclosing (streamed) archive's current member.
struct NestedSource {
  archive* outer;
  std::vector<char> buf = std::vector<char>(1 << 16);
};

la_ssize_t nested_read(archive* a, void* client, const void** out) {
  auto* s = static_cast<NestedSource*>(client);
  la_ssize_t n = archive_read_data(s->outer, s->buf.data(), s->buf.size());
  if (n < 0) archive_set_error(a, archive_errno(s->outer), "%s", archive_error_string(s->outer));
  *out = s->buf.data();
  return n;
}

ArchivePtr new_reader() {
  ArchivePtr a(archive_read_new());
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_empty(a.get());
  return a;
}

bool ends_with_tar(const std::string& name) {
  if (name.size() < 4) return false;
  std::string tail = name.substr(name.size() - 4);
  std::transform(tail.begin(), tail.end(), tail.begin(), ::tolower);
  return tail == ".tar";
}

std::string err_text(archive* a) {
  const char* s = archive_error_string(a);
  return s ? s : "unknown libarchive error";
}

struct Walker {
  std::string input;
  const std::function<bool(const Member&)>& visit;
  bool nested;
  bool stop = false;
  std::string last = "(start of archive)";  // the last member reached, for errors after the walk
  // The decompressor's own account of why the stream stopped: libarchive replaces it with a
  // generic "Truncated input file" when the failed read was part of a skip.
  const std::string* stream_error = nullptr;
  const DecompressedFile* dec = nullptr;
  std::string io_error = {};  // the first read of the file that failed (RangeSource's)

  std::string why(archive* a) const { return stream_error && !stream_error->empty() ? *stream_error : err_text(a); }

  // A read that failed (EIO) says nothing about the input's contents: it ends the run, where
  // damage would keep what was read and save an index that a rerun would trust as complete.
  void fail_if_read_failed() const {
    if (!io_error.empty()) fail_file(input, io_error);
    if (dec && dec->io_failed()) fail_file(input, dec->error());
  }

  // Inner tar m (named `name` in its archive), opened where it lies in the input file (random)
  // or on the outer archive's stream, and walked.
  WalkResult walk_inner(archive* outer, bool random, const Member& m, const std::string& name, int fd) {
    if (random) {
      RangeSource src{fd, uint64_t(m.offset), m.size, 0, std::vector<char>(kHeaderReadBytes), &io_error};
      ArchivePtr in = new_reader();
      archive_read_set_read_callback(in.get(), range_read);
      archive_read_set_seek_callback(in.get(), range_seek);
      archive_read_set_skip_callback(in.get(), range_skip);
      archive_read_set_callback_data(in.get(), &src);
      return open_and_walk(in.get(), true, uint64_t(m.offset), m, name, fd);
    }
    NestedSource src{outer};
    ArchivePtr in = new_reader();
    archive_read_set_read_callback(in.get(), nested_read);
    archive_read_set_callback_data(in.get(), &src);
    return open_and_walk(in.get(), false, 0, m, name, fd);
  }

  // An inner tar that cannot even be opened is damage within its member, not an error of the run.
  WalkResult open_and_walk(archive* in, bool random, uint64_t base, const Member& m, const std::string& name, int fd) {
    if (archive_read_open1(in) == ARCHIVE_OK) return walk(in, random, base, m.path + "/", name, fd);
    fail_if_read_failed();
    WalkResult sub;
    sub.complete = false;
    sub.error = input + ": inner tar '" + m.path + "' cannot be read: " + err_text(in);
    return sub;
  }

  // Walks an opened archive. random: positions are byte offsets in the input file, base added.
  WalkResult walk(archive* a, bool random, uint64_t base, const std::string& prefix, const std::string& inner, int fd) {
    WalkResult res;
    archive_entry* e = nullptr;
    bool first = true;
    while (!stop) {
      int rc = archive_read_next_header(a, &e);
      if (rc == ARCHIVE_EOF) break;
      if (rc < ARCHIVE_WARN) {
        fail_if_read_failed();
        res.complete = false;
        res.error = input + ": archive ends or is damaged after member '" + last + "': " + why(a);
        break;
      }
      if (first && random && archive_filter_code(a, 0) != ARCHIVE_FILTER_NONE) random = false;
      if (first) res.kind = random ? InputKind::tar : InputKind::stream;
      first = false;
      const char* pn = archive_entry_pathname(e);
      std::string name = pn ? pn : "";
      bool absolute = false;
      while (name.rfind("./", 0) == 0 || name.rfind("/", 0) == 0) {
        absolute |= name[0] == '/';
        name.erase(0, name[0] == '/' ? 1 : 2);
      }
      Member m;
      m.absolute = absolute;
      m.path = prefix + name;
      m.inner_tar = inner;
      m.size = archive_entry_size_is_set(e) ? uint64_t(archive_entry_size(e)) : 0;
      const auto type = archive_entry_filetype(e);
      if (type == AE_IFDIR) continue;  // folders carry no data and are not counted
      // Hard links carry no data of their own in a tar: skipped like symbolic links.
      m.regular = type == AE_IFREG && archive_entry_hardlink(e) == nullptr && archive_entry_sparse_count(e) == 0;
      if (random) m.offset = int64_t(base + uint64_t(archive_filter_bytes(a, 0)));
      m.input_pos = random ? uint64_t(m.offset) + m.size : dec ? dec->file_position() : 0;
      last = m.path;
      if (m.regular && random) {
        const uint64_t end = uint64_t(m.offset) + m.size;
        struct stat st {};
        if (::fstat(fd, &st) == 0 && end > uint64_t(st.st_size)) {
          res.complete = false;
          res.error = input + ": archive is truncated in member '" + m.path + "'";
          break;
        }
      }
      if (m.regular && nested && ends_with_tar(name)) {
        const WalkResult sub = walk_inner(a, random, m, name, fd);
        if (!sub.complete) {
          // The damage is confined to this member: its extent is known, so the outer walk goes on
          // to the next member (libarchive skips what is left of this one). The first error stands.
          if (res.complete) {
            res.error = sub.error;
            res.cut_member = sub.cut_member;
          }
          res.complete = false;
        }
        continue;
      }
      m.read = [a, this, &m](void* buf, size_t n) -> size_t {
        la_ssize_t got = archive_read_data(a, buf, n);
        if (got < 0) {
          fail_if_read_failed();
          fail_file(input, "cannot read member '" + m.path + "': " + why(a));
        }
        return size_t(got);
      };
      if (!visit(m)) {
        stop = true;
        break;
      }
      // A streamed member is only known to be whole once its data has been read to the end.
      if (!random && m.regular && archive_read_data_skip(a) < ARCHIVE_WARN) {
        fail_if_read_failed();
        res.complete = false;
        res.cut_member = m.path;
        res.error = input + ": archive is truncated or damaged in member '" + m.path + "': " + why(a);
        break;
      }
    }
    return res;
  }
};

WalkResult walk_folder(const std::string& root, const std::function<bool(const Member&)>& visit) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, bool>> files;  // relative path, regular
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::follow_directory_symlink, ec), end;
  if (ec) fail_file(root, "cannot list: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) fail_file(root, "cannot list: " + ec.message());
    const auto st = it->symlink_status(ec);
    if (fs::is_directory(st)) continue;
    // Links are read through, as PyTorch's ImageFolder reads them: to a file, as the file; to a
    // folder, as the folder, unless it leads back to a folder above it (a loop), which is skipped
    // and counted, as a broken link is.
    std::error_code target_ec;
    const std::string rel = it->path().lexically_relative(root).generic_string();
    if (fs::is_symlink(st) && fs::is_directory(it->status(target_ec))) {
      const std::string target = fs::canonical(it->path(), target_ec).string() + "/";
      const std::string parent = fs::canonical(it->path().parent_path(), target_ec).string() + "/";
      if (target_ec || parent.compare(0, target.size(), target) == 0) {
        it.disable_recursion_pending();
        files.emplace_back(rel, false);
      }
      continue;
    }
    files.emplace_back(rel,
                       fs::is_regular_file(st) || (fs::is_symlink(st) && fs::is_regular_file(it->status(target_ec))));
  }
  std::sort(files.begin(), files.end());
  WalkResult res;
  res.kind = InputKind::folder;
  for (const auto& [rel, regular] : files) {
    Member m;
    m.path = rel;
    m.regular = regular;
    m.offset = 0;
    const std::string full = root + "/" + rel;
    UniqueFd fd;
    uint64_t pos = 0;
    if (regular) {
      m.size = uint64_t(fs::file_size(full, ec));
      if (ec) fail_file(full, "cannot stat: " + ec.message());
    }
    m.read = [&](void* buf, size_t n) -> size_t {
      if (fd.fd < 0) {
        fd = UniqueFd(::open(full.c_str(), O_RDONLY | O_CLOEXEC));
        if (fd.fd < 0) fail_file(full, "cannot open: " + errno_text());
      }
      const size_t want = size_t(std::min<uint64_t>(n, m.size - pos));
      pread_exact(fd.fd, buf, want, pos, full);
      pos += want;
      return want;
    };
    if (!visit(m)) break;
  }
  return res;
}

}  // namespace

const char* input_kind_name(InputKind k) {
  switch (k) {
    case InputKind::tar: return "tar";
    case InputKind::stream: return "stream";
    case InputKind::folder: return "folder";
  }
  return "?";
}

UniqueFd::~UniqueFd() {
  if (fd >= 0) ::close(fd);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) ::close(fd);
    fd = o.fd;
    o.fd = -1;
  }
  return *this;
}

bool is_folder(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

void pread_exact(int fd, void* buf, size_t size, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(buf);
  while (size > 0) {
    ssize_t got = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail_file(path, "read failed at offset " + std::to_string(offset) + ": " + errno_text());
    if (got == 0) fail_file(path, "ends early at offset " + std::to_string(offset) + " (truncated?)");
    p += got;
    size -= size_t(got);
    offset += uint64_t(got);
  }
}

WalkResult walk_input(const std::string& input, const std::function<bool(const Member&)>& visit, bool nested) {
  if (is_folder(input)) return walk_folder(input, visit);
  UniqueFd fd(::open(input.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) fail_file(input, "cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail_file(input, "cannot stat: " + errno_text());
  // gzip, bzip2, xz and zstd are decompressed by stream_decoder.cpp, which keeps all it can of a
  // cut file; other filters (lz4, compress, lzip) are left to libarchive.
  unsigned char head[DecompressedFile::kMagicBytes];
  const size_t head_n = read_head(fd.fd, head, sizeof head, input);
  std::unique_ptr<DecompressedFile> dec = DecompressedFile::open(fd.fd, uint64_t(st.st_size), head, head_n);
  Walker w{input, visit, nested};
  w.dec = dec.get();
  if (dec) w.stream_error = &dec->error();
  RangeSource src{fd.fd,
                  0,
                  uint64_t(st.st_size),
                  0,
                  std::vector<char>(dec                              ? 0
                                    : looks_compressed(head, head_n) ? kStreamReadBytes
                                                                     : kHeaderReadBytes),
                  &w.io_error};
  ArchivePtr a = new_reader();
  if (dec) {
    archive_read_set_read_callback(a.get(), decompressed_read);
    archive_read_set_callback_data(a.get(), dec.get());
  } else {
    archive_read_set_read_callback(a.get(), range_read);
    archive_read_set_seek_callback(a.get(), range_seek);
    archive_read_set_skip_callback(a.get(), range_skip);
    archive_read_set_callback_data(a.get(), &src);
  }
  if (archive_read_open1(a.get()) != ARCHIVE_OK) {
    w.fail_if_read_failed();
    fail_file(input,
              "not a readable tar archive: " + (dec && !dec->error().empty() ? dec->error() : err_text(a.get())));
  }
  WalkResult res = w.walk(a.get(), !dec, 0, "", "", fd.fd);
  w.fail_if_read_failed();  // also one that libarchive took for the end of the archive
  if (dec) {
    res.kind = InputKind::stream;
    // libarchive may take a failed read for the end of an archive (an empty one, or one without
    // its end-of-archive blocks), so the stream's own state has the last word.
    if (res.complete && !w.stop && !dec->error().empty()) {
      res.complete = false;
      res.error = input + ": archive ends or is damaged after member '" + w.last + "': " + dec->error();
    }
  }
  return res;
}

}  // namespace convoy::datagen
