// The op table built from registry.def: each op's accessor declared, then listed, sorted by type;
// the rest of the net finds the ops here.
#include "train/layers/registry.h"

#include <algorithm>
#include <cstring>

namespace convoy {

#define OP(type) const Op& type##_op();
#include "train/layers/registry.def"
#undef OP

const std::vector<const Op*>& registered_ops() {
  static const std::vector<const Op*> ops = [] {
    std::vector<const Op*> v = {
#define OP(type) &type##_op(),
#include "train/layers/registry.def"
#undef OP
    };
    std::sort(v.begin(), v.end(), [](const Op* a, const Op* b) { return std::strcmp(a->type(), b->type()) < 0; });
    return v;
  }();
  return ops;
}

const Op* find_op(const std::string& type) {
  for (const Op* op : registered_ops())
    if (type == op->type()) return op;
  return nullptr;
}

}  // namespace convoy
