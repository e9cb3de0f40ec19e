// The engine: named asynchronous collectives, Horovod style. A background thread owns the
// communicator; ranks submit named ops in any order from any thread, and each cycle the ranks
// agree which names are ready everywhere and run them in one order on every rank.
//
//   Engine engine(comm, EngineConfig::from_environment());
//   auto op = engine.submit({.kind = Collective::allreduce, .name = "grad.0", .send = g, .recv = g,
//                            .count = n, .dtype = RINGRUN_FLOAT32, .op = RINGRUN_SUM});
//   op->wait();          // RINGRUN_OK or an error code; op->message() says why
//   engine.shutdown();   // collective: fails what is still pending, joins the thread
//
// What one cycle does (cycle.cpp, Engine::run_cycle), the same steps on every rank:
//   1. Write this rank's record (negotiation.cpp): each op submitted since the last cycle as its
//      response-cache bit when the cache holds its name with the same shape, else as a full
//      description; the inputs of small cached allreduces pending here (inline data); rank 0 adds
//      the stall shutdowns its stall inspector decided. One small cached op alone takes a direct
//      writer of the same bytes (checked builds compare the two).
//   2. Exchange the records: one allgather of the fixed-size part (flags, cache bits as a bit
//      vector or a short index list, inline data) and, only when some rank has descriptions or
//      other payload, a second allgather of the payloads (negotiation_record.hpp: the format).
//   3. When every rank's record holds the same single inline op and nothing else is pending
//      anywhere, reduce it from the records and complete it: the lone op's shortcut. Done.
//   4. Apply every rank's record in rank order (negotiation.cpp, pending_table.cpp): every rank
//      builds the same table of pending names, and a name becomes ready once all ranks sent it.
//   5. Decide (cycle.cpp): fail what rank 0 found stalled; at a finalize on any rank fail
//      everything pending; else execute the ready names in creation order (execution.cpp):
//      mismatches fail, inline ops complete from the records, allreduces fuse by (dtype, op)
//      up to the fusion threshold (in place as spans, or through the fusion buffer), the rest
//      run one by one; each done name updates the response cache and completes its op.
//   6. End (cycle.cpp): names completed outside the cache enter it (evicting the least recently
//      used of their room), the inline sources are forgotten, the timeline is flushed.
// Every rank applies the same records in the same order, so every rank decides the same ready
// list, order, fusion groups and cache updates with no coordinator round trip. Rank 0's clock
// alone decides stall shutdowns and only rank 0 writes the timeline, as in Horovod.
//
// The engine's files, each owning one seam (its header or its opening comment says what it may
// touch):
//   engine.hpp/.cpp        the class, configuration, and the lifecycle: start (constructor),
//                          submission, the background thread's loop, stop (shutdown), release
//   cycle.cpp              the cycle above, in order
//   negotiation.cpp        what this rank writes in its record, the exchange, applying records
//   negotiation_record.hpp the record's format: layout, header, payload entries (a protocol)
//   pending_table.cpp      the table of pending names, completion and failure, cache upkeep,
//                          the stall checks' walk over the table
//   response_cache.hpp     the response cache: bits, LRU eviction, two rooms, bit hints
//   stall_inspector.hpp    stall warnings and shutdowns: decisions from given times, messages
//   execution.cpp          fusion grouping and running the collectives
//   op_state.hpp           op states: completion (lock-free), waits, free lists, CycleDriver
//   timeline.hpp           the Chrome trace written by rank 0
//   api/engine_c_api.cpp, api/process_engine.hpp: the process-wide engine behind the C API
//
// The steady state (the same names every step) costs no allocation and no lookup by name in the
// cycle beyond one per submitted op: a cached name's table entry is indexed by its cache bit and
// reused from step to step, set bits are applied a 64-bit word at a time, and ops complete with a
// store each (no fence: op_state.hpp). A step of a thousand small tensors spends about a tenth of
// a microsecond per tensor on bookkeeping; the rest is the one fused allreduce, over the tensors
// in place (one span when they are adjacent in memory).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ringrun/environment_variables.hpp>

#include "comm/communicator.hpp"
#include "core/world.hpp"
#include "engine/negotiation_record.hpp"
#include "engine/op_state.hpp"
#include "engine/response_cache.hpp"
#include "engine/stall_inspector.hpp"

