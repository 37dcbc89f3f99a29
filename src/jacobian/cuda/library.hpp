// CUDA half of the Jacobian products, the library paths: cuBLAS batched GEMM for dense·dense,
// cuSPARSE SpMM for a CSR matrix shared by the batch times the batch's vectors, and cuSPARSE
// SpGEMM with structure reuse for CSR·CSR. Each object is built once per plan for one flat
// launch of the GPU program (descriptors, pointer tables, buffers) and run every step; every
// call is checked. The own kernels (kernels.hpp) compute the same ops and remain the fallback.
#pragma once

#include <cublas_v2.h>
#include <cusparse.h>

#include <memory>
#include <vector>

#include "core/cuda/buffer.hpp"
#include "jacobian/cuda/items.hpp"

namespace bppsa::detail::gpu {

/// A cuBLAS handle bound to a stream (pointer mode host, default math: no TF32, fp32 stays fp32).
class BlasHandle {
 public:
  explicit BlasHandle(cudaStream_t stream);
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }
  /// Later calls run on `stream` (a caller's, e.g. PyTorch's current stream).
  void set_stream(cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
};

/// A cuSPARSE handle bound to a stream.
class SparseHandle {
 public:
  explicit SparseHandle(cudaStream_t stream);
  ~SparseHandle();
  SparseHandle(const SparseHandle&) = delete;
  SparseHandle& operator=(const SparseHandle&) = delete;
  cusparseHandle_t get() const { return handle_; }

 private:
  cusparseHandle_t handle_ = nullptr;
};

/// Whether cuBLAS can run these dense·dense ops (every shape non-empty and within int).
bool gemm_suitable(const MatOp* ops, Idx count);
/// Whether cuSPARSE can run these CSR ops (no empty pattern: cuSPARSE rejects nnz = 0).
bool spmm_suitable(const VecOp* ops, Idx count);
bool spgemm_suitable(const MatOp* ops, Idx count);

/// The dense·dense ops of one launch (host copy `ops`), `batch` samples each, as
/// cublas<T>gemmBatched calls: one per distinct (m, k, n), at most 65535 products a call.
template <class T>
class BatchedGemm {
 public:
  BatchedGemm(const MatOp* ops, Idx count, Idx batch, T* values);
  void run(cublasHandle_t handle) const;
  int calls() const;
  std::size_t device_bytes() const;

 private:
  struct Group {
    int m = 0, n = 0, k = 0;
    int count = 0;
    cuda::DeviceBuffer<const T*> a, b;
    cuda::DeviceBuffer<T*> c;
  };
  std::vector<Group> groups_;
};

/// The mv ops of one launch whose matrix is a CSR shared by the batch: Y = A · X for all
/// samples at once, one cusparseSpMM per op (non-transposed A: deterministic). Affine parts (z) are
/// not added here: the executor launches launch_add after run().
template <class T>
class SparseMv {
 public:
  SparseMv(cusparseHandle_t handle, const VecOp* ops, Idx count, Idx batch, T* values, std::int32_t* indices);
  ~SparseMv();
  SparseMv(const SparseMv&) = delete;
  SparseMv& operator=(const SparseMv&) = delete;
  void run(cusparseHandle_t handle) const;
  int calls() const { return static_cast<int>(ops_.size()); }
  std::size_t device_bytes() const { return buffer_.bytes(); }

 private:
  void release();  ///< destroys the descriptors (the destructor, and a constructor that fails)

  struct One {
    cusparseSpMatDescr_t a = nullptr;
    cusparseDnMatDescr_t x = nullptr;
    cusparseDnMatDescr_t y = nullptr;
  };
  std::vector<One> ops_;
  cuda::DeviceBuffer<char> buffer_;
};

/// The CSR·CSR ops of one launch through cusparseSpGEMMreuse: work estimation, nnz and copy
/// once here (checking that cuSPARSE's pattern of the product is exactly the fill-in pattern
/// the plan computed on the host, which the rest of the scan reads), compute on every run.
/// Per-sample products reuse one set of descriptors across the samples, re-pointed at each
/// sample's values (cusparseCsrSetPointers; the pattern is the same for every sample).
template <class T>
class SparseGemm {
 public:
  SparseGemm(cusparseHandle_t handle, const MatOp* ops, Idx count, Idx batch, T* values, std::int32_t* indices,
             const std::vector<std::int32_t>& host_indices);
  ~SparseGemm();
  SparseGemm(const SparseGemm&) = delete;
  SparseGemm& operator=(const SparseGemm&) = delete;
  void run(cusparseHandle_t handle) const;
  int calls() const { return static_cast<int>(ops_.size() * static_cast<std::size_t>(batch_)); }
  std::size_t device_bytes() const;

 private:
  void release();

  struct One {
    MatOp op;
    cusparseSpMatDescr_t a = nullptr, b = nullptr, c = nullptr;
    cusparseSpGEMMDescr_t descr = nullptr;
    cuda::DeviceBuffer<char> buffer4, buffer5;
    cuda::DeviceBuffer<std::int32_t> c_row_ptr, c_col_idx;  ///< cuSPARSE's copy of the result's pattern
  };
  std::vector<std::unique_ptr<One>> ops_;
  Idx batch_ = 1;
  T* values_ = nullptr;
  std::int32_t* indices_ = nullptr;
};

}  // namespace bppsa::detail::gpu
