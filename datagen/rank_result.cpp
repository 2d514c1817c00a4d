// Fixed-width fields in a fixed order, a string as its length and then its bytes; the phases go
// field by field through the phase table, so the record follows Phases without a list of its own.
#include "datagen/rank_result.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "datagen/mpi_bytes.h"
#include "shared/error.h"

namespace convoy::datagen {
namespace {

class Packer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_arithmetic_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put(uint64_t(s.size()));
    bytes_ += s;
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class Unpacker {
 public:
  explicit Unpacker(const std::string& bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    static_assert(std::is_arithmetic_v<T>);
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    return std::string(take(n), n);
  }
  // A count of records, each taking at least one byte.
  size_t count() {
    const uint64_t n = get<uint64_t>();
    if (n > bytes_.size() - at_) fail("internal: a rank's results arrived cut short");
    return size_t(n);
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const char* take(uint64_t n) {
    if (n > bytes_.size() - at_) fail("internal: a rank's results arrived cut short");
    const char* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  const std::string& bytes_;
  size_t at_ = 0;
};

}  // namespace

std::string RankResult::to_bytes() const {
  Packer p;
  p.put(uint64_t(files.size()));
  for (const auto& [b, e] : files) p.put(b), p.put(e.name), p.put(e.count), p.put(e.bytes), p.put(e.crc32c);
  p.put(uint64_t(rejects.size()));
  for (const auto& [id, why] : rejects) p.put(id), p.put(why);
  for (const PhaseField& f : kPhaseFields) p.put(phases.*f.member);
  p.put(kept);
  return p.take();
}

RankResult RankResult::from_bytes(const std::string& bytes) {
  Unpacker u(bytes);
  RankResult r;
  r.files.resize(u.count());
  for (auto& [b, e] : r.files) {
    b = u.get<uint64_t>();
    e.name = u.get_string();
    e.count = u.get<uint32_t>();
    e.bytes = u.get<uint64_t>();
    e.crc32c = u.get<uint32_t>();
  }
  r.rejects.resize(u.count());
  for (auto& [id, why] : r.rejects) id = u.get<uint64_t>(), why = u.get_string();
  for (const PhaseField& f : kPhaseFields) r.phases.*f.member = u.get<double>();
  r.kept = u.get<int>();
  if (!u.done()) fail("internal: a rank's results arrived with bytes to spare");
  return r;
}

RankResult gather_results(const RankResult& mine, const MpiContext& mpi) {
  const std::vector<std::string> all = gather_strings(mine.to_bytes(), mpi);
  RankResult sum;
  for (const std::string& bytes : all) {
    const RankResult r = RankResult::from_bytes(bytes);
    sum.files.insert(sum.files.end(), r.files.begin(), r.files.end());
    sum.rejects.insert(sum.rejects.end(), r.rejects.begin(), r.rejects.end());
    sum.phases += r.phases;
    sum.kept += r.kept;
  }
  std::sort(sum.files.begin(), sum.files.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::sort(sum.rejects.begin(), sum.rejects.end());
  return sum;
}

}  // namespace convoy::datagen
