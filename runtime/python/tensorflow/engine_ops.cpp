// The engine's ops and the chains built on them (engine_ops.hpp). A chain's later steps are
// submitted from the completion of its first, on the engine's thread (ringrun.h allows it); their
// state lives in a shared_ptr the completions hold.
#include "engine_ops.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <utility>

namespace ringrun::tensorflow {

namespace {

std::size_t element_size(ringrun_dtype dtype) {
  switch (dtype) {
    case RINGRUN_FLOAT64:
    case RINGRUN_INT64: return 8;
    case RINGRUN_FLOAT32:
    case RINGRUN_INT32: return 4;
    case RINGRUN_FLOAT16:
    case RINGRUN_BFLOAT16:
    case RINGRUN_INT16: return 2;
    case RINGRUN_UINT8:
    case RINGRUN_INT8:
    case RINGRUN_BOOL: return 1;
  }
  return 1;
}

void call_completion(void* arg, int status, const char* message) {
  std::unique_ptr<Completion> done(static_cast<Completion*>(arg));
  (*done)(status, message ? message : "");
}

// What ranks exchange before moving rows: the framework dtype and the dimensions after the first
// (kShownDims of them, the rest folded into one number), so that a mismatch is found on every rank
// and named in one message.
constexpr std::size_t kShownDims = 6;
constexpr std::size_t kShapeWords = 3 + kShownDims;  // type, ndims, dims..., folded rest

void write_shape(const Rows& rows, std::int64_t* words) {
  words[0] = rows.type_code;
  words[1] = static_cast<std::int64_t>(rows.row_shape.size());
  std::uint64_t rest = 1469598103934665603ull;
  for (std::size_t i = 0; i < kShownDims + 1; ++i) words[2 + i] = 0;
  for (std::size_t i = 0; i < rows.row_shape.size(); ++i) {
    if (i < kShownDims) {
      words[2 + i] = rows.row_shape[i];
    } else {
      rest = (rest ^ static_cast<std::uint64_t>(rows.row_shape[i])) * 1099511628211ull;
      words[2 + kShownDims] = static_cast<std::int64_t>(rest >> 1);
    }
  }
}

std::string describe_shape(const std::int64_t* words, std::string (*type_name)(int)) {
  std::string text = (type_name ? type_name(static_cast<int>(words[0])) : "type " + std::to_string(words[0])) + " [rows";
  const auto ndims = static_cast<std::size_t>(std::max<std::int64_t>(words[1], 0));
  for (std::size_t i = 0; i < std::min(ndims, kShownDims); ++i) text += ", " + std::to_string(words[2 + i]);
  if (ndims > kShownDims) text += ", ...";
  return text + "]";
}

// "" when every rank's shape words match; else the message every rank reports.
std::string shape_mismatch(const std::string& name, const Rows& input, const std::vector<std::int64_t>& every,
                           std::size_t stride, std::size_t offset, int size) {
  auto words = [&](int r) { return every.data() + static_cast<std::size_t>(r) * stride + offset; };
  bool same = true;
  for (int r = 1; r < size; ++r) same = same && std::equal(words(r), words(r) + kShapeWords, words(0));
  if (same) return "";
  std::vector<std::pair<std::string, std::string>> groups;  // description, ranks
  for (int r = 0; r < size; ++r) {
    const std::string what = describe_shape(words(r), input.type_name);
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& p) { return p.first == what; });
    if (g == groups.end()) groups.push_back({what, std::to_string(r)});
    else g->second += "," + std::to_string(r);
  }
  std::string detail;
  for (auto& [what, ranks] : groups) detail += (detail.empty() ? "" : "; ") + ranks + ": " + what;
  return "tensor '" + name + "': ranks disagree on the dtype or the dimensions after the first: " + detail;
}

ringrun_request request_of(ringrun_collective collective) {
  ringrun_request r;
  ringrun_request_init(&r);
  r.collective = collective;
  return r;
}

// The every-rank step of a chain: gathers `words` int64 from each rank, then calls next(every).
void gather_words(const std::string& name, std::vector<std::int64_t> mine,
                  std::function<void(const std::vector<std::int64_t>& every)> next, Completion done) {
  struct State {
    std::vector<std::int64_t> mine, every;
  };
  auto state = std::make_shared<State>();
  state->mine = std::move(mine);
  state->every.resize(state->mine.size() * static_cast<std::size_t>(ringrun_size()));
  ringrun_request r = request_of(RINGRUN_COLLECTIVE_ALLGATHER);
  r.send = state->mine.data();
  r.recv = state->every.data();
  r.count = state->mine.size();
  r.dtype = RINGRUN_INT64;
  submit(r, name, [state, next = std::move(next), done](int status, const std::string& message) {
    if (status != RINGRUN_OK) return done(status, message);
    next(state->every);
  });
}