namespace ringrun::engine {

class Timeline;

struct EngineConfig {
  // The defaults are the table's (ringrun/environment_variables.hpp), as from_environment() reads them.
  std::size_t fusion_threshold_bytes =
      static_cast<std::size_t>(variables::default_number(variables::kFusionThresholdMb)) << 20;
  // Allreduces of at least this many bytes skip the fusion buffer and run on their own buffers
  // (RINGRUN_UNFUSED_MIN_BYTES): for them the two copies cost more than the saved synchronisation.
  std::size_t unfused_min_bytes = static_cast<std::size_t>(variables::default_number(variables::kUnfusedMinBytes));
  // RINGRUN_CYCLE_TIME_MS: the longest wait to batch
  std::chrono::microseconds cycle_time{static_cast<long long>(variables::default_number(variables::kCycleTimeMs) * 1000)};
  std::string timeline_filename;                      // RINGRUN_TIMELINE_FILENAME; empty: none
  bool timeline_mark_cycles =  // a mark per cycle with work
      variables::default_number(variables::kTimelineMarkCycles) == 1;
  // Elastic mode: the world's epoch (-1 outside it). Each world's rank 0 continues the one
  // timeline file, after a mark, instead of starting it over.
  int elastic_epoch = -1;
  std::chrono::milliseconds stall_warning{
      static_cast<long long>(variables::default_number(variables::kStallCheckWarningTimeSeconds) * 1000)};
  std::chrono::milliseconds stall_shutdown{  // 0: never
      static_cast<long long>(variables::default_number(variables::kStallCheckShutdownTimeSeconds) * 1000)};
  std::size_t cache_capacity =  // 0: no cache
      static_cast<std::size_t>(variables::default_number(variables::kCacheCapacity));
  bool fp16_compression =  // fp32 allreduce as fp16
      variables::default_number(variables::kFp16Compression) == 1;
  // Most bytes of inline data per rank in a negotiation record (RINGRUN_INLINE_BYTES; 0: none):
  // small cached allreduces travel with the negotiation and complete without a collective of their
  // own. The records carry only as much as the ranks asked for in recent cycles (see
  // next_inline_area), so a 4-byte tensor does not gather 4 KiB.
  std::size_t inline_bytes = static_cast<std::size_t>(variables::default_number(variables::kInlineBytes));
  // When no rank had anything pending in the last cycle, an idle rank still joins a cycle this
  // often, so that a peer waiting in a cycle (for stall checks, finalize) is never stuck.
  std::chrono::milliseconds idle_heartbeat{100};
  // The background thread starts a cycle this long after it first sees a batch of submissions
  // (unless a waiting thread runs it first; while ops flow it looks every batch window, so a batch
  // waits one to two windows): the tensors of a backward pass arrive microseconds apart, and one
  // cycle for all of them costs far less than a cycle each.
  std::chrono::microseconds batch_window{200};

