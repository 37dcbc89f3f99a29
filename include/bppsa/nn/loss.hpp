// Losses over a batch of logit columns, with PyTorch's mean reduction.
#pragma once

#include <cstdint>
#include <span>
#include <string>
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

/// Throws InvalidArgument unless 0 ≤ label < classes, saying which (`what`, e.g. "prediction 3")
/// and why: a negative label is no class index; one ≥ classes means more classes than the head.
void check_label(const char* op, std::int64_t label, const std::string& what, Index classes);

}  // namespace bppsa
