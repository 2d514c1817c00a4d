// The op table: every layer type a config may name. Adding a type is one line in registry.def
// (and the op's own files in train/layers/, which the build finds by itself).
#pragma once
#include <string>
#include <vector>

#include "train/layers/op.h"

namespace convoy {

// Sorted by type.
const std::vector<const Op*>& registered_ops();
// The op of a config's `type = "..."`, or null.
const Op* find_op(const std::string& type);

}  // namespace convoy
