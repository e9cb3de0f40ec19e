/* ringrun's allreduce runtime: the C API. Programs started by `ringrun` (or directly by srun or
 * mpirun) call ringrun_init(), then collectives; every call returns 0 on success or a negative
 * code, and ringrun_last_error() gives the calling thread's message. */
#ifndef RINGRUN_RINGRUN_H
#define RINGRUN_RINGRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. BOOL is one byte holding 0 or 1 (SUM and MAX reduce it as logical or, MIN and
 * PRODUCT as logical and). Values are fixed: bindings pass them as integers. */
typedef enum {
  RINGRUN_FLOAT32 = 0, RINGRUN_FLOAT64 = 1, RINGRUN_FLOAT16 = 2, RINGRUN_BFLOAT16 = 3,
  RINGRUN_INT32 = 4, RINGRUN_INT64 = 5, RINGRUN_UINT8 = 6, RINGRUN_INT8 = 7, RINGRUN_INT16 = 8,
  RINGRUN_BOOL = 9
} ringrun_dtype;

/* Reduction ops of the allreduces. SUM, AVERAGE, MIN, MAX and PRODUCT combine element by element,
 * every dtype. ADASUM (Horovod's hvd.Adasum, Maleki et al., arXiv:2006.02924) combines whole
 * tensors: pairs of partial results a, b become (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, the
 * dot product and norms taken over the whole tensor in double precision, by recursive vector
 * halving and distance doubling over TCP between every pair of ranks (any placement). It sums
 * orthogonal tensors and averages equal ones. Allreduce only (one tensor per call, never fused);
 * float16, bfloat16, float32 and float64 host buffers; any number of ranks (with 2^k < n < 2^(k+1),
 * rank 2^k + j first combines its tensor into rank j's, and the halves 1/2 of the unbalanced pairs
 * become each side's share of the ranks, so tensors that are multiples of one another still
 * average). Integer dtypes and device buffers: RINGRUN_ERR_INVALID_ARGUMENT. */
typedef enum {
  RINGRUN_SUM = 0, RINGRUN_AVERAGE = 1, RINGRUN_MIN = 2, RINGRUN_MAX = 3, RINGRUN_PRODUCT = 4, RINGRUN_ADASUM = 5
} ringrun_op;

/* Error codes (negative). */
enum {
  RINGRUN_OK = 0,
  RINGRUN_ERR_INVALID_ARGUMENT = -1, /* a bad argument: null pointer, unknown dtype, bad root */
  RINGRUN_ERR_NOT_INITIALIZED = -2,  /* called before ringrun_init() or after finalize */
  RINGRUN_ERR_BOOTSTRAP = -3,        /* rank discovery or rendezvous failed */
  RINGRUN_ERR_TIMEOUT = -4,          /* a wait ran past its timeout */
  RINGRUN_ERR_PEER = -5,             /* a peer died or its connection broke */
  RINGRUN_ERR_MISMATCH = -6,         /* ranks disagree on count, dtype, op or name */
  RINGRUN_ERR_INTERNAL = -7,
  RINGRUN_ERR_RESET = -8,            /* elastic mode: the world is being re-formed (a peer died or a
                                        wait timed out); call ringrun_reset() */
  RINGRUN_ERR_REMOVED = -9           /* elastic mode: this process is not in the next world (it left,
                                        was removed, or the job ended); finalize and exit */
};

int ringrun_init(void);
int ringrun_finalize(void);
/* A check that ringrun_init and ringrun_reset call about every 100 ms while they wait at the
 * rendezvous for the other ranks; when it returns non-zero the call gives up with
 * RINGRUN_ERR_BOOTSTRAP ("interrupted"). Language bindings pass their signal check, so that Ctrl-C
 * reaches a rank whose peers have not started. NULL removes it. */
void ringrun_set_interrupt_check(int (*check)(void *arg), void *arg);
int ringrun_rank(void);
int ringrun_size(void);
int ringrun_local_rank(void);
int ringrun_local_size(void);
int ringrun_cross_rank(void);
int ringrun_cross_size(void);
/* The transport collectives on host buffers use: "self" (one rank), "shm" (one host), "tcp", or
 * "shm+tcp" (shared memory within each host, TCP between hosts); NULL before ringrun_init(). */
