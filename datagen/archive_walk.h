// Walks the members of one input (a tar, a compressed tar, a tar of tars, or a folder tree) in a
// fixed order, telling for each regular file where its bytes lie when they can be read by pread.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

struct archive;

namespace convoy::datagen {

enum class InputKind { tar, stream, folder };  // tar: uncompressed, random access by pread
const char* input_kind_name(InputKind k);

struct Member {
  std::string path;       // inside the input; members of an inner tar: "<inner.tar>/<path>"
  std::string inner_tar;  // name of the inner tar holding it ("" if none)
  uint64_t size = 0;
  int64_t offset = -1;     // absolute offset of its bytes in the input file; -1 when streamed
  bool regular = true;     // false for links, devices, folders (skipped and counted); in a folder
                           // input links are followed, as PyTorch's ImageFolder follows them
  bool absolute = false;   // its name in the archive started with '/', which path leaves out
  uint64_t input_pos = 0;  // how far into the input file the walk has read (for progress); 0 if unknown
  // Reads up to n bytes of the member's data (sequentially from where the last call stopped);
  // returns the count, 0 at the end. Throws on a read error.
  std::function<size_t(void* buf, size_t n)> read;
};

struct WalkResult {
  InputKind kind = InputKind::tar;
  bool complete = true;
  std::string error;       // why reading stopped early, naming the member where it stopped
  std::string cut_member;  // a member already visited whose data turned out to be cut short
};

// Calls visit for each member in archive order (folders: sorted path order). Members whose name
// ends in ".tar" are walked as inner tars when nested is true (tar inputs only, not folders).
// visit returns false to stop the walk early. Errors opening the input throw; errors part-way
// are returned in WalkResult so that what came before is kept.
WalkResult walk_input(const std::string& input, const std::function<bool(const Member&)>& visit, bool nested = true);

// An open file descriptor, closed on destruction.
struct UniqueFd {
  int fd = -1;
  UniqueFd() = default;
  explicit UniqueFd(int f) : fd(f) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
};

// Reads `size` bytes at `offset` of a file with pread, failing with the file's name.
void pread_exact(int fd, void* buf, size_t size, uint64_t offset, const std::string& path);

bool is_folder(const std::string& path);

}  // namespace convoy::datagen
