// The index's members held compactly: a fixed 32-byte record per member and every member path in
// one shared buffer, so that ImageNet's 1.28 million members take tens of MB, not a string each.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace convoy::datagen {

// One member as handed out: path views the IndexEntries it came from and is valid while that
// holds the member (until it is changed, moved from or destroyed).
struct IndexEntry {
  uint32_t input = 0;
  int64_t offset = -1;  // absolute offset in a tar input; 0 for a folder's files; -1 streamed
  uint64_t size = 0;
  int32_t label = 0;
  std::string_view path;  // member path inside its input
};

class IndexEntries {
 public:
  IndexEntries() = default;
  IndexEntries(std::initializer_list<IndexEntry> entries);

  size_t size() const { return records_.size(); }
  bool empty() const { return records_.empty(); }
  IndexEntry operator[](size_t i) const;
  IndexEntry at(size_t i) const;  // throws std::out_of_range
  IndexEntry back() const { return (*this)[size() - 1]; }

  void push_back(const IndexEntry& e);  // copies the path
  void pop_back() { resize(size() - 1); }
  void resize(size_t n);  // new members are empty
  void set_label(size_t i, int32_t label) { records_[i].label = label; }
  // Room for n members whose paths take path_bytes; memory reserved and never written costs no RSS.
  void reserve(size_t n, size_t path_bytes);
  // Keeps the members for which keep(i) is true, in order, in place (no second copy of the index).
  template <class Keep>
  void retain(Keep keep);
  size_t path_bytes() const { return paths_.size(); }
  // Bytes held: records and paths, as allocated.
  size_t memory_bytes() const { return records_.capacity() * sizeof(Record) + paths_.capacity(); }

 private:
  struct Record {
    int64_t offset;
    uint64_t size;
    uint64_t path_end;  // member i's path is paths_[path_begin(i), path_end)
    uint32_t input;
    int32_t label;
  };
  uint64_t path_begin(size_t i) const { return i ? records_[i - 1].path_end : 0; }
  void move_member(size_t from, size_t to);

  std::vector<Record> records_;
  std::string paths_;
};

template <class Keep>
void IndexEntries::retain(Keep keep) {
  size_t to = 0;
  for (size_t from = 0; from < size(); ++from)
    if (keep(from)) move_member(from, to++);
  resize(to);
}

}  // namespace convoy::datagen
