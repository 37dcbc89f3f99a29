// The fused scan's column kernels for the lstm cell's Step (every compiled tile × columns pair,
// float and double); one cell per file so that the three compile in parallel.
#include "nn/cuda/lstm_cell.hpp"
#include "scan/cuda/fused/kernels.cuh"

namespace bppsa::detail::gpu {

template FusedStep<float> make_fused_step<float, LstmCell>();
template FusedStep<double> make_fused_step<double, LstmCell>();

}  // namespace bppsa::detail::gpu
