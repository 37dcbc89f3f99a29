// Scalar, index and matrix types shared by the whole API.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>

namespace bppsa {

/// Sizes and positions. Compressed (CSR) index arrays use std::int32_t.
using Index = std::int64_t;

/// Column-major dense matrix. A batch of B vectors of length d is a d × B Matrix<T>
/// (one column per sample).
template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

/// Row-major dense matrix: parameters are stored this way so that their memory layout is
/// PyTorch's (weight [out, in], C order) and checkpoints copy straight through.
template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// "20×30": shapes in messages.
inline std::string shape_string(Index rows, Index cols) { return std::to_string(rows) + "×" + std::to_string(cols); }

}  // namespace bppsa
