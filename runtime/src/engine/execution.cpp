// Execution and fusion grouping (engine.hpp, "Execution"): given the cycle's ready list (the
// same on every rank, in creation order), which ops fail as mismatches, which complete from the
// records' inline data, which allreduces run together and in which buffer (in place as spans, or
// through the fusion buffer), and the rest one by one.
//
// Owns: the fusion buffer, spans_, the timeline's execution spans. Touches: the communicator
// (the only file that runs collectives on the user's tensors), the table (finish_ok, fail_entry),
// the inline sources of this cycle's records.
#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "engine/engine.hpp"
#include "engine/timeline.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {

using core::Collective;

namespace {

// Horovod's phase names: NEGOTIATE_ALLREDUCE, NEGOTIATE_BROADCAST, ..., made once from the list.
const char* negotiate_phase(Collective kind) {
  static const auto names = [] {
    std::array<std::string, core::kMaxCollective + 1> table;
    for (const core::CollectiveRow& row : core::kCollectives)
      table[static_cast<std::size_t>(row.kind)] = std::string("NEGOTIATE_") + row.upper;
    return table;
  }();
  return names[static_cast<std::size_t>(kind)].c_str();
}

}  // namespace

void Engine::execute(std::vector<Entry*>& ready) {
  // Clock reads cost about as much as a small op's bookkeeping here: only the timeline needs them.
  const auto now = timeline_ ? Clock::now() : Clock::time_point{};
  if (joined_count_ > 0) stand_in_for_joined(ready);
  fail_mismatched(ready, now);
  complete_inline(ready);

  // Allreduces grouped by (dtype, op) in order of first appearance, then packed up to the
  // fusion threshold; everything else one by one after them. The same on every rank.
  std::vector<std::vector<Entry*>> groups;
  std::vector<Entry*> others;
  for (Entry* entry : ready) {
    // Device buffers go to NCCL one by one: the fusion buffer is host memory and is filled with
    // memcpy. Programs keep a tensor on the same kind of memory on every rank, so every rank
    // still forms the same groups.
    // A large tensor also runs alone, on its own buffers: copying it into the fusion buffer and
    // back costs two passes over it, far more than the one synchronisation fusion would save.
    const LocalOp& op = *entry->local;
    if (!core::elementwise_op(op.request.op)) {  // Adasum runs alone: its sums are per tensor (ringrun(3))
      others.push_back(entry);
      continue;
    }
    const std::size_t bytes = op.request.count * core::dtype_size(op.request.dtype);
    const bool compress = config_.fp16_compression && op.request.dtype == RINGRUN_FLOAT32;
    if (op.request.kind != Collective::allreduce || op.device || (bytes >= config_.unfused_min_bytes && !compress)) {
      others.push_back(entry);
      continue;
    }
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& group) {
      const OpRequest& head = group[0]->local->request;
      return head.dtype == op.request.dtype && head.op == op.request.op;
    });
    if (g == groups.end()) groups.push_back({entry});
    else g->push_back(entry);
  }
  for (auto& group : groups) {
    std::vector<Entry*> chunk;
    std::size_t chunk_bytes = 0;
    auto flush_chunk = [&] {
      if (chunk.empty()) return;
      execute_allreduce_group(chunk, now);
      for (Entry* entry : chunk) finish_ok(*entry);
      chunk.clear();
      chunk_bytes = 0;
    };
    for (Entry* entry : group) {
      const OpRequest& r = entry->local->request;
      std::size_t bytes = r.count * core::dtype_size(r.dtype);
      if (!chunk.empty() && chunk_bytes + bytes > config_.fusion_threshold_bytes) flush_chunk();
      chunk.push_back(entry);
      chunk_bytes += bytes;
    }
    flush_chunk();
  }
  for (Entry* entry : others) {
    execute_single(*entry, now);
    finish_ok(*entry);
  }
}

