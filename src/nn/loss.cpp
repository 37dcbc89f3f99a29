// Cross-entropy and MSE with PyTorch's mean reduction, with their gradients.
#include "bppsa/nn/loss.hpp"

#include <cmath>
#include <string>

#include "bppsa/core/error.hpp"

namespace bppsa {

const char* to_string(LossType l) { return l == LossType::cross_entropy ? "ce" : "mse"; }

LossType parse_loss(std::string_view name) {
  if (name == "ce" || name == "cross_entropy") return LossType::cross_entropy;
  if (name == "mse") return LossType::mse;
  detail::raise<InvalidArgument>("loss", "unknown loss '" + std::string(name) + "'; use ce or mse");
}

void check_label(const char* op, std::int64_t label, const std::string& what, Index classes) {
  if (label < 0)
    detail::raise<InvalidArgument>(op, "label " + std::to_string(label) + " (" + what +
                                           ") is negative: labels are class indices in [0, " +
                                           std::to_string(classes) + ")");
  if (label >= classes)
    detail::raise<InvalidArgument>(op, "label " + std::to_string(label) + " (" + what + ") is outside [0, " +
                                           std::to_string(classes) + "): the data has more classes than the model's head");
}

template <class T>
T loss(LossType type, const Matrix<T>& logits, std::span<const std::int64_t> labels, Matrix<T>* dlogits) {
  const char* op = "loss";
  const Index C = logits.rows(), N = logits.cols();
  if (static_cast<Index>(labels.size()) != N)
    detail::raise<ShapeError>(op, std::to_string(labels.size()) + " labels for " + std::to_string(N) + " predictions");
  for (Index j = 0; j < N; ++j) check_label(op, labels[static_cast<std::size_t>(j)], "prediction " + std::to_string(j), C);
  if (dlogits) dlogits->resize(C, N);
  double total = 0;
  if (type == LossType::cross_entropy) {
    for (Index j = 0; j < N; ++j) {
      const auto z = logits.col(j);
      const T m = z.maxCoeff();
      const double sum = (z.array() - m).exp().sum();
      const double lse = static_cast<double>(m) + std::log(sum);
      const Index y = labels[static_cast<std::size_t>(j)];
      total += lse - static_cast<double>(z(y));
      if (dlogits) {
        dlogits->col(j) = ((z.array() - static_cast<T>(lse)).exp() / static_cast<T>(N)).matrix();
        (*dlogits)(y, j) -= T(1) / static_cast<T>(N);
      }
    }
    total /= static_cast<double>(N);
  } else {
    const T scale = T(2) / static_cast<T>(C * N);
    for (Index j = 0; j < N; ++j) {
      const Index y = labels[static_cast<std::size_t>(j)];
      for (Index c = 0; c < C; ++c) {
        const T d = logits(c, j) - (c == y ? T(1) : T(0));
        total += static_cast<double>(d) * d;
        if (dlogits) (*dlogits)(c, j) = scale * d;
      }
    }
    total /= static_cast<double>(C * N);
  }
  if (!std::isfinite(total))
    detail::raise<NonFiniteError>(op, std::string("the ") + to_string(type) +
                                          " loss is not finite (NaN/Inf): the model diverged or the inputs hold "
                                          "NaN/Inf; lower the learning rate or check the data");
  return static_cast<T>(total);
}

template float loss<float>(LossType, const Matrix<float>&, std::span<const std::int64_t>, Matrix<float>*);
template double loss<double>(LossType, const Matrix<double>&, std::span<const std::int64_t>, Matrix<double>*);

}  // namespace bppsa
