// The loader's options from the values every caller gives.
#include "input/loader_options.h"

namespace convoy {

LoaderOptions loader_options(const std::string& dir, int local_batch, bool train, SampleOutput output,
                             const AugmentSpec& augment, const DataShare& share, int readers, int prefetch) {
  return LoaderOptions{dir, local_batch, train, output, augment, share, readers, prefetch};
}

}  // namespace convoy