void Engine::fail_mismatched(std::vector<Entry*>& ready, Clock::time_point now) {
  for (Entry*& entry : ready) {
    const std::optional<OpShape>* submitted = shapes(*entry);
    // Ranks that joined submitted nothing (their stand-ins take the others' shape).
    const OpShape* first = entry->uniform ? nullptr : &some_shape(*entry);
    const bool same = entry->uniform ||
                      std::all_of(submitted, submitted + size_, [&](const auto& d) { return !d || d->agrees_with(*first); });
    if (timeline_) {
      const std::string& name = entry_name(*entry);
      for (int r = 0; r < size_; ++r)
        timeline_->tick(name, fmt::format("rank {} ready", r), arrivals(*entry)[r]);
      timeline_->span(name, negotiate_phase(entry->uniform ? cache_.shape(static_cast<std::size_t>(entry->bit)).kind
                                                           : some_shape(*entry).kind),
                      entry->first_seen, now);
    }
    if (!same || !entry->local) {
      // Group the ranks by what they submitted: every rank gets the same message.
      const std::string name = entry_name(*entry);
      std::vector<std::pair<std::string, std::vector<int>>> groups;
      for (int r = 0; r < size_; ++r) {
        std::string what = submitted[r] ? submitted[r]->describe() : std::string("joined");
        auto g = std::find_if(groups.begin(), groups.end(), [&](auto& p) { return p.first == what; });
        if (g == groups.end()) groups.push_back({what, {r}});
        else g->second.push_back(r);
      }
      std::string detail;
      for (auto& [what, ranks] : groups) detail += (detail.empty() ? "" : "; ") + core::name_ranks(ranks) + ": " + what;
      fail_entry(*entry, RINGRUN_ERR_MISMATCH, fmt::format("tensor '{}': ranks disagree: {}", name, detail));
      entry = nullptr;
    }
  }
  std::erase(ready, nullptr);
}

void Engine::complete_inline(std::vector<Entry*>& ready) {
  // Small allreduces every rank sent inline: reduced from the records.
  for (Entry*& entry : ready) {
    if (entry->bit < 0 || inline_ranks_[static_cast<std::size_t>(entry->bit)] != size_) continue;
    const OpRequest& r = entry->local->request;
    if (r.kind != Collective::allreduce) continue;
    const std::byte* const* sources = inline_sources_.data() + static_cast<std::size_t>(entry->bit) * static_cast<std::size_t>(size_);
    const auto start = timeline_ ? Clock::now() : Clock::time_point{};
    // Rank order, as the transports do: every rank computes the same bits.
    if (size_ == 1) {
      std::memcpy(r.recv, sources[0], r.count * core::dtype_size(r.dtype));
    } else {
      core::reduce(r.recv, sources[0], sources[1], r.count, r.dtype, r.op);
      for (int p = 2; p < size_; ++p) core::reduce(r.recv, r.recv, sources[p], r.count, r.dtype, r.op);
    }
    if (r.op == RINGRUN_AVERAGE) core::finish_average(r.recv, r.count, r.dtype, size_);
    if (timeline_) timeline_->span(r.name, "ALLREDUCE", start, Clock::now());
    counters_.add(counters_.inline_allreduces, 1);
    finish_ok(*entry);
    entry = nullptr;
  }
  std::erase(ready, nullptr);
}

void Engine::execute_allreduce_group(const std::vector<Entry*>& group, Clock::time_point ready_at) {
  const OpRequest& first = group[0]->local->request;
  const bool compress = config_.fp16_compression && first.dtype == RINGRUN_FLOAT32;
  if (group.size() == 1 && !compress) {
    const auto start = Clock::now();
    comm_.allreduce(first.send, first.recv, first.count, first.dtype, first.op);
    if (timeline_) {
      timeline_->span(first.name, "QUEUE", ready_at, start);
      timeline_->span(first.name, "ALLREDUCE", start, Clock::now());
    }
    return;
  }
  if (!compress && allreduce_in_place(group, ready_at)) return;
  allreduce_through_fusion_buffer(group, compress, ready_at);
}

