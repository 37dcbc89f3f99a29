// Shared by the tests: catch an expected exception and inspect its message.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

#include "bppsa/core/device.hpp"
#include "bppsa/core/error.hpp"

namespace testutil {

/// The what() of the E that f throws; "" and a test failure if it throws nothing or something else.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

/// Runs f, expects an exception of type E whose message contains every one of `parts`.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  const std::string msg = message_of<E>(f);
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

/// Runs f, which asks for Device::cuda where no GPU is usable: a build without CUDA must say so
/// (UnsupportedError), a CUDA build that there is no device (DeviceError).
template <class F>
void expect_no_gpu_error(F&& f) {
  if (bppsa::cuda_built())
    expect_error<bppsa::DeviceError>(f, {"no CUDA device"});
  else
    expect_error<bppsa::UnsupportedError>(f, {"built without CUDA"});
}

}  // namespace testutil
