// RAII owners of CUDA resources: device memory, pinned host memory, a stream, an event. Move-only;
// every allocation is checked (DeviceError with the call, file and line) and a plan that
// would not fit is refused before its first allocation (require_device_memory).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/core/error.hpp"
#include "core/cuda/check.hpp"

namespace bppsa::detail::cuda {

/// `count` values of T in device memory (uninitialised). Size 0 holds no allocation.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count > 0) BPPSA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (data_) discard(cudaFree(data_));  // never throws from a destructor
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      DeviceBuffer old(std::move(*this));
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  /// Uploads `count` ≤ size() host values; complete on the device when it returns (a pageable
  /// cudaMemcpy may return before its DMA lands, and a non-blocking stream would not wait for it).
  void upload(const T* host, std::size_t count) {
    if (count > count_)
      detail::raise<InvalidArgument>("DeviceBuffer::upload",
                                     std::to_string(count) + " values into a buffer of " + std::to_string(count_));
    if (count == 0) return;
    BPPSA_CUDA_CHECK(cudaMemcpy(data_, host, count * sizeof(T), cudaMemcpyHostToDevice));
    BPPSA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }
  /// Sets every byte to `byte`, complete on the device when it returns (as upload).
  void fill_bytes(unsigned char byte) {
    if (count_ == 0) return;
    BPPSA_CUDA_CHECK(cudaMemset(data_, byte, bytes()));
    BPPSA_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// A device buffer holding a copy of `host` (sized to it).
template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> b(host.size());
  b.upload(host);
  return b;
}

/// Page-locked host memory: what cudaMemcpyAsync needs to overlap and to reach full bandwidth.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count) : count_(count) {
    if (count > 0) BPPSA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~PinnedBuffer() {
    if (data_) discard(cudaFreeHost(data_));
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      PinnedBuffer old(std::move(*this));
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  T* data() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// A non-blocking stream (does not synchronise with the legacy default stream).
class Stream {
 public:
  Stream() { BPPSA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (stream_) discard(cudaStreamDestroy(stream_));
  }
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const { BPPSA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

/// A CUDA event, for timing (the default) or, with timing = false, for ordering streams only.
/// Converts to cudaEvent_t, so that it is passed to the runtime's calls as it is.
class Event {
 public:
  explicit Event(bool timing = true) {
    BPPSA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (event_) discard(cudaEventDestroy(event_));
  }
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  operator cudaEvent_t() const { return event_; }  // NOLINT(google-explicit-constructor)

 private:
  cudaEvent_t event_ = nullptr;
};

/// Small host → device uploads queued on a stream without waiting for it (a batch's lengths or
/// sample ids): the bytes go through one of two pinned slots in turn, and a slot is refilled
/// only once the copy that last read it has run (its event), so that the caller may return, and
/// its host values go, as soon as upload() does.
class StagedUploads {
 public:
  /// Queues the copy of `bytes` from host `src` to device `dst` on `stream`.
  void upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
    Slot& s = slots_[next_];
    next_ = 1 - next_;
    if (s.used) BPPSA_CUDA_CHECK(cudaEventSynchronize(s.done));
    if (s.buffer.size() < bytes) s.buffer = PinnedBuffer<unsigned char>(bytes);
    std::memcpy(s.buffer.data(), src, bytes);
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(dst, s.buffer.data(), bytes, cudaMemcpyHostToDevice, stream));
    BPPSA_CUDA_CHECK(cudaEventRecord(s.done, stream));
    s.used = true;
  }

 private:
  struct Slot {
    PinnedBuffer<unsigned char> buffer;
    Event done{false};
    bool used = false;
  };
  std::array<Slot, 2> slots_;
  int next_ = 0;
};

/// A part of a device-memory request, for the message of require_device_memory.
struct DeviceBytes {
  std::string what;
  double bytes = 0;
};

/// Throws ResourceError "[op] <what> needs 12.3 GB of GPU memory (element values 10.1 GB, …)
/// but <device> has 7.9 GB free of 79.6 GB; <fix>" when the items do not fit in the current
/// device's free memory (less a margin for the libraries' own workspace), before allocating.
void require_device_memory(const std::string& op, const std::string& what, const std::vector<DeviceBytes>& items,
                           const std::string& fix);

}  // namespace bppsa::detail::cuda
