// sbatch templates: templates/*.sbatch are render_template() of the defaults; placeholders are
// all filled; bad parameters are errors.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "ringrun/slurm.hpp"

using namespace ringrun;

namespace {
std::string read_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
std::string error_of(std::string_view name, const TemplateParams& p) {
  try {
    render_template(name, p);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("templates/*.sbatch equal render_template() of the defaults") {
  const auto names = template_names();
  CHECK(names == std::vector<std::string>{"single-node", "multi-node-srun", "multi-node-mpirun", "preemptible", "elastic"});
  for (const auto& name : names) {
    CAPTURE(name);
    const auto file = std::string(RINGRUN_SOURCE_DIR) + "/templates/" + name + ".sbatch";
    CHECK(read_file(file) == render_template(name, {}));
  }
}

TEST_CASE("placeholders are filled") {
  TemplateParams p;
  p.nodes = 3;
  p.gpus_per_node = 8;
  p.time = "2-00:00:00";
  p.program = {"python", "train.py", "--lr", "0.1", "it's here", "$HOME"};
  for (const std::string name : {"multi-node-srun", "multi-node-mpirun", "preemptible", "elastic"}) {
    CAPTURE(name);
    const auto text = render_template(name, p);
    CHECK(text.find('@') == text.find("@90"));  // the only '@' left is --signal=B:USR1@90 (or none)
    CHECK(text.find("#SBATCH --nodes=3\n") != std::string::npos);
    CHECK(text.find("#SBATCH --ntasks-per-node=8\n") != std::string::npos);
    CHECK(text.find("#SBATCH --gpus-per-node=8\n") != std::string::npos);
    CHECK(text.find("#SBATCH --time=2-00:00:00\n") != std::string::npos);
    CHECK(text.find("-- python train.py --lr 0.1 'it'\\''s here' '$HOME'") != std::string::npos);
  }
  const auto pre = render_template("preemptible", p);
  CHECK(pre.find("#SBATCH --signal=B:USR1@90\n") != std::string::npos);
  CHECK(pre.find("scontrol requeue \"$SLURM_JOB_ID\"") != std::string::npos);
  CHECK(pre.find("trap checkpoint_and_requeue USR1") != std::string::npos);
  const auto elastic = render_template("elastic", p);
  CHECK(elastic.find("#SBATCH --no-kill\n") != std::string::npos);
  CHECK(elastic.find("#SBATCH --no-requeue\n") != std::string::npos);
  CHECK(elastic.find("exec ringrun --min-np 16 -- python") != std::string::npos);  // 2 of 3 nodes x 8
  TemplateParams cpu;
  cpu.gpus_per_node = 0;
  const auto text = render_template("single-node", cpu);
  CHECK(text.find("--gpus-per-node=") == std::string::npos);
  CHECK(text.find("#SBATCH --ntasks-per-node=1\n") != std::string::npos);
}

TEST_CASE("bad names and parameters") {
  CHECK(error_of("multi-node", {}) ==
        "template 'multi-node' : unknown; known templates: single-node, multi-node-srun, multi-node-mpirun, preemptible, elastic");
  TemplateParams p;
  p.nodes = 2;
  CHECK(error_of("single-node", p) ==
        "template single-node --nodes 2 : this template is for 1 node(s); use multi-node-srun for more");
  p.nodes = 0;
  CHECK(error_of("multi-node-srun", p) == "template multi-node-srun --nodes 0 : needs at least 1");
  p = {};
  p.gpus_per_node = -1;
  CHECK(error_of("multi-node-srun", p) == "template multi-node-srun --gpus-per-node -1 : must be 0 or more");
  p = {};
  p.time = "1 hour";
  CHECK(error_of("preemptible", p) ==
        "template preemptible --time '1 hour' : expected a Slurm time like 01:00:00 or 2-00:00:00");
  p = {};
  p.program = {};
  CHECK(error_of("preemptible", p) == "template preemptible : no program; give one after --, e.g. -- python train.py");
}