  static EngineConfig from_environment();  // RuntimeError naming the variable when malformed
  // Horovod's variables (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME, HOROVOD_TIMELINE[=DYNAMIC],
  // HOROVOD_TIMELINE_MARK_CYCLES, HOROVOD_STALL_CHECK_TIME_SECONDS,
  // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, HOROVOD_CACHE_CAPACITY) where ringrun's are unset.
  static void apply_horovod_environment(EngineConfig& config);
};

// What a rank asks for; every rank must describe a name the same way.
struct OpRequest {
  core::Collective kind = core::Collective::allreduce;
  std::string name;
  const void* send = nullptr;  // allreduce, allgather, alltoall, reducescatter
  // allreduce (may equal send), allgather (count * size elements), broadcast (the buffer),
  // reducescatter (this rank's block); null where `output` gives it.
  void* recv = nullptr;
  std::size_t count = 0;  // elements this rank passes
  ringrun_dtype dtype = RINGRUN_FLOAT32;
  ringrun_op op = RINGRUN_SUM;
  int root = 0;  // broadcast
  Dims dims;     // the tensor's shape (ndim 0: a flat buffer); reducescatter splits its first dimension
  // An allgather whose count may differ per rank: the output comes from `output` once every
  // rank's count is known. Never cached (the counts change).
  bool varying = false;
  std::vector<std::size_t> to_each;  // alltoall: elements to each rank, in rank order
  // allgather (varying), alltoall: the receive buffer, asked for at execution on the engine's
  // thread with every rank's part (see core::Communicator::AlltoallOutput).
  core::Communicator::AlltoallOutput output;
  // False: the name never takes a response-cache entry.
  bool cacheable = true;
  // Called at completion instead of a wait on the returned reference (ringrun_request::on_done):
  // the submitter then drops the reference without letting go (OpRef::release()).
  ringrun_done_fn on_done = nullptr;
  void* on_done_arg = nullptr;
  // Horovod's join: this rank has no more ops and stands in for the others' allreduces until every
  // rank has joined; recv (an int) then receives the rank that joined last. Never negotiated by
  // name: a flag in this rank's records (join.cpp).
  bool join = false;
  // A synchronous ringrun_* call routed through the running engine (names "ringrun_barrier#3"
  // and so on, kRoutedNamesPerCall per call, reused in turn). They have cache room of their own
  // (kRoutedCacheEntries, beyond cache_capacity): a program whose step fills the cache exactly
  // would otherwise lose a gradient's entry to every barrier or loss reduction between steps,
  // describe it in full the next step and get it back under another bit, out of memory order.
  bool routed = false;

  // A plain C API call's request: `count` elements of `dtype` from send into recv.
  static OpRequest plain(core::Collective kind, const void* send, void* recv, std::size_t count, ringrun_dtype dtype) {
    OpRequest request;
    request.kind = kind;
    request.send = send;
    request.recv = recv;
    request.count = count;
    request.dtype = dtype;
    return request;
  }
};

// The element bounds of a reducescatter's blocks (ranks + 1 of them): the first dimension split
// over the ranks, the first ranks one row more when it does not divide (Horovod's split).
std::vector<std::size_t> reducescatter_bounds(const OpShape& shape, int ranks);

// How many names each synchronous call (ringrun_allreduce, _broadcast, _allgather, _barrier)
// rotates through while the engine runs, and the cache entries kept for all of them.
inline constexpr std::size_t kRoutedNamesPerCall = 16;
inline constexpr std::size_t kRoutedCacheEntries = 4 * kRoutedNamesPerCall;

// Counters of what the engine did, for tests and benchmarks.
struct EngineStats {
  std::uint64_t cycles = 0;                // negotiation rounds
  std::uint64_t cached_submissions = 0;    // submissions sent as a response-cache bit
  std::uint64_t described_submissions = 0; // submissions sent in full
  std::uint64_t fused_allreduces = 0;      // collectives over the fusion buffer
  std::uint64_t fused_tensors = 0;         // tensors that went through them
  std::uint64_t completed = 0;             // ops completed (with or without error)
  std::uint64_t inline_allreduces = 0;     // allreduces reduced from the negotiation records
  std::uint64_t cache_evictions = 0;       // response-cache entries given to a new name
  std::uint64_t listed_cycles = 0;         // cycles whose records listed cache indices, not bit vectors
};

class Engine {
 public:
  // Starts the engine (its background thread). The engine uses comm alone from then on until
  // shutdown(): nobody else may call into comm meanwhile.
  Engine(core::Communicator& comm, EngineConfig config);
  ~Engine();  // shutdown(), errors swallowed
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues an op; thread-safe. Throws RuntimeError for a bad argument, a name already pending on
  // this rank, or an engine that is shut down or broken.
  OpRef submit(OpRequest request);

  // Collective (every rank calls it): ops still pending here or on any rank complete with an
  // error, the thread joins once every rank has asked to shut down. Idempotent.
  void shutdown();

  const EngineConfig& config() const { return config_; }

