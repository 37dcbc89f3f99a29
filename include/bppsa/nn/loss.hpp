// Losses over a batch of logit columns, with PyTorch's mean reduction.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "bppsa/core/types.hpp"

namespace bppsa {

/// cross_entropy: nn.CrossEntropyLoss (log-softmax + NLL, mean over columns).
/// mse:           nn.MSELoss against the one-hot target, mean over every element.
enum class LossType { cross_entropy, mse };
const char* to_string(LossType l);
/// "ce" / "cross_entropy", "mse"; InvalidArgument otherwise.
LossType parse_loss(std::string_view name);

/// Loss of logits (C × N, one column per prediction) against labels[j] ∈ [0, C). When
/// dlogits is given it receives ∂loss/∂logits. Throws InvalidArgument for a label out of
/// range (naming the column and C) and NonFiniteError when the loss is NaN/Inf.
template <class T>
T loss(LossType type, const Matrix<T>& logits, std::span<const std::int64_t> labels, Matrix<T>* dlogits);

}  // namespace bppsa
