// The fused scan's column kernels for the rnn cell (every compiled tile × columns pair, float and
// double); one family per file so that the three compile in parallel.
#include "nn/cuda/fused_kernels.cuh"

namespace bppsa::detail::gpu {

template void fused_columns_family<float, kFamRnn>(const FusedArgs<float>&, cudaStream_t, int);
template void fused_columns_family<double, kFamRnn>(const FusedArgs<double>&, cudaStream_t, int);

}  // namespace bppsa::detail::gpu