  // Starts writing the timeline to filename (replacing one being written), or stops it; rank 0
  // writes it, the other ranks only accept the call. Thread-safe: waits for a running cycle.
  // Throws RuntimeError naming the file when it cannot be created.
  void start_timeline(const std::string& filename, bool mark_cycles);
  void stop_timeline();
  EngineStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  using StallFailures = std::vector<std::pair<std::string, std::string>>;  // name, message
  // What this rank knows of a name it submitted (a node of local_names_).
  struct NameState {
    explicit NameState(bool is_pending) : pending(is_pending) {}
    std::atomic<bool> pending;  // submitted and not done; cleared by the cycle without the mutex
    // The cycle's last finding of the name's cache bit (-1: none), checked against the cache
    // before use (ResponseCache::hint_confirmed): a step's thousand names are then found without
    // a lookup by name. Only whoever runs the cycle touches it, and only while the name is
    // pending (the node cannot go away).
    int bit_hint = -1;
    // Submission side (under mutex_): the node's key, and the name submitted after this one last
    // time. A step submits its names in the same order every time, so the next name is usually
    // found by one comparison instead of a hash lookup.
    const std::string* key = nullptr;
    NameState* next = nullptr;
  };
  struct LocalOp {
    LocalOp(OpRequest&& r, OpRef&& s, NameState* n) : request(std::move(r)), state(std::move(s)), name_state(n) {}
    OpRequest request;
    OpRef state;  // the engine's hold
    NameState* name_state = nullptr;  // its node in local_names_
    int bit = -1;                          // its cache bit when sent, or -1: a named entry
    bool device = false;  // an allreduce on device memory (NCCL, never fused or inlined)
    // A joined rank's part in another rank's allreduce (join.cpp): neutral input in `scratch`,
    // no submitter, not counted among this rank's pending ops.
    bool stand_in = false;
    std::vector<std::byte> scratch;
  };
  // A name pending somewhere, in the table every rank keeps identically. Names the response cache
  // holds live in bit_entries_ (indexed by cache bit, reused from step to step: no allocation in
  // the steady state); the others in named_entries_.
  struct Entry {
    int bit = -1;                                   // cache bit, or -1: named_entries_ holds it
    const std::string* name = nullptr;              // the map key, for named entries
    std::uint64_t seq = 0;                          // creation order = execution order
    int present = 0;                                // ranks whose submission was applied
    bool uniform = false;                           // a bit entry every rank sent in one cycle: all shapes are the cache's
    // Named entries only (bit entries use bit_shapes_ and bit_arrival_; see shapes(), arrivals()):
    std::vector<std::optional<OpShape>> per_rank;   // what each rank submitted
    std::vector<Clock::time_point> arrival;         // when each rank's submission was applied (timeline only)
    Clock::time_point first_seen;
    Clock::time_point last_warned;
    std::optional<LocalOp> local;                   // this rank's op, once its own record was applied
    std::size_t local_at = 0;                       // its place in local_bits_ (bit entries)
  };
  struct Finished {  // failed in this cycle: handed to its OpState once the cycle is over
    OpRef state;
    NameState* name_state;
    int code;
    std::string message;
  };
  friend class OpState;

  // ---- Lifecycle (engine.cpp) ---------------------------------------------------------------
  // start: the constructor starts the thread (loop). run: cycles, by the thread or by waiters
  // (OpState::wait), one at a time under driver_->mutex. stop: shutdown() requests it; the cycle
  // that sees every rank's shutdown flag (or a broken communicator) sets finished_; the thread
  // leaves its loop, fails leftovers and detaches the driver; shutdown() joins it and releases
  // the tables (release(): the point a reset for elastic would start again from).
  void loop();
  // Sleeps until the next cycle is due (a batch window after a batch, the cycle time while
  // anything is pending, the idle heartbeat otherwise); false once the thread should leave.
  void wait_for_cycle(std::uint64_t& seen_cycles, Clock::time_point& seen_at);
  void stop_loop();  // the thread's last act: fails what was never sent, detaches the driver
  // One cycle with what was submitted so far; the caller holds driver_->mutex and !finished_.
  // After an error (the communicator broke) or once every rank asked to shut down, sets finished_
  // and fails what is pending.
  void cycle_once();
  void break_down(std::exception_ptr error);  // the communicator broke: fail everything, finish
  // Called by the last thread that ran cycles in OpState::wait() as it leaves (driver mutex held):
  // the background thread takes over what is still pending here.
  void waiter_left();
  void release();  // after the thread joined: frees the tables and buffers
  [[noreturn]] void throw_pending(const std::string& name) const;
  // Submission checks of the collectives with a part per rank (alltoall, varying allgather,
  // reducescatter); marks them uncacheable where every rank's count is needed.
  void check_personalized(OpRequest& request) const;
  NameState* note_submission(const std::string& name);  // under mutex_: the name is pending here now

