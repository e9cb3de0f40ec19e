// The pod backend (a per-pod Kubernetes job: Trainer v2's torch runtime, JobSet, an Indexed Job):
// every pod runs ringrun, which plans the whole world and starts its own pod's ranks as children;
// the world forms through pod 0's store, with no ssh (README, On Kubernetes).
#include "backend/backend.hpp"

#include <ringrun/kubernetes.hpp>

namespace ringrun {
namespace {

class PodBackend final : public Backend {
 public:
  std::vector<std::string> command(const Plan& plan, const LaunchOptions&, const Environment&) const override {
    return plan.command;
  }
  std::vector<ProcessSpec> processes(const Plan& plan, const Environment& env) const override {
    const std::optional<PodContract> pod = pod_contract(env);
    const std::size_t own = pod ? static_cast<std::size_t>(pod->node_rank) : 0;
    return child_processes(plan, env, [own](const RankSlot& r) { return r.host_index == own; });
  }
};

}  // namespace

std::unique_ptr<Backend> make_pod_backend() { return std::make_unique<PodBackend>(); }

}  // namespace ringrun
