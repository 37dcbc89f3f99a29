// CUDA executor of scan schedules: binds a compiled Program to device memory, chooses for each
// launch bppsa's kernel or a library path (cuBLAS, cuSPARSE), and runs it on one stream.
#include "scan/cuda/executor.hpp"

#include <algorithm>

#include "bppsa/core/device.hpp"
#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "jacobian/cuda/kernels.hpp"
#include "scan/cuda/device_scan.hpp"

namespace bppsa::detail {

using gpu::Idx;
using gpu::Launch;

template <class T>
DeviceScan<T>::DeviceScan(gpu::Program<T> program, CudaProducts products) : program_(std::move(program)) {
  const char* op = "scan";
  const gpu::Program<T>& p = program_;
  const std::size_t staging = static_cast<std::size_t>(std::max(p.upload_values, p.download_end - p.download_begin));
  // Refuse before allocating: device arenas and tables, then the pinned host staging buffer.
  double elements = 0;
  for (const Idx v : p.element_values) elements += static_cast<double>(v);
  const double t = sizeof(T);
  cuda::require_device_memory(
      op, "the GPU plan of this scan",
      {{"Jacobian values", elements * t},
       {"gradients", static_cast<double>(p.download_end - p.download_begin) * t},
       {"intermediate products", static_cast<double>(p.workspace_values) * t},
       {"shared matrices, injections and g_N", static_cast<double>(p.upload_values) * t - elements * t},
       {"CSR patterns and op tables", static_cast<double>(p.indices.size() * sizeof(std::int32_t) +
                                                          p.mat_ops.size() * sizeof(gpu::MatOp) +
                                                          p.vec_ops.size() * sizeof(gpu::VecOp))}},
      "use a smaller batch or a shorter chain, the hybrid algorithm (it keeps fewer intermediate products), or "
      "Device::cpu");
  check_memory(op, "the GPU plan's pinned host staging buffer", {{"staging", static_cast<double>(staging) * t}},
               "use a smaller batch or a shorter chain");

  values_ = cuda::DeviceBuffer<T>(static_cast<std::size_t>(p.values));
  // Zeroed once: SpMM and SpGEMM-reuse write their outputs with β = 0 into recycled slots, and
  // cuSPARSE does not promise to leave C unread; a NaN left there by the allocator must not leak in.
  values_.fill_bytes(0);
  // Uploads complete when they return (DeviceBuffer::upload): SpGEMM's plan reads the patterns on stream_.
  indices_ = cuda::to_device(p.indices);
  mat_ops_ = cuda::to_device(p.mat_ops);
  vec_ops_ = cuda::to_device(p.vec_ops);
  staging_ = cuda::PinnedBuffer<T>(staging);
  plan_execs(products);
  // The library plans' own pointer tables went up the same way; their set-up ran on stream_.
  BPPSA_CUDA_CHECK(cudaDeviceSynchronize());
}

template <class T>
DeviceScan<T>::~DeviceScan() {
  // Work still queued (a device-resident execute(), or a run that threw) may use what is freed
  // next; a destructor does not throw, and an error here shows at the next checked call.
  cuda::discard(cudaStreamSynchronize(stream_.get()));
}

template <class T>
void DeviceScan<T>::plan_execs(CudaProducts products) {
  const gpu::Program<T>& p = program_;
  const bool libraries = products != CudaProducts::kernels;
  for (std::size_t li = 0; li < p.launches.size(); ++li) {
    const Launch& l = p.launches[li];
    Exec e;
    e.launch = li;
    if (l.type == Launch::Type::mat) {
      const gpu::MatOp* ops = p.mat_ops.data() + l.first;
      if (libraries && l.ka == gpu::kDense && l.kb == gpu::kDense && gpu::gemm_suitable(ops, l.count)) {
        if (!blas_) blas_ = std::make_unique<gpu::BlasHandle>(stream_.get());
        e.how = Exec::How::cublas;
        e.gemm = std::make_unique<gpu::BatchedGemm<T>>(ops, l.count, l.batch, values_.data());
      } else if (libraries && l.ka == gpu::kCsr && l.kb == gpu::kCsr &&
                 (l.shared || products == CudaProducts::libraries) && gpu::spgemm_suitable(ops, l.count)) {
        if (!sparse_) sparse_ = std::make_unique<gpu::SparseHandle>(stream_.get());
        e.how = Exec::How::spgemm;
        e.spgemm = std::make_unique<gpu::SparseGemm<T>>(sparse_->get(), ops, l.count, l.batch, values_.data(),
                                                        indices_.data(), p.indices);
      }
    } else {
      const gpu::VecOp* ops = p.vec_ops.data() + l.first;
      bool shared_csr = l.ka == gpu::kCsr;
      for (Idx i = 0; i < l.count && shared_csr; ++i) shared_csr = ops[i].a.stride == 0;
      if (libraries && shared_csr && gpu::spmm_suitable(ops, l.count)) {
        if (!sparse_) sparse_ = std::make_unique<gpu::SparseHandle>(stream_.get());
        e.how = Exec::How::spmm;
        e.spmm = std::make_unique<gpu::SparseMv<T>>(sparse_->get(), ops, l.count, l.batch, values_.data(),
                                                    indices_.data());
        for (Idx i = 0; i < l.count; ++i) e.add_after = e.add_after || ops[i].z >= 0;
      }
    }
    switch (e.how) {
      case Exec::How::kernel:
        launches_per_run_ += 1;
        break;
      case Exec::How::cublas:
        launches_per_run_ += e.gemm->calls();
        break;
      case Exec::How::spmm:
        launches_per_run_ += e.spmm->calls() + (e.add_after ? 1 : 0);
        break;
      case Exec::How::spgemm:
        launches_per_run_ += e.spgemm->calls();
        break;
    }
    execs_.push_back(std::move(e));
  }
}

template <class T>
void DeviceScan<T>::execute() {
  const gpu::Program<T>& p = program_;
  const cudaStream_t s = stream_.get();
  for (const Exec& e : execs_) {
    const Launch& l = p.launches[e.launch];
    switch (e.how) {
      case Exec::How::kernel:
        if (l.type == Launch::Type::mat)
          gpu::launch_mat(mat_ops_.data() + l.first, l.count, l.batch, l.items, values_.data(), indices_.data(), s);
        else
          gpu::launch_vec(vec_ops_.data() + l.first, l.count, l.batch, l.items, values_.data(), indices_.data(), s);
        break;
      case Exec::How::cublas:
        e.gemm->run(blas_->get());
        break;
      case Exec::How::spmm:
        e.spmm->run(sparse_->get());
        if (e.add_after) gpu::launch_add(vec_ops_.data() + l.first, l.count, l.batch, l.items, values_.data(), s);
        break;
      case Exec::How::spgemm:
        e.spgemm->run(sparse_->get());
        break;
    }
  }
}

template <class T>
void DeviceScan<T>::run(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out, int threads) {
  const gpu::Program<T>& p = program_;
  threads = std::max(threads, 1);
  const cudaStream_t s = stream_.get();
  pack_inputs(p, chain, g_last, staging_.data(), threads);
  try {
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(values_.data(), staging_.data(),
                                     static_cast<std::size_t>(p.upload_values) * sizeof(T), cudaMemcpyHostToDevice, s));
    execute();
    // Stream order: the upload has read the staging buffer before the download writes it.
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(staging_.data(), values_.data() + p.download_begin,
                                     static_cast<std::size_t>(p.download_end - p.download_begin) * sizeof(T),
                                     cudaMemcpyDeviceToHost, s));
  } catch (...) {
    // What was queued may still read the staging buffer, which the next run's pack_inputs writes.
    cuda::discard(cudaStreamSynchronize(s));
    throw;
  }
  stream_.synchronize();  // also where a fault inside a kernel is reported
  unpack_outputs(p, chain, g_last, staging_.data(), out, threads);
}