bool Engine::allreduce_in_place(const std::vector<Entry*>& group, Clock::time_point ready_at) {
  // Tensors adjacent in memory, in both send and recv, are one span: gradients that are views
  // of one flat buffer (as several frameworks allocate them) make a plain allreduce, with no
  // per-tensor work in the transport. Ranks may merge differently: the element order, and so
  // the collective, is the same.
  const OpRequest& first = group[0]->local->request;
  spans_.clear();
  const std::size_t esize = core::dtype_size(first.dtype);
  for (Entry* entry : group) {
    const OpRequest& r = entry->local->request;
    const std::size_t bytes = r.count * esize;
    if (bytes == 0) continue;
    if (!spans_.empty()) {
      core::BufferSpan& last = spans_.back();
      if (static_cast<const std::byte*>(last.send) + last.bytes == r.send &&
          static_cast<std::byte*>(last.recv) + last.bytes == r.recv) {
        last.bytes += bytes;
        continue;
      }
    }
    spans_.push_back({r.send, r.recv, bytes});
  }
  if (spans_.size() > 1 && !comm_.can_allreduce_scattered()) return false;
  const auto start = timeline_ ? Clock::now() : Clock::time_point{};
  // The transport reads every tensor in place and writes every result in place: no copies
  // into a fusion buffer and back, which cost as much as the allreduce itself.
  if (spans_.empty()) comm_.allreduce(nullptr, nullptr, 0, first.dtype, first.op);  // empty tensors only
  else if (spans_.size() == 1) comm_.allreduce(spans_[0].send, spans_[0].recv, spans_[0].bytes / esize, first.dtype, first.op);
  else comm_.allreduce_scattered(spans_, first.dtype, first.op);
  counters_.add(counters_.fused_allreduces, 1);
  counters_.add(counters_.fused_tensors, group.size());
  if (timeline_) {
    const auto end = Clock::now();
    for (Entry* entry : group) {
      timeline_->span(entry->local->request.name, "QUEUE", ready_at, start);
      timeline_->span(entry->local->request.name, "ALLREDUCE", start, end);
    }
  }
  return true;
}

void Engine::allreduce_through_fusion_buffer(const std::vector<Entry*>& group, bool compress, Clock::time_point ready_at) {
  const OpRequest& first = group[0]->local->request;
  const ringrun_dtype wire = compress ? RINGRUN_FLOAT16 : first.dtype;
  const std::size_t wire_element = core::dtype_size(wire);
  std::size_t total = 0;
  for (Entry* entry : group) total += entry->local->request.count;
  if (fusion_buffer_.size() < total * wire_element) fusion_buffer_.resize(total * wire_element);
  std::byte* buffer = fusion_buffer_.data();

  const auto copy_in_start = Clock::now();
  std::size_t offset = 0;
  for (Entry* entry : group) {
    const OpRequest& r = entry->local->request;
    if (compress) {
      auto src = static_cast<const float*>(r.send);
      auto dst = reinterpret_cast<std::uint16_t*>(buffer) + offset;
      for (std::size_t i = 0; i < r.count; ++i) dst[i] = core::float_to_half(src[i]);
    } else if (r.count) {
      std::memcpy(buffer + offset * wire_element, r.send, r.count * wire_element);
    }
    offset += r.count;
  }
  const auto reduce_start = Clock::now();
  comm_.allreduce(buffer, buffer, total, wire, first.op);
  counters_.add(counters_.fused_allreduces, 1);
  counters_.add(counters_.fused_tensors, group.size());
  const auto copy_out_start = Clock::now();
  offset = 0;
  for (Entry* entry : group) {
    const OpRequest& r = entry->local->request;
    if (compress) {
      auto src = reinterpret_cast<const std::uint16_t*>(buffer) + offset;
      auto dst = static_cast<float*>(r.recv);
      for (std::size_t i = 0; i < r.count; ++i) dst[i] = core::half_to_float(src[i]);
    } else if (r.count) {
      std::memcpy(r.recv, buffer + offset * wire_element, r.count * wire_element);
    }
    offset += r.count;
  }
  if (timeline_) {
    const auto end = Clock::now();
    for (Entry* entry : group) {
      const std::string& name = entry->local->request.name;
      timeline_->span(name, "QUEUE", ready_at, copy_in_start);
      timeline_->span(name, "MEMCPY_IN_FUSION_BUFFER", copy_in_start, reduce_start);
      timeline_->span(name, "ALLREDUCE", reduce_start, copy_out_start);
      timeline_->span(name, "MEMCPY_OUT_FUSION_BUFFER", copy_out_start, end);
    }
  }
}

