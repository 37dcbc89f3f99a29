// The fused scan's column kernels for the gru cell (every compiled tile × columns pair, float and
// double); one family per file so that the three compile in parallel.
#include "nn/cuda/fused_kernels.cuh"

namespace bppsa::detail::gpu {

template void fused_columns_family<float, kFamGru>(const FusedArgs<float>&, cudaStream_t, int);
template void fused_columns_family<double, kFamGru>(const FusedArgs<double>&, cudaStream_t, int);

}  // namespace bppsa::detail::gpu
