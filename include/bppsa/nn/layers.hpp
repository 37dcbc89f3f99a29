// Feed-forward layers of convolutional networks (PyTorch semantics) whose transposed
// Jacobians are generated directly in compact form (docs/method.md §3–§4):
//
//   layer      J^T kind                     shared by the batch   values
//   Conv2d     csr (window_pattern.hpp)     yes                   the weights, gathered
//   MaxPool2d  csr, explicit zeros          no                    1 at each window's argmax
//   AvgPool2d  csr                          yes                   1 / (kh·kw)
//   ReLU       diagonal                     no                    1[x > 0]
//   Tanh       diagonal                     no                    1 − y²
//   Linear     dense W^T, or csr if pruned  yes                   the weights
//   Flatten    none (the identity: it changes no value and no order)
//
// Activations of a batch are d × B matrices, one column per sample, elements in (C, H, W)
// row-major order — the layout of the scan's gradients g_k. The forward passes use Eigen's
// GEMM (im2col for convolutions); the `backward_input` kernels are the sequential-BP
// baseline's vector-Jacobian products, which form no Jacobian.
//
// Adding a layer: derive from Layer<T>, give it a LayerType and a SPEC token (arch.hpp),
// and construct it in make_layer (src/nn/layers.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bppsa/jacobian/jacobian.hpp"
#include "bppsa/jacobian/window_pattern.hpp"

namespace bppsa {

enum class LayerType : std::uint8_t { conv, maxpool, avgpool, relu, tanh, flatten, linear };
/// "conv", "maxpool", "avgpool", "relu", "tanh", "flatten", "linear".
const char* to_string(LayerType t);

/// What a layer is, independent of its input: the parsed form of one SPEC token.
struct LayerSpec {
  LayerType type = LayerType::relu;
  Index out = 0;      ///< conv: output channels; linear: output features
  Window2d window;    ///< conv, maxpool, avgpool
  /// The SPEC token: "conv:64:3:1:1", "maxpool:2:2", "linear:10", … (arch.hpp).
  std::string str() const;
  bool operator==(const LayerSpec&) const = default;
};

/// A parameter tensor of a layer: PyTorch's name suffix ("weight", "bias") and shape,
/// row-major values and gradient (same size).
template <class T>
struct ParamRef {
  std::string suffix;
  std::vector<Index> shape;
  T* value = nullptr;
  T* grad = nullptr;
  Index size = 0;
};

template <class T>
class Layer {
 public:
  Layer(LayerSpec spec, Shape3 in, Shape3 out) : spec_(std::move(spec)), in_(in), out_(out) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const LayerSpec& spec() const { return spec_; }
  LayerType type() const { return spec_.type; }
  const Shape3& in_shape() const { return in_; }
  const Shape3& out_shape() const { return out_; }
  /// "conv 3×32×32 → 64×32×32 (3×3 s1 p1)"
  std::string describe() const;

  /// Weight then bias (empty for layers without parameters).
  virtual std::vector<ParamRef<T>> params() { return {}; }
  /// PyTorch's default initialisation (kaiming_uniform(a=√5): U(±1/√fan_in) for weight and bias).
  virtual void reset_parameters(std::uint64_t /*seed*/) {}

  /// Pruning: a 0/1 mask over the weight (params()[0]); empty = none. Masked weights are
  /// zeroed and left out of the Jacobian's pattern (so the scan's products stay sparse);
  /// the caller keeps them zero while training (apply_mask). Layers without weights throw.
  virtual void set_mask(std::vector<std::uint8_t> mask);
  const std::vector<std::uint8_t>& mask() const { return mask_; }
  /// Zeroes masked weights and their gradients.
  void apply_mask();

  /// y = f(x) for a batch: x is in_size × B, y becomes out_size × B. Records what
  /// fill_jacobian, backward_input and param_grads need (they take the same x and y).
  virtual void forward(const Matrix<T>& x, Matrix<T>& y, int threads) = 0;

  /// False for layers whose Jacobian is the identity (Flatten): no scan element.
  virtual bool has_jacobian() const { return true; }
  /// A Jacobian of the right layout for a batch of `batch` (pattern built once per layer and
  /// mask, then shared), values unset.
  virtual Jacobian<T> make_jacobian(Index batch) = 0;
  /// Writes J^T's values for the last forward() into `jt` (from make_jacobian(B)).
  virtual void fill_jacobian(const Matrix<T>& x, const Matrix<T>& y, Jacobian<T>& jt, int threads) = 0;

  /// g_in = J^T g_out without forming J^T (sequential BP's kernel). g_in: in_size × B.
  virtual void backward_input(const Matrix<T>& x, const Matrix<T>& y, const Matrix<T>& g_out, Matrix<T>& g_in,
                              int threads) = 0;
  /// Parameter gradients (overwritten) from the forward input and ∂ℓ/∂y.
  virtual void param_grads(const Matrix<T>& /*x*/, const Matrix<T>& /*g_out*/, int /*threads*/) {}

 protected:
  LayerSpec spec_;
  Shape3 in_, out_;
  std::vector<std::uint8_t> mask_;
};

/// Builds the layer a spec describes for an input shape. `flat`: the input is a [B, N]
/// tensor (after flatten or linear; shape N×1×1), which conv and pooling cannot take and
/// linear needs. Throws ShapeError when it does not fit, naming `where` (e.g. "layer 5
/// (linear:10)") and the shapes, e.g. "its input is 64×4×4, not flat: add 'flatten' before it",
/// and when its input or weight would hold more than 2^31 − 1 elements (the Jacobians index
/// with 32-bit integers), before allocating anything.
template <class T>
std::unique_ptr<Layer<T>> make_layer(const LayerSpec& spec, const Shape3& in, bool flat, const std::string& where);

extern template class Layer<float>;
extern template class Layer<double>;

}  // namespace bppsa