const char *ringrun_transport_name(void);

/* The NCCL this process uses for device buffers, loaded now if it is not yet (the search of
 * ringrun(1), RINGRUN_NCCL_LIBRARY: that variable, a copy already loaded, the Python environment's
 * nvidia/nccl/lib, NCCL_HOME, LD_LIBRARY_PATH, /usr/local/cuda): its version code (2.32.3 ->
 * 23203), or a negative code with ringrun_last_error() naming what is missing and how to get it.
 * Needs no ringrun_init(). */
int ringrun_nccl_version(void);

/* send == recv means in place. */
int ringrun_allreduce(const void *send, void *recv, size_t count, ringrun_dtype dtype, ringrun_op op);
int ringrun_broadcast(void *buf, size_t count, ringrun_dtype dtype, int root);
int ringrun_allgather(const void *send, size_t count, ringrun_dtype dtype, void *recv);
int ringrun_barrier(void);
/* Allgather of a different count per rank (MPI_Allgatherv): counts[r] elements from rank r, the
 * same counts array on every rank (ncounts == ringrun_size(), count == counts[ringrun_rank()]);
 * recv holds their sum, rank r's elements after those of ranks 0..r-1. Host buffers only. */
int ringrun_allgatherv(const void *send, size_t count, ringrun_dtype dtype, void *recv, const size_t *counts,
                       size_t ncounts);

/* The calling thread's last error message ("" when none). */
const char *ringrun_last_error(void);

/* The engine: named asynchronous operations, run in one agreed order on every rank. */
typedef struct ringrun_handle_s *ringrun_handle;
int ringrun_allreduce_async(const char *name, const void *send, void *recv, size_t count,
                            ringrun_dtype dtype, ringrun_op op, ringrun_handle *out);
int ringrun_broadcast_async(const char *name, void *buf, size_t count, ringrun_dtype dtype, int root,
                            ringrun_handle *out);
int ringrun_allgather_async(const char *name, const void *send, size_t count, ringrun_dtype dtype,
                            void *recv, ringrun_handle *out);
int ringrun_wait(ringrun_handle handle); /* releases the handle; returns the op's status */
int ringrun_test(ringrun_handle handle, int *done);
/* Waits at most timeout_ms for the op: returns its status and releases the handle once it is done
 * (*done = 1), or RINGRUN_OK with *done = 0 and the handle still valid when the time ran out.
 * Bindings wait in slices so that a signal handler gets a turn (Ctrl-C on a rank stuck in a
 * collective). */
int ringrun_wait_for(ringrun_handle handle, int timeout_ms, int *done);

/* Every collective the engine runs, once: X(NAME, name, value, agree), `agree` the parts of a call
 * every rank must give alike (RINGRUN_AGREE_*; a difference is RINGRUN_ERR_MISMATCH). The
 * ringrun_collective values below, the runtime's own kinds with their names and checks, and the
 * Python constants (ringrun._ringrun.ALLREDUCE, ..., and COLLECTIVE_NAMES) are made from this
 * list: a new collective is a line here, its execution and its bindings (README, Architecture). */
#define RINGRUN_AGREE_COUNT 1
#define RINGRUN_AGREE_DTYPE 2
#define RINGRUN_AGREE_OP 4
#define RINGRUN_AGREE_ROOT 8
#define RINGRUN_COLLECTIVES(X)                                                                   \
  X(ALLREDUCE, allreduce, 1, RINGRUN_AGREE_COUNT | RINGRUN_AGREE_DTYPE | RINGRUN_AGREE_OP)      \
  X(BROADCAST, broadcast, 2, RINGRUN_AGREE_COUNT | RINGRUN_AGREE_DTYPE | RINGRUN_AGREE_ROOT)    \
  X(ALLGATHER, allgather, 3, RINGRUN_AGREE_COUNT | RINGRUN_AGREE_DTYPE)                         \
  X(BARRIER, barrier, 4, 0)                                                                     \
  /* splits[r] rows of send to rank r; output through allocate */                               \
  X(ALLTOALL, alltoall, 5, RINGRUN_AGREE_DTYPE)                                                 \
  /* the reduction, rank r keeping its rows (below) in recv */                                  \
  X(REDUCESCATTER, reducescatter, 6, RINGRUN_AGREE_COUNT | RINGRUN_AGREE_DTYPE | RINGRUN_AGREE_OP)

