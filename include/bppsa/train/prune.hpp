// Pruning for retraining (the paper's use case for sparse Jacobians, docs/method.md §5): global
// magnitude pruning of a CNN's weights to a target sparsity, masks kept fixed while training.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bppsa/nn/conv_net.hpp"

namespace bppsa {

struct PruneReport {
  Index total = 0;   ///< weights considered (every conv and linear weight; biases are kept)
  Index pruned = 0;  ///< weights masked
  double sparsity() const { return total ? static_cast<double>(pruned) / static_cast<double>(total) : 0; }
  struct Tensor {
    std::string name;
    Index total = 0, pruned = 0;
  };
  std::vector<Tensor> tensors;
  /// "pruned 90.00 % of 1,234,567 weights (0.weight 12.3 %, …)"
  std::string str() const;
};

/// Masks the round(sparsity · total) weights of smallest magnitude across all layers (ties
/// broken by position, so the count is exact), replacing any previous masks. sparsity in
/// [0, 1); InvalidArgument otherwise.
template <class T>
PruneReport prune_global_magnitude(ConvNet<T>& model, double sparsity);

/// Masks the weights that are exactly zero: restores the masks of a pruned checkpoint.
template <class T>
PruneReport masks_from_zeros(ConvNet<T>& model);

/// Checkpoint metadata recording the sparsity a model was pruned to ("0.900000").
inline constexpr const char* kSparsityKey = "bppsa.sparsity";

/// For a checkpoint saved from a pruned run (kSparsityKey > 0), whose weights the model has
/// loaded: restores its masks from the zero weights (masks_from_zeros) and returns the
/// report; nullopt for an unpruned checkpoint. FormatError when the value is not a number.
template <class T>
std::optional<PruneReport> restore_masks(ConvNet<T>& model, const TensorFile& checkpoint);

}  // namespace bppsa
