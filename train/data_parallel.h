// The MPI side of data-parallel training on CPU ranks: rank 0's weights to everyone, gradients
// averaged before each update, and small agreements (stop now?) and sums (metrics).
#pragma once
#include <vector>

namespace convoy {

void broadcast_floats(std::vector<float>& v);  // from rank 0; resizes on the others
void average_gradients(std::vector<float>& g, int ranks);
bool any_rank(bool flag);
void sum_over_ranks(double* values, int count);

}  // namespace convoy