/* The general submission: every collective the engine runs, with the options the functions
 * above leave out. Fill a ringrun_request (ringrun_request_init gives the defaults), then
 * ringrun_submit(). */
typedef enum {
#define RINGRUN_COLLECTIVE_VALUE(NAME, name, value, agree) RINGRUN_COLLECTIVE_##NAME = value,
  RINGRUN_COLLECTIVES(RINGRUN_COLLECTIVE_VALUE)
#undef RINGRUN_COLLECTIVE_VALUE
  /* Horovod's join: this rank has no more ops. Until every rank has joined it takes part in the
   * others' allreduces with a neutral input (0 for SUM and AVERAGE, the identity of MIN, MAX and
   * PRODUCT); their other collectives fail. Completes once every rank has joined, writing the
   * rank that joined last into recv (an int). Every rank of the job; no name needed. Not a
   * collective of its own: the engine runs it as a barrier that marks the rank joined. */
  RINGRUN_COLLECTIVE_JOIN = 7
} ringrun_collective;

/* Called exactly once when the op completes (status 0, or an error code and its message), on
 * the thread that completed it: the engine's, or one waiting in ringrun_wait. It must not block
 * or wait for another op; it may submit ops. */
typedef void (*ringrun_done_fn)(void *arg, int status, const char *message);

/* The output of an op whose size is known only once every rank's part is (an allgather with a
 * different first dimension per rank, an alltoall): called once, on the engine's thread, with the
 * elements in all and rows[r], the rows (entries of the first dimension) from rank r, counted by
 * the elements of a row (the product of the shape's dimensions after the first; a shape whose row
 * has no elements is refused); returns a buffer for `count` elements, or NULL to fail the op. */
typedef void *(*ringrun_allocate_fn)(void *arg, size_t count, const size_t *rows, int nranks);

typedef struct ringrun_request {
  ringrun_collective collective;
  /* The same on every rank; unique among this rank's pending ops. NULL (without on_done): a name
   * from the rotation the synchronous calls use, the same on every rank that submits its unnamed
   * ops in the same order; wait for such an op before submitting 16 more without a name. */
  const char *name;
  const void *send;      /* allreduce, allgather, alltoall, reducescatter: this rank's input */
  void *recv;            /* allreduce: count elements (== send: in place); broadcast: the buffer;
                            allgather: size * count elements */
  size_t count;          /* elements this rank passes */
  ringrun_dtype dtype;
  ringrun_op op;         /* allreduce */
  int root;              /* broadcast: the root's index in the process set (ringrun_rank() in set 0) */
  int process_set;       /* 0: every rank; else an id from ringrun_add_process_set (this rank must be in it) */
  /* The tensor's shape (optional; NULL: a flat buffer of count elements). Ranks must agree on it
   * (the first dimension may differ for an allgather with allocate, and for an alltoall), and a
   * mismatch names the shapes. Reducescatter splits the first dimension: rank r keeps
   * rows/size rows, the first rows%size ranks one more, in order. */
  const int64_t *shape;
  int ndim;
  const size_t *splits;  /* alltoall: rows to each rank, one per rank (NULL: the first dimension evenly) */
  /* allgather: set it for a first dimension that may differ per rank (recv then unused);
   * alltoall: required. */
  ringrun_allocate_fn allocate;
  void *allocate_arg;
  /* With on_done set, ringrun_submit's out may be NULL: the op is not waited for, the callback
   * reports it (and a handle, if asked for, must still be released by ringrun_wait). */
  ringrun_done_fn on_done;
  void *on_done_arg;
} ringrun_request;

