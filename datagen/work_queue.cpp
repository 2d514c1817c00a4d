// Samples before beginnings: a file is begun only when every sample of the files before it has
// been handed out, which keeps the files in memory few and lets them finish in order.
#include "datagen/work_queue.h"

namespace convoy::datagen {

WorkQueue::Item WorkQueue::next(const std::function<void()>& before_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  bool flushed = !before_wait;
  for (;;) {
    if (stopped_) return {};
    if (!open_.empty()) {
      Open& f = open_.front();
      const Item item{Item::sample, f.file, f.next_slot++};
      if (f.next_slot == f.samples) open_.pop_front();
      return item;
    }
    if (next_file_ < files_) {
      ++beginning_;
      return {Item::begin, next_file_++, 0};
    }
    if (beginning_ == 0) return {};
    if (!flushed) {  // and then look again: what it flushed may have changed nothing here, or much
      flushed = true;
      lock.unlock();
      before_wait();
      lock.lock();
      continue;
    }
    changed_.wait(lock);
  }
}

void WorkQueue::begun(size_t file, size_t samples) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --beginning_;
    if (samples > 0) open_.push_back({file, 0, samples});
  }
  changed_.notify_all();
}

size_t WorkQueue::files_begun() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_file_;
}

void WorkQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  changed_.notify_all();
}

}  // namespace convoy::datagen
