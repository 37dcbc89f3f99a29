// Subcommands of the bppsa tool: each registers its options on the app and returns the
// function that runs it (exit code).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace bppsa::cli {

using Command = std::function<int()>;

Command add_scan_check(CLI::App& app);
Command add_train(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_grad(CLI::App& app);
Command add_simulate(CLI::App& app);
Command add_jacobians(CLI::App& app);

}  // namespace bppsa::cli
