// Shared by the tests: catch an expected exception and inspect its message.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

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

}  // namespace testutil
