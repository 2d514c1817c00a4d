// The loader's default size, from the cores this process may run on.
#include "input/loader_sizing.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace convoy {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, int(std::thread::hardware_concurrency()));
}

ReaderChoice choose_readers(int requested, int trainer_threads, int local_ranks) {
  if (requested > 0) return {requested, std::to_string(requested) + " reader(s), as --readers asks"};
  const int machine = std::max(1, int(std::thread::hardware_concurrency()));
  const int mask = std::min(machine, usable_cores());
  local_ranks = std::max(1, local_ranks);
  int cores;
  std::string where;
  if (mask < machine) {
    cores = mask;
    where = std::to_string(mask) + " core(s) in this rank's affinity mask";
  } else {
    cores = std::max(1, machine / local_ranks);
    where = std::to_string(machine) + " core(s) shared by " + std::to_string(local_ranks) + " rank(s) on this node";
  }
  const int readers = std::max(2, cores - trainer_threads);
  return {readers, std::to_string(readers) + " reader(s): " + where + ", less " + std::to_string(trainer_threads) +
                       " for the trainer's own thread(s) (--readers overrides)"};
}

}  // namespace convoy
