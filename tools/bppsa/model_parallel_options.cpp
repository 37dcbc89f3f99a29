// The model-parallel flags: the same with or without MPI, so scripts see one CLI.
#include "model_parallel.hpp"

namespace bppsa::cli {

void add_model_parallel_options(CLI::App& app, MpArgs& a) {
  CLI::Option* mp = app.add_flag("--model-parallel", a.enabled,
                                 "run as one rank of an MPI job (mpirun -np K bppsa …): the model split into "
                                 "pipeline stages");
  // Each option below means something to a model-parallel run only: without --model-parallel it
  // is a usage error (exit 2), not silently ignored.
  const auto needs_mp = [&](CLI::Option* opt) { opt->needs(mp); };
  needs_mp(app.add_option("--stages", a.stages, "pipeline stages (default: ranks / replicas)")
               ->check(CLI::Range(1, 4096)));
  needs_mp(app.add_option("--replicas", a.replicas,
                          "data-parallel replicas of the pipeline (ranks = stages × replicas)")
               ->check(CLI::Range(1, 4096))
               ->capture_default_str());
  needs_mp(app.add_option("--micro-batches", a.micro_batches, "micro-batches per replica and step (fill the pipeline)")
               ->check(CLI::Range(1, 4096))
               ->capture_default_str());
  needs_mp(app.add_option("--mp-backward", a.backward,
                          "bp: the gradient hops stage to stage (K−1 hops); bppsa: scan of the stages' Jacobian "
                          "products across ranks (log-depth)")
               ->check(CLI::IsMember({"bp", "bppsa"}))
               ->capture_default_str());
  needs_mp(app.add_option("--mp-scan", a.scan, "bppsa's scan across ranks: doubling (⌈log2 K⌉ rounds) or blelloch")
               ->check(CLI::IsMember({"doubling", "blelloch"}))
               ->capture_default_str());
  needs_mp(app.add_option("--mp-timeout", a.timeout,
                          "seconds any rank waits for a peer before ending the job with an error (at least 0.1)")
               ->check(at_least(0.1, "shorter waits end jobs whose peers are merely busy"))
               ->capture_default_str());
}

}  // namespace bppsa::cli
