// cuBLAS and cuSPARSE paths of the GPU products (see library.hpp).
#include "jacobian/cuda/library.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#include "bppsa/core/error.hpp"

namespace bppsa::detail::gpu {
namespace {

template <class T>
constexpr cudaDataType data_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F;
}

cublasStatus_t gemm_batched(cublasHandle_t h, int m, int n, int k, const float* alpha, const float* const a[],
                            const float* const b[], const float* beta, float* const c[], int count) {
  return cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, m, b, k, beta, c, m, count);
}
cublasStatus_t gemm_batched(cublasHandle_t h, int m, int n, int k, const double* alpha, const double* const a[],
                            const double* const b[], const double* beta, double* const c[], int count) {
  return cublasDgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, m, b, k, beta, c, m, count);
}

constexpr int kMaxBatch = 65535;  // cuBLAS batched calls are split at the grid's y/z limit

bool fits_int(Idx x) { return x >= 0 && x <= INT_MAX; }

/// A cuSPARSE workspace of `bytes`, never null: the two-phase calls read a null buffer as "report
/// the size only", so a size of 0 must still be a real allocation for the second call to work.
cuda::DeviceBuffer<char> workspace(std::size_t bytes) {
  return cuda::DeviceBuffer<char>(std::max<std::size_t>(bytes, 16));
}

}  // namespace

BlasHandle::BlasHandle(cudaStream_t stream) {
  BPPSA_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    BPPSA_CUBLAS_CHECK(cublasSetStream(handle_, stream));
    BPPSA_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    BPPSA_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublasDestroy(handle_);  // no destructor runs for a constructor that throws
    throw;
  }
}
void BlasHandle::set_stream(cudaStream_t stream) { BPPSA_CUBLAS_CHECK(cublasSetStream(handle_, stream)); }
BlasHandle::~BlasHandle() {
  if (handle_) cublasDestroy(handle_);
}

SparseHandle::SparseHandle(cudaStream_t stream) {
  BPPSA_CUSPARSE_CHECK(cusparseCreate(&handle_));
  try {
    BPPSA_CUSPARSE_CHECK(cusparseSetStream(handle_, stream));
  } catch (...) {
    cusparseDestroy(handle_);
    throw;
  }
}
SparseHandle::~SparseHandle() {
  if (handle_) cusparseDestroy(handle_);
}

bool gemm_suitable(const MatOp* ops, Idx count) {
  for (Idx i = 0; i < count; ++i) {
    const MatOp& o = ops[i];
    if (o.a.rows <= 0 || o.a.cols <= 0 || o.b.cols <= 0) return false;
    if (!fits_int(o.a.rows) || !fits_int(o.a.cols) || !fits_int(o.b.cols)) return false;
  }
  return true;
}

bool spmm_suitable(const VecOp* ops, Idx count) {
  for (Idx i = 0; i < count; ++i)
    if (ops[i].a.nnz <= 0 || ops[i].a.rows <= 0 || ops[i].a.cols <= 0) return false;
  return true;
}

