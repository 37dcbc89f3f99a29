// Global magnitude pruning and mask recovery for ConvNets.
#include "bppsa/train/prune.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "bppsa/core/error.hpp"

namespace bppsa {

std::string PruneReport::str() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "pruned %.2f %% of %lld weights (", 100 * sparsity(), static_cast<long long>(total));
  std::string s = buf;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%s %.1f %%", i ? ", " : "", tensors[i].name.c_str(),
                  tensors[i].total ? 100.0 * static_cast<double>(tensors[i].pruned) / static_cast<double>(tensors[i].total)
                                   : 0.0);
    s += buf;
  }
  return s + ")";
}

namespace {

/// keep(i, k): whether weight k of layer i stays. Installs the masks and reports.
template <class T, class Keep>
PruneReport install(ConvNet<T>& model, Keep&& keep) {
  PruneReport r;
  std::vector<std::vector<std::uint8_t>> masks(static_cast<std::size_t>(model.size()));
  for (Index i = 0; i < model.size(); ++i) {
    const auto params = model.layer(i).params();
    if (params.empty()) continue;
    const ParamRef<T>& w = params.front();
    auto& m = masks[static_cast<std::size_t>(i)];
    m.resize(static_cast<std::size_t>(w.size));
    PruneReport::Tensor t{std::to_string(i) + ".weight", w.size, 0};
    for (Index k = 0; k < w.size; ++k) {
      m[static_cast<std::size_t>(k)] = keep(i, k) ? 1 : 0;
      t.pruned += !m[static_cast<std::size_t>(k)];
    }
    r.total += t.total;
    r.pruned += t.pruned;
    r.tensors.push_back(t);
  }
  model.set_masks(masks);
  return r;
}

}  // namespace

template <class T>
PruneReport prune_global_magnitude(ConvNet<T>& model, double sparsity) {
  if (!(sparsity >= 0 && sparsity < 1))
    detail::raise<InvalidArgument>("prune", "sparsity must be in [0, 1) (got " + std::to_string(sparsity) + ")");
  struct Entry {
    T magnitude;
    Index layer, index;
  };
  std::vector<Entry> all;
  for (Index i = 0; i < model.size(); ++i) {
    const auto params = model.layer(i).params();
    if (params.empty()) continue;
    const ParamRef<T>& w = params.front();
    for (Index k = 0; k < w.size; ++k) all.push_back({std::abs(w.value[k]), i, k});
  }
  const auto count = static_cast<std::size_t>(std::llround(sparsity * static_cast<double>(all.size())));
  auto before = [](const Entry& a, const Entry& b) {
    return a.magnitude != b.magnitude ? a.magnitude < b.magnitude
                                      : (a.layer != b.layer ? a.layer < b.layer : a.index < b.index);
  };
  if (count > 0 && count < all.size()) std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count), all.end(), before);
  std::vector<std::vector<char>> drop(static_cast<std::size_t>(model.size()));
  for (Index i = 0; i < model.size(); ++i) {
    const auto params = model.layer(i).params();
    if (!params.empty()) drop[static_cast<std::size_t>(i)].assign(static_cast<std::size_t>(params.front().size), 0);
  }
  for (std::size_t e = 0; e < count; ++e)
    drop[static_cast<std::size_t>(all[e].layer)][static_cast<std::size_t>(all[e].index)] = 1;
  return install(model, [&](Index i, Index k) {
    return !drop[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)];
  });
}

template <class T>
PruneReport masks_from_zeros(ConvNet<T>& model) {
  std::vector<const T*> values(static_cast<std::size_t>(model.size()), nullptr);
  for (Index i = 0; i < model.size(); ++i) {
    const auto params = model.layer(i).params();
    if (!params.empty()) values[static_cast<std::size_t>(i)] = params.front().value;
  }
  return install(model, [&](Index i, Index k) { return values[static_cast<std::size_t>(i)][k] != T(0); });
}

template <class T>
std::optional<PruneReport> restore_masks(ConvNet<T>& model, const TensorFile& checkpoint) {
  const std::string value = checkpoint.metadata_or(kSparsityKey, "0");
  double sparsity = 0;
  try {
    std::size_t used = 0;
    sparsity = std::stod(value, &used);
    if (used != value.size()) throw std::invalid_argument(value);
  } catch (const std::exception&) {
    detail::raise<FormatError>("prune", checkpoint.source + ": metadata " + kSparsityKey + " = '" + value +
                                            "' is not a number");
  }
  if (!(sparsity > 0)) return std::nullopt;
  return masks_from_zeros(model);
}

template PruneReport prune_global_magnitude(ConvNet<float>&, double);
template PruneReport prune_global_magnitude(ConvNet<double>&, double);
template PruneReport masks_from_zeros(ConvNet<float>&);
template PruneReport masks_from_zeros(ConvNet<double>&);
template std::optional<PruneReport> restore_masks(ConvNet<float>&, const TensorFile&);
template std::optional<PruneReport> restore_masks(ConvNet<double>&, const TensorFile&);

}  // namespace bppsa
