// Entry point of the GPU tests: prints the device, or exits 77 (ctest: skipped) when no CUDA
// device is usable, saying why (no driver, no GPU).
#include <gtest/gtest.h>

#include <cstdio>

#include "bppsa/core/device.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (bppsa::cuda_device_count() == 0) {
    std::printf("SKIPPED: the GPU tests need a CUDA device: %s\n", bppsa::cuda_summary().c_str());
    return 77;
  }
  std::printf("GPU: %s\n", bppsa::cuda_summary().c_str());
  return RUN_ALL_TESTS();
}