bool spgemm_suitable(const MatOp* ops, Idx count) {
  for (Idx i = 0; i < count; ++i)
    if (ops[i].a.nnz <= 0 || ops[i].b.nnz <= 0 || ops[i].out_nnz <= 0 || ops[i].a.rows <= 0 || ops[i].b.cols <= 0)
      return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// cuBLAS

template <class T>
BatchedGemm<T>::BatchedGemm(const MatOp* ops, Idx count, Idx batch, T* values) {
  // Pointer tables per shape, (op, sample) in launch order.
  std::map<std::tuple<Idx, Idx, Idx>, std::tuple<std::vector<const T*>, std::vector<const T*>, std::vector<T*>>> by;
  for (Idx i = 0; i < count; ++i) {
    const MatOp& o = ops[i];
    auto& [a, b, c] = by[{o.a.rows, o.a.cols, o.b.cols}];
    for (Idx s = 0; s < batch; ++s) {
      a.push_back(values + o.a.values + s * o.a.stride);
      b.push_back(values + o.b.values + s * o.b.stride);
      c.push_back(values + o.out + s * o.out_stride);
    }
  }
  for (auto& [shape, tables] : by) {
    auto& [a, b, c] = tables;
    for (std::size_t first = 0; first < a.size(); first += kMaxBatch) {
      const std::size_t n = std::min<std::size_t>(kMaxBatch, a.size() - first);
      Group g;
      g.m = static_cast<int>(std::get<0>(shape));
      g.k = static_cast<int>(std::get<1>(shape));
      g.n = static_cast<int>(std::get<2>(shape));
      g.count = static_cast<int>(n);
      g.a = cuda::to_device(std::vector<const T*>(a.begin() + first, a.begin() + first + n));
      g.b = cuda::to_device(std::vector<const T*>(b.begin() + first, b.begin() + first + n));
      g.c = cuda::to_device(std::vector<T*>(c.begin() + first, c.begin() + first + n));
      groups_.push_back(std::move(g));
    }
  }
}

template <class T>
void BatchedGemm<T>::run(cublasHandle_t handle) const {
  const T one = T(1), zero = T(0);
  for (const Group& g : groups_)
    BPPSA_CUBLAS_CHECK(gemm_batched(handle, g.m, g.n, g.k, &one, g.a.data(), g.b.data(), &zero, g.c.data(), g.count));
}

template <class T>
int BatchedGemm<T>::calls() const {
  return static_cast<int>(groups_.size());
}

template <class T>
std::size_t BatchedGemm<T>::device_bytes() const {
  std::size_t n = 0;
  for (const Group& g : groups_) n += g.a.bytes() + g.b.bytes() + g.c.bytes();
  return n;
}

// ---------------------------------------------------------------------------------------------
// cuSPARSE SpMM: shared CSR × the batch's vectors

template <class T>
SparseMv<T>::SparseMv(cusparseHandle_t handle, const VecOp* ops, Idx count, Idx batch, T* values,
                      std::int32_t* indices) {
  const T one = T(1), zero = T(0);
  std::size_t largest = 0;
  try {
    for (Idx i = 0; i < count; ++i) {
      const VecOp& o = ops[i];
      One d;
      ops_.push_back(d);
      One& e = ops_.back();
      BPPSA_CUSPARSE_CHECK(cusparseCreateCsr(&e.a, o.a.rows, o.a.cols, o.a.nnz, indices + o.a.row_ptr,
                                             indices + o.a.col_idx, values + o.a.values, CUSPARSE_INDEX_32I,
                                             CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, data_type<T>()));
      BPPSA_CUSPARSE_CHECK(
          cusparseCreateDnMat(&e.x, o.a.cols, batch, o.ldx, values + o.x, data_type<T>(), CUSPARSE_ORDER_COL));
      BPPSA_CUSPARSE_CHECK(
          cusparseCreateDnMat(&e.y, o.a.rows, batch, o.ldy, values + o.y, data_type<T>(), CUSPARSE_ORDER_COL));
      std::size_t bytes = 0;
      BPPSA_CUSPARSE_CHECK(cusparseSpMM_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                                   CUSPARSE_OPERATION_NON_TRANSPOSE, &one, e.a, e.x, &zero, e.y,
                                                   data_type<T>(), CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
      largest = std::max(largest, bytes);
    }
    buffer_ = workspace(largest);  // never null: cuSPARSE may ask for 0 bytes
  } catch (...) {
    release();
    throw;
  }
}

template <class T>
SparseMv<T>::~SparseMv() {
  release();
}

template <class T>
void SparseMv<T>::release() {
  for (One& e : ops_) {
    if (e.a) cusparseDestroySpMat(e.a);
    if (e.x) cusparseDestroyDnMat(e.x);
    if (e.y) cusparseDestroyDnMat(e.y);
    e = One{};
  }
}

template <class T>
void SparseMv<T>::run(cusparseHandle_t handle) const {
  const T one = T(1), zero = T(0);
  for (const One& e : ops_)
    BPPSA_CUSPARSE_CHECK(cusparseSpMM(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one,
                                      e.a, e.x, &zero, e.y, data_type<T>(), CUSPARSE_SPMM_ALG_DEFAULT, buffer_.data()));
}

// ---------------------------------------------------------------------------------------------
// cuSPARSE SpGEMM with structure reuse

template <class T>
SparseGemm<T>::SparseGemm(cusparseHandle_t handle, const MatOp* ops, Idx count, Idx batch, T* values,
                          std::int32_t* indices, const std::vector<std::int32_t>& host_indices)
    : batch_(batch), values_(values), indices_(indices) {
  const auto N = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const auto alg = CUSPARSE_SPGEMM_DEFAULT;
  try {
    for (Idx i = 0; i < count; ++i) {
      ops_.push_back(std::make_unique<One>());
      One& e = *ops_.back();
      const MatOp& o = e.op = ops[i];
      const Idx m = o.a.rows, n = o.b.cols;
      BPPSA_CUSPARSE_CHECK(cusparseCreateCsr(&e.a, m, o.a.cols, o.a.nnz, indices + o.a.row_ptr, indices + o.a.col_idx,
                                             values + o.a.values, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                             CUSPARSE_INDEX_BASE_ZERO, data_type<T>()));
      BPPSA_CUSPARSE_CHECK(cusparseCreateCsr(&e.b, o.b.rows, n, o.b.nnz, indices + o.b.row_ptr, indices + o.b.col_idx,
                                             values + o.b.values, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                             CUSPARSE_INDEX_BASE_ZERO, data_type<T>()));
      e.c_row_ptr = cuda::DeviceBuffer<std::int32_t>(static_cast<std::size_t>(m) + 1);
      BPPSA_CUSPARSE_CHECK(cusparseCreateCsr(&e.c, m, n, 0, e.c_row_ptr.data(), nullptr, nullptr, CUSPARSE_INDEX_32I,
                                             CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, data_type<T>()));
      BPPSA_CUSPARSE_CHECK(cusparseSpGEMM_createDescr(&e.descr));

      std::size_t size1 = 0, size2 = 0, size3 = 0, size4 = 0, size5 = 0;
      BPPSA_CUSPARSE_CHECK(
          cusparseSpGEMMreuse_workEstimation(handle, N, N, e.a, e.b, e.c, alg, e.descr, &size1, nullptr));
      cuda::DeviceBuffer<char> buffer1 = workspace(size1);
      BPPSA_CUSPARSE_CHECK(
          cusparseSpGEMMreuse_workEstimation(handle, N, N, e.a, e.b, e.c, alg, e.descr, &size1, buffer1.data()));
      BPPSA_CUSPARSE_CHECK(cusparseSpGEMMreuse_nnz(handle, N, N, e.a, e.b, e.c, alg, e.descr, &size2, nullptr, &size3,
                                                   nullptr, &size4, nullptr));
      cuda::DeviceBuffer<char> buffer2 = workspace(size2), buffer3 = workspace(size3);
      e.buffer4 = workspace(size4);
      BPPSA_CUSPARSE_CHECK(cusparseSpGEMMreuse_nnz(handle, N, N, e.a, e.b, e.c, alg, e.descr, &size2, buffer2.data(),
                                                   &size3, buffer3.data(), &size4, e.buffer4.data()));
      std::int64_t rows = 0, cols = 0, nnz = 0;
      BPPSA_CUSPARSE_CHECK(cusparseSpMatGetSize(e.c, &rows, &cols, &nnz));
      if (nnz != o.out_nnz)
        raise<DeviceError>("cuda", "cuSPARSE's SpGEMM counts " + std::to_string(nnz) + " entries in a " +
                                       std::to_string(m) + "×" + std::to_string(n) +
                                       " CSR·CSR product where the plan's fill-in pattern has " +
                                       std::to_string(o.out_nnz) +
                                       "; run with BPPSA_CUDA_PRODUCTS=kernels to use bppsa's own SpGEMM kernel");
      e.c_col_idx = cuda::DeviceBuffer<std::int32_t>(static_cast<std::size_t>(nnz));
      BPPSA_CUSPARSE_CHECK(cusparseCsrSetPointers(e.c, e.c_row_ptr.data(), e.c_col_idx.data(), values + o.out));
      BPPSA_CUSPARSE_CHECK(cusparseSpGEMMreuse_copy(handle, N, N, e.a, e.b, e.c, alg, e.descr, &size5, nullptr));
      e.buffer5 = workspace(size5);
      BPPSA_CUSPARSE_CHECK(
          cusparseSpGEMMreuse_copy(handle, N, N, e.a, e.b, e.c, alg, e.descr, &size5, e.buffer5.data()));

      // The rest of the scan reads the product in the plan's pattern: cuSPARSE's must be the same.
      // (The handle's stream does not synchronise with cudaMemcpy's default stream: wait for it,
      // which also lets buffers 1–3 be freed at the end of this iteration.)
      cudaStream_t stream = nullptr;
      BPPSA_CUSPARSE_CHECK(cusparseGetStream(handle, &stream));
      BPPSA_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<std::int32_t> rp(static_cast<std::size_t>(m) + 1), ci(static_cast<std::size_t>(nnz));
      BPPSA_CUDA_CHECK(
          cudaMemcpy(rp.data(), e.c_row_ptr.data(), rp.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost));
      BPPSA_CUDA_CHECK(
          cudaMemcpy(ci.data(), e.c_col_idx.data(), ci.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost));
      const auto plan_rp = host_indices.begin() + o.out_row_ptr;
      const auto plan_ci = host_indices.begin() + o.out_col_idx;
      if (!std::equal(rp.begin(), rp.end(), plan_rp) || !std::equal(ci.begin(), ci.end(), plan_ci))
        raise<DeviceError>("cuda", "cuSPARSE's SpGEMM pattern of a " + std::to_string(m) + "×" + std::to_string(n) +
                                       " CSR·CSR product differs from the plan's fill-in pattern (order or "
                                       "entries); run with BPPSA_CUDA_PRODUCTS=kernels to use bppsa's own SpGEMM "
                                       "kernel");
    }
  } catch (...) {
    release();
    throw;
  }
}

template <class T>
SparseGemm<T>::~SparseGemm() {
  release();
}

template <class T>
void SparseGemm<T>::release() {
  for (auto& p : ops_) {
    if (!p) continue;
    if (p->descr) cusparseSpGEMM_destroyDescr(p->descr);
    if (p->a) cusparseDestroySpMat(p->a);
    if (p->b) cusparseDestroySpMat(p->b);
    if (p->c) cusparseDestroySpMat(p->c);
    p.reset();
  }
  ops_.clear();
}

template <class T>
void SparseGemm<T>::run(cusparseHandle_t handle) const {
  const auto N = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const T one = T(1), zero = T(0);
  for (const auto& p : ops_) {
    const One& e = *p;
    const MatOp& o = e.op;
    for (Idx s = 0; s < batch_; ++s) {
      if (batch_ > 1) {  // the same patterns, sample s's values
        BPPSA_CUSPARSE_CHECK(cusparseCsrSetPointers(e.a, indices_ + o.a.row_ptr, indices_ + o.a.col_idx,
                                                    values_ + o.a.values + s * o.a.stride));
        BPPSA_CUSPARSE_CHECK(cusparseCsrSetPointers(e.b, indices_ + o.b.row_ptr, indices_ + o.b.col_idx,
                                                    values_ + o.b.values + s * o.b.stride));
        BPPSA_CUSPARSE_CHECK(
            cusparseCsrSetPointers(e.c, e.c_row_ptr.data(), e.c_col_idx.data(), values_ + o.out + s * o.out_stride));
      }
      BPPSA_CUSPARSE_CHECK(cusparseSpGEMMreuse_compute(handle, N, N, &one, e.a, e.b, &zero, e.c, data_type<T>(),
                                                       CUSPARSE_SPGEMM_DEFAULT, e.descr));
    }
  }
}

template <class T>
std::size_t SparseGemm<T>::device_bytes() const {
  std::size_t n = 0;
  for (const auto& p : ops_) n += p->buffer4.bytes() + p->buffer5.bytes() + p->c_row_ptr.bytes() + p->c_col_idx.bytes();
  return n;
}

template class BatchedGemm<float>;
template class BatchedGemm<double>;
template class SparseMv<float>;
template class SparseMv<double>;
template class SparseGemm<float>;
template class SparseGemm<double>;

}  // namespace bppsa::detail::gpu
