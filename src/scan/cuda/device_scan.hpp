// The GPU half of a scan plan: a compiled Program (program.hpp) bound to device memory and to
// a stream, with the library objects of its launches. Everything is allocated here, once per
// plan; a run only copies and launches.
//
// Device-resident use (training on the GPU, later work): write each element's values, the
// shared matrices, the injections and g_N straight into the buffers element_values(),
// shared_matrix(), injection() and prefix(0) point to (stream-ordered on stream()), call
// execute(), and read the gradients from prefix(i) = g_{N−i} (prefix_rows(i) × batch,
// column-major). No host copy is involved; the addresses stay fixed for the plan's life.
#pragma once

#include <memory>
#include <vector>

#include "core/cuda/buffer.hpp"
#include "jacobian/cuda/library.hpp"
#include "scan/cuda/executor.hpp"
#include "scan/cuda/program.hpp"

namespace bppsa::detail {

template <class T>
class DeviceScan {
 public:
  DeviceScan(gpu::Program<T> program, CudaProducts products);
  ~DeviceScan();
  DeviceScan(const DeviceScan&) = delete;
  DeviceScan& operator=(const DeviceScan&) = delete;

  /// Runs every launch of the program on stream(), on data already on the device.
  void execute();

  /// Host data in, gradients out (see run_device_scan).
  void run(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out, int threads);

  const gpu::Program<T>& program() const { return program_; }
  cudaStream_t stream() const { return stream_.get(); }
  /// Device buffers of scan position i (1..n): the element's values (count × per sample),
  /// its affine part (rows × batch; null when the chain has none there).
  T* element_values(Index position) const;
  T* injection(Index position) const;
  /// Shared matrix S number k of program().shared_matrices.
  T* shared_matrix(std::size_t k) const;
  /// s_i = g_{N−i}, prefix_rows(i) × batch, column-major; prefix(0) is g_N (an input).
  T* prefix(Index position) const;
  Index prefix_rows(Index position) const;

  Index launches_per_run() const { return launches_per_run_; }
  std::size_t device_bytes() const;

 private:
  /// How one launch of the program runs.
  struct Exec {
    enum class How { kernel, cublas, spmm, spgemm };
    How how = How::kernel;
    std::size_t launch = 0;
    std::unique_ptr<gpu::BatchedGemm<T>> gemm;
    std::unique_ptr<gpu::SparseMv<T>> spmm;
    std::unique_ptr<gpu::SparseGemm<T>> spgemm;
    bool add_after = false;  ///< spmm: some op has an affine part, added by a kernel after
  };

  void plan_execs(CudaProducts products);

  gpu::Program<T> program_;
  cuda::Stream stream_;
  cuda::DeviceBuffer<T> values_;
  cuda::DeviceBuffer<std::int32_t> indices_;
  cuda::DeviceBuffer<gpu::MatOp> mat_ops_;
  cuda::DeviceBuffer<gpu::VecOp> vec_ops_;
  cuda::PinnedBuffer<T> staging_;
  std::unique_ptr<gpu::BlasHandle> blas_;
  std::unique_ptr<gpu::SparseHandle> sparse_;
  std::vector<Exec> execs_;
  Index launches_per_run_ = 0;
};

}  // namespace bppsa::detail
