// Collectives through one POSIX shared-memory segment when every rank is on this host.
//
// Each rank owns two slots (double buffering by round parity) of slot_bytes in the segment, and
// counters that only it writes: arrived, reduced, consumed (the last round number it reached in
// each phase). A large allreduce runs in rounds of slot_bytes; in each round every rank copies the
// parts of its input that the others own into its slot, reduces its own shard directly from the
// peers' slots (in rank order, so results do not depend on who reduces), and copies every shard's
// result out of its owner's slot. Small allreduces (the latency path) copy the whole input into
// the slot and every rank reduces everything, in one synchronisation. Waiting spins briefly, then
// yields, then sleeps on a futex with a short timeout during which it checks the TCP mesh, so a
// peer that dies is reported within milliseconds and oversubscribed ranks do not burn the CPUs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/tcp/tcp_mesh.hpp"
#include "transport/transport.hpp"

namespace ringrun::core {

class ShmTransport final : public Transport {
 public:
  static constexpr std::size_t kDefaultSlotBytes = 256 * 1024;
  // Allreduces up to this size (and up to one slot) take the latency path.
  static constexpr std::size_t kDirectMaxBytes = 16 * 1024;

  // Collective over every rank of mesh.world() (all on one host). Returns null, with the reason
  // in *why_not, when any rank cannot create or map the segment (then every rank gets null).
  static std::unique_ptr<ShmTransport> create(TcpMesh& mesh, std::size_t slot_bytes, std::string* why_not);
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  void allreduce(const OpHeader& header, const void* send, void* recv) override;
  void broadcast(const OpHeader& header, void* buf) override;
  void allgather(const OpHeader& header, const void* send, void* recv) override;
  void barrier(const OpHeader& header) override;

  struct Control;

 private:
  ShmTransport(TcpMesh& mesh, void* base, std::size_t bytes, std::size_t slot_bytes);
  Control& control(int rank) const;
  char* slot(int rank, std::uint32_t round) const;
  // Round protocol helpers.
  void begin_round(const OpHeader& header, bool first);  // waits until own slot may be rewritten
  void publish(std::atomic<std::uint32_t>& counter);
  void wait_all(std::atomic<std::uint32_t> Control::*counter, std::uint32_t target, const char* what);
  void wait(int peer, std::atomic<std::uint32_t>& counter, std::uint32_t target, const char* what);
  void check_headers(const OpHeader& header);
  void allreduce_direct(const OpHeader& header, const char* send, char* recv);

  TcpMesh& mesh_;
  const World& world_;
  void* base_;
  std::size_t bytes_;
  std::size_t slot_bytes_;
  std::uint32_t round_ = 0;  // last round started; every rank runs the same rounds
};

}  // namespace ringrun::core
