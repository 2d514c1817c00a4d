// How many reader threads a rank's loader runs when the user does not say: the cores this rank has
// on its node, less those the trainer's own threads keep busy.
#pragma once
#include <string>

namespace convoy {

struct ReaderChoice {
  int readers = 1;
  std::string why;  // one line for the log
};

// requested > 0 is the user's --readers and is kept. Otherwise: the cores of this process's
// affinity mask when it is narrower than the machine (mpirun or a scheduler bound it to its share),
// else the machine's cores over local_ranks; less trainer_threads; at least 2, so that one reader can
// read a file while another builds a batch.
ReaderChoice choose_readers(int requested, int trainer_threads, int local_ranks);
// The cores in this process's affinity mask.
int usable_cores();

}  // namespace convoy
