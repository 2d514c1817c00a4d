// The list of registered ops, one line each; the rest of the net finds them here by type.
#include "train/layers/registry.h"

#include <algorithm>
#include <cstring>

#include "train/layers/batchnorm.h"
#include "train/layers/conv.h"
#include "train/layers/dropout.h"
#include "train/layers/elementwise.h"
#include "train/layers/fc.h"
#include "train/layers/flatten.h"
#include "train/layers/pool.h"
#include "train/layers/softmax_xent.h"

namespace convoy {

const std::vector<const Op*>& registered_ops() {
  static const std::vector<const Op*> ops = [] {
    std::vector<const Op*> v = {
        &add_op(),
        &avg_pool_op(),
        &batch_norm_op(),
        &conv_op(),
        &dropout_op(),
        &fc_op(),
        &flatten_op(),
        &global_avg_pool_op(),
        &max_pool_op(),
        &relu_op(),
        &softmax_xent_op(),
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
