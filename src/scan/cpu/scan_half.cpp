// The CPU half of a Scanner plan: the workspace reserved once and the CPU executor.
#include "scan/scan_half.hpp"

#include "scan/cpu/executor.hpp"
#include "scan/plan.hpp"

namespace bppsa::detail {
namespace {

template <class T>
class ScanCpu final : public ScanHalf<T> {
 public:
  ScanCpu(const Schedule<T>& schedule, Index batch, int threads) : schedule_(schedule), batch_(batch) {
    workspace_.reserve(schedule, batch, threads);
  }
  void run(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out, int threads) override {
    // Operands of this run (vectors kept in the half: no allocation once warm).
    bind_operands(chain, g_last, out, operands_, dims_, threads);
    execute(schedule_, operands_, workspace_, batch_, threads);
  }
  std::size_t workspace_bytes() const override { return workspace_.bytes(); }
  Index launches() const override { return 0; }

 private:
  const Schedule<T>& schedule_;
  Index batch_;
  Workspace<T> workspace_;
  Operands<T> operands_;
  std::vector<Index> dims_;
};

}  // namespace

template <class T>
std::unique_ptr<ScanHalf<T>> make_scan_cpu(const Schedule<T>& schedule, const Chain<T>& chain, int threads,
                                           const HostMemoryCheck& check_host) {
  check_host(run_memory(schedule, chain));
  return std::make_unique<ScanCpu<T>>(schedule, chain.batch(), threads);
}
template std::unique_ptr<ScanHalf<float>> make_scan_cpu(const Schedule<float>&, const Chain<float>&, int,
                                                        const HostMemoryCheck&);
template std::unique_ptr<ScanHalf<double>> make_scan_cpu(const Schedule<double>&, const Chain<double>&, int,
                                                         const HostMemoryCheck&);

}  // namespace bppsa::detail