template <class T>
T* DeviceScan<T>::element_values(Index position) const {
  const Idx off = program_.element_offset.at(static_cast<std::size_t>(position));
  return off >= 0 ? values_.data() + off : nullptr;
}
template <class T>
T* DeviceScan<T>::injection(Index position) const {
  const Idx off = program_.injection_offset.at(static_cast<std::size_t>(position));
  return off >= 0 ? values_.data() + off : nullptr;
}
template <class T>
T* DeviceScan<T>::shared_matrix(std::size_t k) const {
  return values_.data() + program_.shared_matrices.at(k).offset;
}
template <class T>
T* DeviceScan<T>::prefix(Index position) const {
  return values_.data() + program_.prefix_offset.at(static_cast<std::size_t>(position));
}
template <class T>
Index DeviceScan<T>::prefix_rows(Index position) const {
  return program_.prefix_rows.at(static_cast<std::size_t>(position));
}

template <class T>
std::size_t DeviceScan<T>::device_bytes() const {
  std::size_t n = values_.bytes() + indices_.bytes() + mat_ops_.bytes() + vec_ops_.bytes();
  for (const Exec& e : execs_) {
    if (e.gemm) n += e.gemm->device_bytes();
    if (e.spmm) n += e.spmm->device_bytes();
    if (e.spgemm) n += e.spgemm->device_bytes();
  }
  return n;
}

template <class T>
void DeviceScanDeleter<T>::operator()(DeviceScan<T>* p) const noexcept {
  delete p;
}

template <class T>
DeviceScanPtr<T> make_device_scan(const Schedule<T>& schedule, const std::vector<ElementInfo<T>>& elements,
                                  Index batch) {
  if (cuda_device_count() == 0)
    raise<DeviceError>("scan", "ScanOptions::device is cuda but there is " + cuda_summary() +
                                   "; run on a machine with an NVIDIA GPU and its driver, or use Device::cpu");
  return DeviceScanPtr<T>(new DeviceScan<T>(gpu::compile_program(schedule, elements, batch), cuda_products()));
}

template <class T>
void run_device_scan(DeviceScan<T>& scan, const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out,
                     int threads) {
  scan.run(chain, g_last, out, threads);
}

template <class T>
DeviceScanInfo device_scan_info(const DeviceScan<T>& scan) {
  return {scan.launches_per_run(), scan.device_bytes(),
          static_cast<std::size_t>(scan.program().workspace_values) * sizeof(T)};
}

BPPSA_INSTANTIATE_DEVICE_SCAN(float)
BPPSA_INSTANTIATE_DEVICE_SCAN(double)

}  // namespace bppsa::detail
