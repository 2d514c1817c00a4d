// The ranges and combinations of augmentation options that mean something, as a config's [data]
// section states them, for the callers that fill an AugmentSpec themselves: the Python module and
// the loader (so that `train bench-loader`'s flags get them too).
#pragma once
#include <string>

#include "train/net_config.h"

namespace convoy {

// "" if `a` means something, else its first problem in one line, naming the option as the config
// and the Python module do (crop, pad, scale, ratio, eval_resize, random_resized_crop).
std::string augment_problem(const AugmentSpec& a);

}  // namespace convoy
