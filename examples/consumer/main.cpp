// Uses the installed bppsa package: a 3-layer chain, gradients by Blelloch scan and by BP;
// then a few training steps of a small GRU on bitstream data and of a pruned CNN on random
// images, BPPSA against BP.
#include <bppsa/bppsa.hpp>
#include <cmath>
#include <iostream>

int main() {
  using namespace bppsa;
  const Index batch = 2;
  Chain<double> chain(batch);
  // x0 (4) → Linear → x1 (3) → tanh → x2 (3) → Linear → x3 (2); J_k^T is d_{k−1} × d_k.
  Jacobian<double>& w1 = chain.push_back(Jacobian<double>::dense(4, 3));  // W1^T, shared
  w1.dense_map(0) << 1, 0, 2, 0, 1, 0, -1, 1, 0, 0, 0, 1;
  Jacobian<double>& t = chain.push_back(Jacobian<double>::diagonal(3, batch));  // 1 − y², per sample
  for (double& v : t.values()) v = 0.5;
  Jacobian<double>& w2 = chain.push_back(Jacobian<double>::dense(3, 2));  // W2^T, shared
  w2.dense_map(0) << 1, -1, 2, 0, 0, 3;
  Matrix<double> g3(2, batch);
  g3 << 1, 0, 0, 1;
  const Gradients<double> scan = backward(chain, g3, {Algorithm::blelloch, 1, 0, true});
  const Gradients<double> bp = backward(chain, g3, {Algorithm::linear, 1, 0, true});
  const double err = (scan.g(0) - bp.g(0)).norm();
  std::cout << "consumer: g_0 =\n" << scan.g(0) << "\n|blelloch - linear| = " << err << "\n";
  if (!(err < 1e-12)) return 1;

  // Training API: the same steps with BP and with BPPSA give the same losses.
  const auto [train, test] = bitstream_split(/*steps=*/50, /*seed=*/1, /*total=*/100);
  double losses[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    SequenceClassifier<float> model({.rnn = {CellType::gru, 1, 8, 1}, .classes = 10});
    model.reset_parameters(4202);
    Optimizer<float> opt({.type = OptimizerType::adam, .lr = 1e-2});
    TrainConfig tc{.batch = 16};
    tc.backward.method = run == 0 ? BackwardMethod::bp : BackwardMethod::blelloch;
    losses[run] = train_epoch(model, opt, train, 1, tc).train_loss;
    std::cout << "consumer: GRU epoch with " << to_string(tc.backward.method) << ": loss " << losses[run]
              << ", test accuracy " << evaluate(model, test).accuracy << "\n";
  }
  if (!(std::abs(losses[0] - losses[1]) <= 1e-4 * std::abs(losses[0]))) return 1;

  // A pruned CNN: sparse Jacobians, fixed masks, the same loop.
  ImageDataset images;
  images.channels = 1, images.height = images.width = 8, images.classes = 3, images.name = "random";
  for (Index i = 0; i < 48; ++i) {
    images.y.push_back(i % 3);
    for (Index k = 0; k < 64; ++k) images.x.push_back(static_cast<float>(std::sin(0.37 * i * k + i % 3)));
  }
  double cnn_losses[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    ConvNet<float> net({.input = {1, 8, 8}, .layers = parse_arch("conv:4:3:1:1,relu,maxpool:2:2,flatten,linear:3")});
    net.reset_parameters(7);
    prune_global_magnitude(net, 0.5);
    Optimizer<float> opt({.type = OptimizerType::adam, .lr = 1e-2});
    TrainConfig tc{.batch = 16};
    tc.backward.method = run == 0 ? BackwardMethod::bp : BackwardMethod::blelloch;
    cnn_losses[run] = train_epoch(net, opt, images, 1, tc).train_loss;
    const ScanReport report = scan_report(net.chain(16), scan_options(tc.backward));
    std::cout << "consumer: pruned CNN epoch with " << to_string(tc.backward.method) << ": loss " << cnn_losses[run]
              << "; its scan: " << report.products.size() << " products, " << report.total_flops << " flops\n";
  }
  return std::abs(cnn_losses[0] - cnn_losses[1]) <= 1e-4 * std::abs(cnn_losses[0]) ? 0 : 1;
}
