// Memory for a whole batch file as it will lie on disk, aligned for direct I/O (shared/atomic_file.h):
// samples are made straight into their places, and the writer hands the kernel the same bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace convoy::datagen {

class FileBuffer {
 public:
  FileBuffer() = default;
  // Room for at least `bytes`, rounded up to the alignment. Keeps the memory (and its mapped
  // pages) when it is large enough already; its contents are then whatever they were, else
  // undefined: nothing is zeroed, since every byte of a file is written before it is used.
  void reserve(size_t bytes);
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t capacity_ = 0;
};

// Rounds up to the direct-I/O alignment.
size_t direct_aligned(size_t bytes);

}  // namespace convoy::datagen
