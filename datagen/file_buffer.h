// Memory for a whole batch file as it will lie on disk, aligned for direct I/O (shared/atomic_file.h):
// samples are made straight into their places, and the writer hands the kernel the same bytes.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

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

// Memory for a rank's first batch files, its pages faulted in by a thread of its own while the
// rank starts up (the index, the broadcast, the plan), when its cores would otherwise wait: a page
// touched for the first time costs about as much as writing it to the disk (75 us per 196 KB
// sample on the 2-core VM), and a rank of one thread touches half its samples' memory for the first
// time. The thread stops when the buffers are taken; the pages it did not reach fault in on use.
class PrefaultedBuffers {
 public:
  PrefaultedBuffers(size_t count, size_t bytes);
  ~PrefaultedBuffers();  // stops the thread
  PrefaultedBuffers(const PrefaultedBuffers&) = delete;
  PrefaultedBuffers& operator=(const PrefaultedBuffers&) = delete;
  std::vector<FileBuffer> take();

 private:
  std::vector<FileBuffer> buffers_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace convoy::datagen
