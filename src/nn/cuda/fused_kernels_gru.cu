// The fused scan's column kernels for the gru cell's Step (every compiled tile × columns pair,
// float and double); one cell per file so that the three compile in parallel.
#include "nn/cuda/gru_cell.hpp"
#include "scan/cuda/fused/kernels.cuh"

namespace bppsa::detail::gpu {

template FusedStep<float> make_fused_step<float, GruCell>();
template FusedStep<double> make_fused_step<double, GruCell>();

}  // namespace bppsa::detail::gpu
