// bppsa: command-line entry point. Maps every exception to a message and a non-zero exit.
#include <omp.h>

#include <cstdlib>
#include <iostream>
#include <new>

#include "bppsa/core/build_info.hpp"
#include "bppsa/core/error.hpp"
#include "commands.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bppsa — back-propagation by parallel scan (BPPSA, Wang, Bai & Pekhimenko, MLSys 2020)"};
  app.require_subcommand(1);
  const bppsa::BuildInfo build = bppsa::build_info();  // first line "bppsa <version>", then the build's facts
  app.set_version_flag("--version", "bppsa " + build.version + "\n" + bppsa::to_string(build));
  const bppsa::cli::Command scan_check = bppsa::cli::add_scan_check(app);
  const bppsa::cli::Command train = bppsa::cli::add_train(app);
  const bppsa::cli::Command eval = bppsa::cli::add_eval(app);
  const bppsa::cli::Command grad = bppsa::cli::add_grad(app);
  const bppsa::cli::Command simulate = bppsa::cli::add_simulate(app);
  const bppsa::cli::Command jacobians = bppsa::cli::add_jacobians(app);
  bppsa::cli::require_numbers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the message (or the help)
    return rc == 0 ? 0 : 2;      // invalid flags: exit 2
  }
  // --threads 0 and every default mean OpenMP's thread count, which OMP_NUM_THREADS sets: held to
  // the same bound as the flags (libgomp crashes trying to start tens of thousands of threads).
  if (omp_get_max_threads() > bppsa::cli::kMaxThreads) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    std::cerr << "bppsa: error: OMP_NUM_THREADS=" << (env ? env : "?") << " asks for " << omp_get_max_threads()
              << " threads; bppsa runs at most " << bppsa::cli::kMaxThreads
              << ": set OMP_NUM_THREADS to at most that, or unset it (every core)\n";
    return 2;
  }
  try {
    if (app.got_subcommand("scan-check")) return scan_check();
    if (app.got_subcommand("train")) return train();
    if (app.got_subcommand("eval")) return eval();
    if (app.got_subcommand("grad")) return grad();
    if (app.got_subcommand("simulate")) return simulate();
    if (app.got_subcommand("jacobians")) return jacobians();
  } catch (const bppsa::Error& e) {  // ResourceError (too big for this machine's memory) included
    std::cerr << "bppsa: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc& e) {
    // Every size a flag or a file drives is checked before allocating (bppsa/core/memory.hpp):
    // this means a check is missing.
    std::cerr << "bppsa: internal error: out of memory (" << e.what()
              << ") where no size check expected it; please report the command\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "bppsa: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