// Rows padded to `padded` per rank, gathered into `scratch`, then handed to unpack(scratch).
struct PaddedGather {
  std::unique_ptr<std::byte[]> send_copy, scratch;
};

void gather_padded(const std::string& name, const Rows& input, std::int64_t rows, std::int64_t padded,
                   std::function<void(const std::byte* scratch)> unpack, Completion done) {
  auto state = std::make_shared<PaddedGather>();
  const std::size_t row_bytes = input.row_bytes();
  const void* send = input.data;
  if (rows != padded) {
    state->send_copy.reset(new std::byte[static_cast<std::size_t>(padded) * row_bytes]);
    if (rows > 0) std::memcpy(state->send_copy.get(), input.data, static_cast<std::size_t>(rows) * row_bytes);
    send = state->send_copy.get();
  }
  state->scratch.reset(new std::byte[static_cast<std::size_t>(padded) * row_bytes * static_cast<std::size_t>(ringrun_size())]);
  ringrun_request r = request_of(RINGRUN_COLLECTIVE_ALLGATHER);
  r.send = send;
  r.recv = state->scratch.get();
  r.count = static_cast<std::size_t>(padded) * input.row_elements();
  r.dtype = input.dtype;
  submit(r, name, [state, unpack = std::move(unpack), done](int status, const std::string& message) {
    if (status == RINGRUN_OK) unpack(state->scratch.get());
    done(status, message);
  });
}

}  // namespace

std::size_t Rows::row_elements() const {
  std::size_t n = 1;
  for (auto d : row_shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::size_t Rows::row_bytes() const { return row_elements() * element_size(dtype); }

void submit(const ringrun_request& request, const std::string& name, Completion done) {
  // Owned by the callback from here on: the op may complete before ringrun_submit returns.
  auto* owned = new Completion(std::move(done));
  ringrun_request r = request;
  r.name = name.c_str();  // copied by the engine
  r.on_done = call_completion;
  r.on_done_arg = owned;
  const int code = ringrun_submit(&r, nullptr);
  if (code < 0) {
    std::unique_ptr<Completion> refused(owned);  // the engine never calls back for a refused op
    (*refused)(code, ringrun_last_error());
  }
}

Completion countdown(std::size_t parts, Completion done) {
  struct State {
    std::atomic<std::size_t> left;
    std::mutex mutex;
    int status = RINGRUN_OK;
    std::string message;
    Completion done;
  };
  auto state = std::make_shared<State>();
  state->left.store(parts);
  state->done = std::move(done);
  return [state](int status, const std::string& message) {
    if (status != RINGRUN_OK) {
      std::lock_guard lock(state->mutex);
      if (state->status == RINGRUN_OK) {
        state->status = status;
        state->message = message;
      }
    }
    if (state->left.fetch_sub(1) != 1) return;
    std::lock_guard lock(state->mutex);
    state->done(state->status, state->message);
  };
}

void allgather_rows(const std::string& name, const Rows& input, AllocateRows allocate, Completion done) {
  // Waits for the engine's allgather of varying first dimensions: for now the row counts first,
  // then the rows padded to the largest count.
  std::vector<std::int64_t> mine(1 + kShapeWords);
  mine[0] = input.rows;
  write_shape(input, mine.data() + 1);
  auto next = [name, input, allocate = std::move(allocate), done](const std::vector<std::int64_t>& every) {
    const int size = ringrun_size();
    const std::size_t stride = 1 + kShapeWords;
    if (std::string mismatch = shape_mismatch(name, input, every, stride, 1, size); !mismatch.empty())
      return done(RINGRUN_ERR_MISMATCH, mismatch);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) rows[static_cast<std::size_t>(r)] = every[static_cast<std::size_t>(r) * stride];
    std::string error;
    std::byte* out = allocate(rows, error);
    if (!error.empty()) return done(RINGRUN_ERR_INTERNAL, error);
    const std::int64_t padded = *std::max_element(rows.begin(), rows.end());
    const std::size_t row_bytes = input.row_bytes();
    if (padded == 0 || row_bytes == 0) return done(RINGRUN_OK, "");
    if (std::all_of(rows.begin(), rows.end(), [&](auto n) { return n == padded; })) {
      ringrun_request r = request_of(RINGRUN_COLLECTIVE_ALLGATHER);
      r.send = input.data;
      r.recv = out;
      r.count = static_cast<std::size_t>(padded) * input.row_elements();
      r.dtype = input.dtype;
      return submit(r, name + ".data", done);
    }
    auto unpack = [rows, padded, row_bytes, out](const std::byte* scratch) {
      std::byte* at = out;
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const std::size_t bytes = static_cast<std::size_t>(rows[r]) * row_bytes;
        if (bytes) std::memcpy(at, scratch + r * static_cast<std::size_t>(padded) * row_bytes, bytes);
        at += bytes;
      }
    };
    gather_padded(name + ".data", input, input.rows, padded, std::move(unpack), done);
  };
  gather_words(name + ".rows", std::move(mine), std::move(next), std::move(done));
}

