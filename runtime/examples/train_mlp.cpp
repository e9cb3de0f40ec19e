// Data-parallel training of a small MLP (8 -> 16 tanh -> 1, mean squared error) on deterministic
// synthetic data, averaging gradients with ringrun_allreduce.
//
//   ringrun -np 4 build/bin/ringrun-example-train      # or just build/bin/ringrun-example-train
//
// Every step takes one fixed global batch; rank r computes the gradient sum over its contiguous
// share of that batch, the ranks sum the gradients (float64, RINGRUN_SUM) and divide by the global
// batch size. Gradients and losses are float64, so the only difference between 1 and N ranks is the
// order of a few float64 additions: final loss and weights agree to far better than 1e-5.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ringrun/ringrun.h"

namespace {

constexpr int kInputs = 8, kHidden = 16;
constexpr int kSamples = 2048, kGlobalBatch = 256, kEpochs = 15;
constexpr double kLearningRate = 0.05;

// Parameters in one flat vector so one allreduce carries the whole gradient.
struct Layout {
  static constexpr int w1 = 0;                        // kHidden x kInputs
  static constexpr int b1 = w1 + kHidden * kInputs;   // kHidden
  static constexpr int w2 = b1 + kHidden;             // kHidden
  static constexpr int b2 = w2 + kHidden;             // 1
  static constexpr int size = b2 + 1;
};

// A fixed linear congruential generator: the same data on every rank and every run.
struct Lcg {
  std::uint64_t state;
  double next() {  // uniform in [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0;
  }
};

struct Dataset {
  std::vector<double> x, y;
};

Dataset make_data() {
  Dataset d;
  Lcg rng{42};
  for (int i = 0; i < kSamples; ++i) {
    double t = 0;
    for (int j = 0; j < kInputs; ++j) {
      double v = rng.next();
      d.x.push_back(v);
      t += v * (j % 2 ? 0.7 : -0.4);
    }
    d.y.push_back(std::sin(2.0 * t) + 0.1 * rng.next());
  }
  return d;
}

// Adds the gradient of the squared error over samples [begin, end) to grad; returns the loss sum.
double accumulate_gradient(const std::vector<double>& p, const Dataset& d, int begin, int end,
                           std::vector<double>& grad) {
  double loss = 0;
  double hidden[kHidden];
  for (int s = begin; s < end; ++s) {
    const double* x = &d.x[static_cast<std::size_t>(s) * kInputs];
    double out = p[Layout::b2];
    for (int h = 0; h < kHidden; ++h) {
      double a = p[Layout::b1 + h];
      for (int j = 0; j < kInputs; ++j) a += p[Layout::w1 + h * kInputs + j] * x[j];
      hidden[h] = std::tanh(a);
      out += p[Layout::w2 + h] * hidden[h];
    }
    double error = out - d.y[s];
    loss += error * error;
    double d_out = 2 * error;
    grad[Layout::b2] += d_out;
    for (int h = 0; h < kHidden; ++h) {
      grad[Layout::w2 + h] += d_out * hidden[h];
      double d_a = d_out * p[Layout::w2 + h] * (1 - hidden[h] * hidden[h]);
      grad[Layout::b1 + h] += d_a;
      for (int j = 0; j < kInputs; ++j) grad[Layout::w1 + h * kInputs + j] += d_a * x[j];
    }
  }
  return loss;
}

void check(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "ringrun-example-train: %s failed: %s\n", what, ringrun_last_error());
    std::exit(1);
  }
}

}  // namespace

int main() {
  check(ringrun_init(), "ringrun_init");
  const int rank = ringrun_rank(), size = ringrun_size();
  const Dataset data = make_data();

  std::vector<double> params(Layout::size);
  Lcg init{7};
  for (auto& w : params) w = 0.3 * init.next();
  // Every rank already has the same initial weights; broadcasting them is what a real program
  // with random initialisation would do.
  check(ringrun_broadcast(params.data(), params.size(), RINGRUN_FLOAT64, 0), "broadcast");

  std::vector<double> grad(Layout::size + 1);  // the last slot carries the loss sum
  for (int epoch = 1; epoch <= kEpochs; ++epoch) {
    double epoch_loss = 0;
    for (int batch = 0; batch < kSamples / kGlobalBatch; ++batch) {
      // This rank's contiguous share of the global batch (the first ranks take one more sample
      // when the batch does not divide evenly).
      int base = kGlobalBatch / size, extra = kGlobalBatch % size;
      int begin = batch * kGlobalBatch + rank * base + (rank < extra ? rank : extra);
      int end = begin + base + (rank < extra ? 1 : 0);
      std::fill(grad.begin(), grad.end(), 0.0);
      grad[Layout::size] = accumulate_gradient(params, data, begin, end, grad);
      check(ringrun_allreduce(grad.data(), grad.data(), grad.size(), RINGRUN_FLOAT64, RINGRUN_SUM), "allreduce");
      for (int i = 0; i < Layout::size; ++i) params[i] -= kLearningRate * grad[i] / kGlobalBatch;
      epoch_loss += grad[Layout::size];
    }
    if (rank == 0) std::printf("epoch %2d loss %.9f\n", epoch, epoch_loss / kSamples);
  }
  double checksum = 0;
  for (int i = 0; i < Layout::size; ++i) checksum += params[i] * (1.0 + 0.001 * i);
  if (rank == 0) std::printf("final ranks %d weights checksum %.9f\n", size, checksum);
  check(ringrun_finalize(), "ringrun_finalize");
  return 0;
}
