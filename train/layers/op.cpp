// The few helpers every op's shape rule shares: dims in messages, and failing with the layer's
// file, line and name.
#include "train/layers/op.h"

#include "shared/error.h"

namespace convoy {

std::string dims_text(Dims d) { return std::to_string(d.c) + "x" + std::to_string(d.h) + "x" + std::to_string(d.w); }

void ShapeIn::fail(const std::string& why) const {
  fail_file(path + ":" + std::to_string(spec.line), "layer '" + spec.name + "': " + why);
}

}  // namespace convoy
