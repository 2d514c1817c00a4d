// Aligned allocation without initialisation: a 200 MB file's zero fill alone would cost a pass over
// memory that the samples overwrite anyway. No transparent huge pages are asked for: where the
// kernel compacts memory for them on the first touch (defrag "madvise", the usual setting), that
// took 0.4 s for 200 MB on the 2-core VM, against 0.08 s for small pages.
#include "datagen/file_buffer.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "shared/atomic_file.h"

namespace convoy::datagen {

size_t direct_aligned(size_t bytes) {
  constexpr size_t a = AtomicFile::kDirectAlign;
  return (bytes + a - 1) / a * a;
}

void FileBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

void FileBuffer::reserve(size_t bytes) {
  const size_t want = direct_aligned(bytes);
  if (want <= capacity_) return;
  data_.reset();
  capacity_ = 0;
  void* p = nullptr;
  if (posix_memalign(&p, AtomicFile::kDirectAlign, want) != 0) throw std::bad_alloc();
  data_.reset(static_cast<uint8_t*>(p));
  capacity_ = want;
}

PrefaultedBuffers::PrefaultedBuffers(size_t count, size_t bytes) : buffers_(count) {
  for (FileBuffer& b : buffers_) b.reserve(bytes);
  thread_ = std::thread([this] {
    constexpr size_t kPage = 4096, kChunk = size_t(1) << 20;
    for (FileBuffer& b : buffers_)
      for (size_t at = 0; at < b.capacity(); at += kChunk) {
        if (stop_.load(std::memory_order_relaxed)) return;
        for (size_t p = at; p < std::min(b.capacity(), at + kChunk); p += kPage) b.data()[p] = 0;
      }
  });
}

PrefaultedBuffers::~PrefaultedBuffers() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::vector<FileBuffer> PrefaultedBuffers::take() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  return std::move(buffers_);
}

}  // namespace convoy::datagen