void ringrun_request_init(ringrun_request *request); /* zeroes it: ALLREDUCE, SUM, FLOAT32 */
int ringrun_submit(const ringrun_request *request, ringrun_handle *out);

/* The timeline (a Chrome trace of every op, written by rank 0): starts writing it to filename,
 * replacing one being written, with a CYCLE_START mark per negotiation cycle when mark_cycles is
 * non-zero; or stops and closes it. Call on every rank (only rank 0 writes). The same file as
 * ringrun --timeline-filename from the start. */
int ringrun_start_timeline(const char *filename, int mark_cycles);
int ringrun_stop_timeline(void);

/* Process sets: subsets of the ranks whose ops run among themselves, on a communicator and an
 * engine of their own (Horovod's). Adding and removing are collective over every rank of the job,
 * in the same order everywhere, with the same ranks (global ranks; any order, no repeats).
 * ringrun_add_process_set returns the new set's id (> 0), or an error code; a set with the same
 * ranks as another is an error. Not available in elastic mode. */
int ringrun_add_process_set(const int *ranks, int nranks);
int ringrun_remove_process_set(int process_set);
int ringrun_process_set_size(int process_set);
int ringrun_process_set_rank(int process_set);     /* this rank's index in the set; an error if not in it */
int ringrun_process_set_included(int process_set); /* 1 or 0 */

/* Elastic mode: a process that `ringrun --min-np/--max-np` started (RINGRUN_ELASTIC_ID,
 * RINGRUN_ELASTIC_EPOCH, RINGRUN_ELASTIC_TIMEOUT in its environment) takes its rank and size from
 * the world the launcher publishes, not from RINGRUN_RANK/SIZE. When a peer dies, collectives
 * return RINGRUN_ERR_RESET; the process then calls ringrun_reset() and carries on in the next world
 * with the same pid, possibly under another rank and size. Outside elastic mode ringrun_reset,
 * ringrun_elastic_status, ringrun_elastic_leave and ringrun_elastic_fail return RINGRUN_ERR_INVALID_ARGUMENT. */

/* Posts a reset request, leaves the current world without a barrier (pending async ops fail; the
 * peers see this process go) and joins the next published world (or the newest, if several were
 * published meanwhile), waiting up to RINGRUN_ELASTIC_TIMEOUT for it. After a failure it leaves at
 * once; in a healthy world the members call it together (after agreeing through
 * ringrun_elastic_status), as the engine's shutdown waits for every member. Returns 0 (see ringrun_rank/size/epoch),
 * RINGRUN_ERR_REMOVED when this process is not in it or the job ended, RINGRUN_ERR_RESET when a
 * member was lost while it formed (call ringrun_reset() again), or a timeout/bootstrap error. */
int ringrun_reset(void);
/* The epoch of the world this process is in (0 = the first; 0 outside elastic mode). */
int ringrun_epoch(void);
/* 1 when the environment puts this process in elastic mode, else 0. */
int ringrun_elastic_enabled(void);
/* Not collective: reads the newest published epoch and whether a world since this one added processes (1) or
 * only lost some (0) from the launcher's store. A newer epoch than ringrun_epoch() means the
 * members should agree to call ringrun_reset(). Either pointer may be NULL. */
int ringrun_elastic_status(int *latest_epoch, int *added);
/* Tells the launcher that this process leaves the job at its next reset (ringrun_reset() then
 * returns RINGRUN_ERR_REMOVED) instead of failing; call it before the members agree to reset. */
int ringrun_elastic_leave(void);
/* Tells the launcher that this process is about to fail (say, an error it will not recover from
 * ends its training): when the peers ask for a reset, the next world forms without it at once and
 * its host (or slot) is blacklisted, one reset for the failure, not a world of the same members
 * first and then one without it. Not collective; the process should exit soon after. */
int ringrun_elastic_fail(void);

#ifdef __cplusplus
}
#endif
#endif