  // ---- The cycle (cycle.cpp) ----------------------------------------------------------------
  void run_cycle(std::vector<LocalOp>& fresh, bool shutdown);
  void take_join(std::vector<LocalOp>& fresh);    // a join submitted: this rank's join_op_
  void adopt_fresh(std::vector<LocalOp>& fresh);  // this rank's ops join their entries
  void decide(const StallFailures& stalled, Clock::time_point now);  // fail, or execute what is ready
  void end_cycle();  // cache insertions, inline sources cleared, timeline flushed

  // ---- Negotiation: the records' writers and reader (negotiation.cpp) ------------------------
  static OpShape shape_of(const OpRequest& request);
  // CLOCK_MONOTONIC_COARSE (a few ms, a quarter of a precise read's cost), from steady_clock's origin.
  static Clock::time_point coarse_now();
  // This rank's record for this cycle into mine_ and the payload; returns the ops sent as cache bits.
  std::size_t write_record(const RecordLayout& layout, std::vector<LocalOp>& fresh, bool shutdown, Clock::time_point now,
                           Writer& payload);
  std::size_t write_general_record(const RecordLayout& layout, std::vector<LocalOp>& fresh, bool shutdown,
                                   Clock::time_point now, Writer& payload);
  // The general writer's parts: the submissions (cache bits or descriptions), the inline data.
  std::size_t write_submissions(const RecordLayout& layout, std::vector<LocalOp>& fresh, Clock::time_point now, Writer& payload);
  RecordHeader write_inline(const RecordLayout& layout, const std::vector<LocalOp>& fresh, std::size_t listed);
  // The record of a cycle whose only op is one cached small allreduce, nothing else pending
  // here: what the general writer would write, without its generality (false: not that case,
  // nothing written). Checked builds (RINGRUN_CHECKED) compare the two for every such op.
  bool write_lone_record(const RecordLayout& layout, LocalOp& op, Clock::time_point now);
  // Allgathers the records (fixed parts, then payloads when any rank has one), sizes the next
  // cycle's layout; returns the largest payload (0: none).
  // (submitted, cached: this rank's ops this cycle and those sent as cache bits, for the counters.)
  std::size_t exchange_records(const RecordLayout& layout, const Writer& payload, std::size_t submitted, std::size_t cached);
  // Applies every rank's record in rank order: every rank builds the same table and ready list.
  void apply_records(const RecordLayout& layout, std::size_t max_payload, Clock::time_point now, StallFailures& stalled);
  void apply_everyone_bits(const RecordLayout& layout, Clock::time_point now);  // bits every rank sent: ready at once
  void apply_payload(int rank, const RecordLayout& layout, std::size_t max_payload, Clock::time_point now,
                     StallFailures& stalled);
  // The steady state of one small op at a time (a latency-bound loop, a synchronous call routed
  // through the engine): every rank's record holds the same single cached allreduce, inline,
  // and nothing else is pending anywhere. It completes straight from the records, without the
  // table; false (nothing done) otherwise.
  bool complete_lone_inline(const RecordLayout& layout, std::vector<LocalOp>& fresh);
  // core::cuda_driver_loaded() walks the loaded objects, about as costly as the rest of a small
  // op's bookkeeping: a cycle asks again only once the coarse clock has moved on (a few ms). No
  // program loads the CUDA driver, creates a context and allocates device memory in that time;
  // once loaded, the answer never changes.
  bool cuda_driver_loaded(Clock::time_point coarse);  // coarse: the cycle's coarse clock reading

