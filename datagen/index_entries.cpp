// The compact member store. Paths lie in member order in one buffer, each ending where the next
// begins, so a record needs only its path's end.
#include "datagen/index_entries.h"

#include <cstring>
#include <stdexcept>

namespace convoy::datagen {

IndexEntries::IndexEntries(std::initializer_list<IndexEntry> entries) {
  for (const IndexEntry& e : entries) push_back(e);
}

IndexEntry IndexEntries::operator[](size_t i) const {
  const Record& r = records_[i];
  const uint64_t begin = path_begin(i);
  return {r.input, r.offset, r.size, r.label, std::string_view(paths_.data() + begin, size_t(r.path_end - begin))};
}

IndexEntry IndexEntries::at(size_t i) const {
  if (i >= size()) throw std::out_of_range("index entry " + std::to_string(i) + " of " + std::to_string(size()));
  return (*this)[i];
}

void IndexEntries::push_back(const IndexEntry& e) {
  paths_.append(e.path);
  records_.push_back({e.offset, e.size, paths_.size(), e.input, e.label});
}

void IndexEntries::resize(size_t n) {
  if (n <= size()) {
    records_.resize(n);
    paths_.resize(n ? size_t(records_[n - 1].path_end) : 0);
    return;
  }
  records_.resize(n, Record{-1, 0, paths_.size(), 0, 0});
}

void IndexEntries::reserve(size_t n, size_t path_bytes) {
  records_.reserve(n);
  paths_.reserve(path_bytes);
}

// to <= from, and members before `to` are final: the path moves towards the buffer's start.
void IndexEntries::move_member(size_t from, size_t to) {
  if (from == to) return;
  const uint64_t src = path_begin(from), len = records_[from].path_end - src, dst = path_begin(to);
  std::memmove(paths_.data() + dst, paths_.data() + src, size_t(len));
  records_[to] = records_[from];
  records_[to].path_end = dst + len;
}

}  // namespace convoy::datagen
