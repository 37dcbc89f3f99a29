// The fused scan's column kernels for the rnn cell's Step (every compiled tile × columns pair,
// float and double); one cell per file so that the three compile in parallel.
#include "nn/cuda/rnn_cell.hpp"
#include "scan/cuda/fused/kernels.cuh"

namespace bppsa::detail::gpu {

template FusedStep<float> make_fused_step<float, RnnCell>();
template FusedStep<double> make_fused_step<double, RnnCell>();

}  // namespace bppsa::detail::gpu