void Engine::allgather_varying(Entry& entry) {
  // Every rank's count is in the table (varying ops are never cached). Equal counts take the
  // plain allgather into the output; different ones an allgather padded to the largest, packed
  // into the output after it: one collective, which every transport has.
  const OpRequest& r = entry.local->request;
  const std::optional<OpShape>* submitted = shapes(entry);
  std::vector<std::size_t> counts(static_cast<std::size_t>(size_));
  std::size_t total = 0, largest = 0;
  for (int p = 0; p < size_; ++p) {
    counts[static_cast<std::size_t>(p)] = submitted[p]->count;
    total += submitted[p]->count;
    largest = std::max<std::size_t>(largest, submitted[p]->count);
  }
  auto* recv = static_cast<std::byte*>(r.output(total, counts));
  if (total && !recv)
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("tensor '{}': no output buffer for the allgather", r.name));
  if (std::all_of(counts.begin(), counts.end(), [&](std::size_t c) { return c == largest; }))
    return comm_.allgather(r.send, r.count, r.dtype, recv);
  const std::size_t esize = core::dtype_size(r.dtype);
  std::vector<std::byte> padded(largest * esize), gathered(largest * esize * static_cast<std::size_t>(size_));
  if (r.count) std::memcpy(padded.data(), r.send, r.count * esize);
  comm_.allgather_host(padded.data(), largest, r.dtype, gathered.data());
  for (int p = 0; p < size_; ++p) {
    const std::size_t bytes = counts[static_cast<std::size_t>(p)] * esize;
    if (bytes) std::memcpy(recv, gathered.data() + static_cast<std::size_t>(p) * largest * esize, bytes);
    recv += bytes;
  }
}

void Engine::execute_single(Entry& entry, Clock::time_point ready_at) {
  const OpRequest& r = entry.local->request;
  const auto start = Clock::now();
  switch (r.kind) {
    case Collective::allreduce: comm_.allreduce(r.send, r.recv, r.count, r.dtype, r.op); break;
    case Collective::broadcast: comm_.broadcast(r.recv, r.count, r.dtype, r.root); break;
    case Collective::allgather:
      if (r.varying) allgather_varying(entry);
      else comm_.allgather(r.send, r.count, r.dtype, r.recv);
      break;
    case Collective::barrier: comm_.barrier(); break;
    case Collective::alltoall: comm_.alltoall(r.send, r.to_each, r.dtype, r.output); break;
    case Collective::reducescatter:
      comm_.reduce_scatter(r.send, r.recv, r.count, reducescatter_bounds(shape_of(r), size_), r.dtype, r.op);
      break;
  }
  const char* phase = core::collective_row(r.kind).upper;  // Horovod's: ALLREDUCE, BROADCAST, ...
  if (timeline_) {
    timeline_->span(r.name, "QUEUE", ready_at, start);
    timeline_->span(r.name, phase, start, Clock::now());
  }
}

}  // namespace ringrun::engine
