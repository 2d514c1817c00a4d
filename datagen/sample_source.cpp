// Reading sample bytes. Streamed inputs are walked once per rank, keeping only the members that
// this rank's batch files hold; index entries of an input are a subsequence of its walk order,
// so they are matched by walking both in step.
#include "datagen/sample_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "shared/error.h"
#include "shared/log.h"

namespace convoy::datagen {

SampleSource::SampleSource(const InputIndex& index, const std::vector<uint64_t>& needed) : index_(index) {
  fds_.resize(index.inputs.size());
  for (size_t i = 0; i < index.inputs.size(); ++i) {
    if (index.inputs[i].kind != InputKind::tar) continue;
    fds_[i] = UniqueFd(::open(index.inputs[i].path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fds_[i].fd < 0) fail_file(index.inputs[i].path, "cannot open: " + errno_text());
  }
  std::vector<std::vector<uint64_t>> per_input(index.inputs.size());  // ids of streamed entries, in index order
  std::vector<char> wanted(index.entries.size(), 0);
  for (uint64_t id : needed) wanted[id] = 1;
  for (uint64_t id = 0; id < index.entries.size(); ++id)
    if (index.inputs[index.entries[id].input].kind == InputKind::stream)
      per_input[index.entries[id].input].push_back(id);
  for (size_t i = 0; i < index.inputs.size(); ++i) {
    const auto& ids = per_input[i];
    size_t want = 0;
    for (uint64_t id : ids) want += wanted[id];
    if (want == 0) continue;
    size_t next = 0, kept = 0;
    walk_input(index.inputs[i].path, [&](const Member& m) {
      if (next < ids.size() && m.regular && m.path == index.entries[ids[next]].path) {
        const uint64_t id = ids[next++];
        if (wanted[id]) {
          std::vector<uint8_t> bytes(index.entries[id].size);
          size_t got = 0;
          while (got < bytes.size()) {
            const size_t n = m.read(bytes.data() + got, bytes.size() - got);
            if (n == 0) break;
            got += n;
          }
          bytes.resize(got);
          streamed_.emplace(id, std::move(bytes));
          ++kept;
        }
      }
      return kept < want;  // the rest of the stream holds nothing for this rank
    });
    log_all("%s is compressed: streamed it once, keeping this rank's %zu of its %zu images in memory",
            index.inputs[i].path.c_str(), kept, ids.size());
  }
}

void SampleSource::read(uint64_t id, std::vector<uint8_t>& out) const {
  const IndexEntry e = index_.entries.at(id);
  const InputInfo& in = index_.inputs[e.input];
  switch (in.kind) {
    case InputKind::tar:
      out.resize(e.size);
      pread_exact(fds_[e.input].fd, out.data(), out.size(), uint64_t(e.offset), in.path);
      return;
    case InputKind::folder: {
      const std::string path = in.path + "/" + std::string(e.path);
      const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (fd.fd < 0) fail_file(path, "cannot open: " + errno_text());
      out.resize(e.size);
      pread_exact(fd.fd, out.data(), out.size(), 0, path);
      return;
    }
    case InputKind::stream: {
      auto it = streamed_.find(id);
      if (it == streamed_.end())
        fail_file(in.path, "member '" + std::string(e.path) + "' was not found when streaming");
      out = it->second;
      return;
    }
  }
}

}  // namespace convoy::datagen
