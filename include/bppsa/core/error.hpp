// The one error policy of bppsa: every API boundary throws a bppsa::Error subclass whose
// message names the operation in brackets, the offending object and what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace bppsa {

/// Base of every exception bppsa throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Shapes that do not fit together (consecutive Jacobians, gradient vectors, batch sizes).
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// Arguments that are invalid on their own: empty chains, malformed CSR, bad options.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// NaN or Inf in inputs, or a result that overflowed.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

/// A file that cannot be opened, read or written (missing, permissions, disk full).
class IoError : public Error {
 public:
  using Error::Error;
};

/// A file whose contents are malformed or truncated, or that lacks what the caller needs
/// (a missing tensor, a wrong dtype or shape).
class FormatError : public Error {
 public:
  using Error::Error;
};

/// A request that cannot fit in this machine's (or GPU's) memory, refused before allocating:
/// the message gives the bytes needed, what they are for, what the machine has, and the fix.
class ResourceError : public Error {
 public:
  using Error::Error;
};

/// A CUDA, cuBLAS or cuSPARSE call that failed; the message names the call, the file and
/// line, and the library's own description of the error.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// A feature this build of bppsa does not have ("built without CUDA: …"); the message says
/// how to get it.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

namespace detail {
/// Builds "[op] message" and throws E. Kept out of line so call sites stay small.
template <class E>
[[noreturn]] void raise(const std::string& op, const std::string& message) {
  throw E("[" + op + "] " + message);
}
}  // namespace detail

}  // namespace bppsa
