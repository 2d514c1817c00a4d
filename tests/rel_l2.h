// The relative L2 error ||a - b|| / ||b|| the whole-net GPU tests compare with: one number per
// tensor, infinite where a holds a non-finite value.
#pragma once
#include <cmath>
#include <vector>

namespace convoy::test {

inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return std::sqrt(diff / ref);
}

}  // namespace convoy::test