void alltoall_rows(const std::string& name, const Rows& input, std::vector<std::int64_t> splits,
                   AllocateRows allocate, Completion done) {
  // Waits for the engine's alltoall: every rank gathers every rank's splits, then every rank's
  // rows (padded), and keeps what was meant for it.
  const int size = ringrun_size();
  std::vector<std::int64_t> mine(kShapeWords + splits.size());
  write_shape(input, mine.data());
  std::copy(splits.begin(), splits.end(), mine.begin() + static_cast<std::ptrdiff_t>(kShapeWords));
  auto next = [name, input, size, allocate = std::move(allocate), done](const std::vector<std::int64_t>& every) {
    const std::size_t stride = kShapeWords + static_cast<std::size_t>(size);
    if (std::string mismatch = shape_mismatch(name, input, every, stride, 0, size); !mismatch.empty())
      return done(RINGRUN_ERR_MISMATCH, mismatch);
    const auto me = static_cast<std::size_t>(ringrun_rank());
    auto split = [&](std::size_t from, std::size_t to) { return every[from * stride + kShapeWords + to]; };
    std::vector<std::int64_t> received(static_cast<std::size_t>(size)), offsets(received.size()), sent(received.size());
    for (std::size_t r = 0; r < received.size(); ++r) {
      received[r] = split(r, me);
      for (std::size_t to = 0; to < received.size(); ++to) {
        if (to < me) offsets[r] += split(r, to);
        sent[r] += split(r, to);
      }
    }
    std::string error;
    std::byte* out = allocate(received, error);
    if (!error.empty()) return done(RINGRUN_ERR_INTERNAL, error);
    const std::int64_t padded = *std::max_element(sent.begin(), sent.end());
    const std::size_t row_bytes = input.row_bytes();
    if (padded == 0 || row_bytes == 0) return done(RINGRUN_OK, "");
    auto unpack = [received, offsets, padded, row_bytes, out](const std::byte* scratch) {
      std::byte* at = out;
      for (std::size_t r = 0; r < received.size(); ++r) {
        const std::size_t bytes = static_cast<std::size_t>(received[r]) * row_bytes;
        const std::size_t from = (r * static_cast<std::size_t>(padded) + static_cast<std::size_t>(offsets[r])) * row_bytes;
        if (bytes) std::memcpy(at, scratch + from, bytes);
        at += bytes;
      }
    };
    gather_padded(name + ".data", input, sent[me], padded, std::move(unpack), done);
  };
  gather_words(name + ".splits", std::move(mine), std::move(next), std::move(done));
}

void reducescatter_rows(const std::string& name, void* whole, const Rows& shape, ringrun_op op,
                        std::int64_t first_row, std::int64_t rows, void* share, Completion done) {
  // Waits for the engine's reducescatter: the whole tensor is reduced on every rank.
  const std::size_t row_bytes = shape.row_bytes();
  ringrun_request r = request_of(RINGRUN_COLLECTIVE_ALLREDUCE);
  r.send = whole;
  r.recv = whole;
  r.count = static_cast<std::size_t>(shape.rows) * shape.row_elements();
  r.dtype = shape.dtype;
  r.op = op;
  submit(r, name, [=, done = std::move(done)](int status, const std::string& message) {
    if (status == RINGRUN_OK && rows > 0 && row_bytes > 0)
      std::memcpy(share, static_cast<const std::byte*>(whole) + static_cast<std::size_t>(first_row) * row_bytes,
                  static_cast<std::size_t>(rows) * row_bytes);
    done(status, message);
  });
}

std::pair<std::int64_t, std::int64_t> reducescatter_share(std::int64_t total, int rank, int size) {
  const std::int64_t base = total / size, extra = total % size;
  return {rank * base + std::min<std::int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

}  // namespace ringrun::tensorflow