  // ---- The table of pending names, completion and the cache's upkeep (pending_table.cpp) -----
  const std::string& entry_name(const Entry& entry) const;
  std::optional<OpShape>* shapes(Entry& entry);      // size_ of them: what each rank submitted
  Clock::time_point* arrivals(Entry& entry);       // size_ of them; only kept with a timeline
  Entry& entry_for_name(const std::string& name);  // creates a named entry
  Entry* find_entry(const std::string& name);
  void apply_shape(Entry& entry, int rank, const OpShape& shape, Clock::time_point now);
  void reset_entry(Entry& entry);  // done or failed: a bit entry is kept for reuse, a named one erased
  void fail_entry(Entry& entry, int code, const std::string& message);
  void fail_everything(int code, const std::string& message);
  void finish(LocalOp op, int code, std::string message);  // an error: handed over after the cycle
  void complete_ok(LocalOp& op);                           // at once
  void finish_ok(Entry& entry);                            // done everywhere: cache updated, op completed
  void hand_over_finished();  // completes the cycle's finished ops (one lock for all of them)
  void update_cache(Entry& entry, const OpShape& shape);
  void insert_into_cache(Description description);
  void grow_bit_tables();
  // Rank 0, every StallInspector::kCheckEvery: the verdicts on the table's names.
  void check_stalls(Clock::time_point now, StallFailures& to_fail);
  void check_stall(Entry& entry, Clock::time_point now, StallFailures& to_fail);

  // ---- Join (join.cpp) ------------------------------------------------------------------------
  void note_join(int rank, std::uint8_t flags);  // applying a record: the rank's join flag
  void ready_with_joined();                       // names every rank that has not joined sent
  // Before execution: names a joined rank cannot stand in for fail; a joined rank gets a stand-in
  // op for the others' allreduces.
  void stand_in_for_joined(std::vector<Entry*>& ready);
  void finish_join();                             // every rank joined: the joins complete
  const OpShape& some_shape(Entry& entry);        // the shape of a rank that submitted the name

  // ---- Execution and fusion grouping (execution.cpp) ----------------------------------------
  void execute(std::vector<Entry*>& ready);
  void fail_mismatched(std::vector<Entry*>& ready, Clock::time_point now);  // and the NEGOTIATE spans
  void complete_inline(std::vector<Entry*>& ready);  // small allreduces every rank sent inline
  // ready_at: when the cycle agreed the op was ready everywhere (the timeline's QUEUE starts there).
  void execute_allreduce_group(const std::vector<Entry*>& group, Clock::time_point ready_at);
  // Adjacent tensors merged into spans_ and reduced in place; false when the transport cannot
  // take several spans (then the fusion buffer).
  bool allreduce_in_place(const std::vector<Entry*>& group, Clock::time_point ready_at);
  void allreduce_through_fusion_buffer(const std::vector<Entry*>& group, bool compress, Clock::time_point ready_at);
  void execute_single(Entry& entry, Clock::time_point ready_at);
  void allgather_varying(Entry& entry);  // an allgather of a different count per rank

  core::Communicator& comm_;
  const EngineConfig config_;
  const int rank_;
  const int size_;

  // Shared with submitters (engine.cpp).
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<LocalOp> submitted_;           // not yet sent in a cycle
  std::atomic<bool> has_submitted_{false};   // !submitted_.empty(), for a look without the mutex
  // Whether the background thread has seen the batch in submitted_, and when it runs it.
  bool batch_noticed_ = false;
  Clock::time_point batch_due_;
  // Names submitted here: true while pending (submitted, not done). Done names stay as false (no
  // allocation per op in the steady state) until there are many more of them than pending ones.
  // The flag is cleared by the cycle without the mutex (through LocalOp::name_state): the node
  // stays until the mutex holder prunes flags that are clear.
  std::unordered_map<std::string, NameState> local_names_;
  NameState* last_submitted_ = nullptr;  // the node of the name submitted last (see NameState::next)
  // Pending names: submissions counted under mutex_, completions by whoever runs the cycle (a
  // relaxed load and store each, no locked instruction per op).
  std::size_t local_names_submitted_ = 0;
  std::atomic<std::size_t> local_names_completed_{0};
  // The background thread sleeps for longer than a batch window before it looks at submitted_
  // again: only then does a submission wake it.
  bool thread_sleeps_long_ = false;
  bool shutdown_requested_ = false;
  bool stopped_ = false;                     // the thread has left its loop
  int broken_code_ = 0;
  std::string broken_message_;
  bool waiter_left_ = false;                 // the last driving waiter left while work remains here

