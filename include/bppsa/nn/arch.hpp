// Architecture strings of Sequential CNNs (`bppsa grad --model cnn --arch SPEC`): a
// comma-separated layer list, indexed as PyTorch's nn.Sequential indexes its modules.
//
//   conv:OUT:K:S:P[:D]   nn.Conv2d(in, OUT, K, stride=S, padding=P, dilation=D)
//   maxpool:K:S[:P]      nn.MaxPool2d(K, S, P)
//   avgpool:K:S[:P]      nn.AvgPool2d(K, S, P)  (count_include_pad=True)
//   relu, tanh           nn.ReLU(), nn.Tanh()
//   flatten              nn.Flatten()
//   linear:OUT           nn.Linear(in, OUT)
//
// K, S, P and D are an integer or HxW ("3x5") for rectangular windows. Input channels and
// sizes are inferred from the input [B, C, H, W]. Named architectures:
//   vgg11      VGG-11, CIFAR-10 variant: conv 64, M, 128, M, 256, 256, M, 512, 512, M,
//              512, 512, M (3×3 convs, padding 1, each followed by ReLU; M = maxpool 2×2),
//              flatten, linear:10 — no batch normalisation (not one of bppsa's layers).
//   vgg11/N    the same with every channel width divided by N (≥ 1 each), e.g. vgg11/8
//              (8, 16, 32, 32, 64, 64, 64, 64 channels) for 2-core training.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "bppsa/nn/layers.hpp"

namespace bppsa {

/// Parses a SPEC or a named architecture. Throws InvalidArgument naming the bad token, its
/// position and the expected form, e.g. "layer 3 'conv:64:3': conv needs conv:OUT:K:S:P".
std::vector<LayerSpec> parse_arch(std::string_view spec);

/// The canonical SPEC string of a layer list (parse_arch(arch_string(l)) == l).
std::string arch_string(const std::vector<LayerSpec>& layers);

}  // namespace bppsa