  // Owned by whoever runs the cycle (driver_->mutex).
  // The table (pending_table.cpp). By cache bit. It grows only between cycles' uses of Entry
  // pointers: new names enter the cache after a cycle's ops are done (cache_inserts_).
  std::vector<Entry> bit_entries_;
  std::vector<Description> cache_inserts_;               // names this cycle completed outside the cache
  // What each rank submitted for each bit entry, [bit * size_ + rank]: one flat array, walked in
  // bit order while a step's records are applied, instead of a small allocation per entry.
  std::vector<std::optional<OpShape>> bit_shapes_;
  std::vector<Clock::time_point> bit_arrival_;           // the same layout; only with a timeline
  std::unordered_map<std::string, Entry> named_entries_;
  std::size_t pending_entries_ = 0;                      // entries with present > 0
  std::size_t local_pending_ = 0;                        // entries holding this rank's op
  std::vector<int> local_bits_;                          // bit entries holding this rank's op
  std::uint64_t next_entry_seq_ = 0;
  ResponseCache cache_;
  std::uint64_t cycle_number_ = 0;                       // cycles run; the same on every rank
  // The records (negotiation.cpp). Inline data of this cycle's records: per bit and rank a pointer
  // into the records, and per bit how many ranks sent it (an op reduces inline only when every
  // rank did).
  std::vector<const std::byte*> inline_sources_;
  std::vector<int> inline_ranks_;
  std::vector<int> inline_touched_;
  std::size_t inline_area_ = 0;                          // inline bytes per record this cycle; the same on every rank
  std::size_t index_slots_ = 0;                          // cache indices a listed record holds; the same on every rank
  std::vector<std::uint32_t> listed_bits_;               // this cycle: cache bits this rank submits (listed records)
  std::vector<int> bit_counts_;                          // by cache bit: ranks that listed it (zero between cycles)
  std::vector<std::pair<int, const LocalOp*>> inline_candidates_;
  std::vector<Entry*> ready_;
  std::vector<std::uint64_t> everyone_bits_;             // this cycle: cache bits every rank sent
  std::vector<Finished> finished_ops_;
  std::size_t completed_ok_ = 0;                         // this cycle, for the counters
  std::vector<LocalOp> fresh_;
  std::vector<std::byte> mine_, all_fixed_, all_payload_, padded_payload_;
  std::vector<core::BufferSpan> spans_;                  // execution.cpp
  std::vector<bool> shutdown_seen_;                      // per rank, sticky
  bool anyone_active_ = false;                           // last cycle: something pending or shutting down somewhere
  bool finished_ = false;                                // no cycle runs any more (all shut down, or broken)
  StallInspector stall_;                                 // rank 0's (check_stalls)
  CycleDriver* const driver_;
  const std::size_t inline_capacity_;
  bool cuda_loaded_ = false;
  // Join (join.cpp): which ranks have joined (from the records; the same on every rank), the last
  // to join, and this rank's pending join op.
  std::vector<bool> joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
  std::optional<LocalOp> join_op_;
  Clock::time_point cuda_probed_at_{};

  // Read by the background thread between cycles (written under driver_->mutex).
  std::atomic<bool> active_{false};             // anyone_active_ or ops pending here
  std::atomic<bool> shutdown_sent_{false};      // this rank's shutdown flag went out in a cycle
  std::atomic<bool> finished_flag_{false};
  std::atomic<std::uint64_t> cycles_run_{0};     // heartbeats skip while waiters drive cycles
  std::vector<std::byte> fusion_buffer_;
  std::unique_ptr<Timeline> timeline_;     // changed only under driver_->mutex
  bool mark_cycles_ = false;               // a CYCLE_START mark per cycle with work (likewise)

  // EngineStats as counters: written only by whoever runs the cycle (one thread at a time, under
  // driver_->mutex), so an increment is a plain load and store, no lock; stats() reads them.
  struct Counters {
    std::atomic<std::uint64_t> cycles{0}, cached_submissions{0}, described_submissions{0}, fused_allreduces{0},
        fused_tensors{0}, completed{0}, inline_allreduces{0}, cache_evictions{0}, listed_cycles{0};
    static void add(std::atomic<std::uint64_t>& counter, std::uint64_t n) {
      counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
  };
  Counters counters_;

  std::thread thread_;
};

}  // namespace ringrun::engine
