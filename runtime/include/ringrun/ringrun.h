/* ringrun's allreduce runtime: the C API. Programs started by `ringrun` (or directly by srun or
 * mpirun) call ringrun_init(), then collectives; every call returns 0 on success or a negative
 * code, and ringrun_last_error() gives the calling thread's message. */
#ifndef RINGRUN_RINGRUN_H
#define RINGRUN_RINGRUN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  RINGRUN_FLOAT32, RINGRUN_FLOAT64, RINGRUN_FLOAT16, RINGRUN_BFLOAT16,
  RINGRUN_INT32, RINGRUN_INT64, RINGRUN_UINT8
} ringrun_dtype;

typedef enum { RINGRUN_SUM, RINGRUN_AVERAGE, RINGRUN_MIN, RINGRUN_MAX, RINGRUN_PRODUCT } ringrun_op;

/* Error codes (negative). */
enum {
  RINGRUN_OK = 0,
  RINGRUN_ERR_INVALID_ARGUMENT = -1, /* a bad argument: null pointer, unknown dtype, bad root */
  RINGRUN_ERR_NOT_INITIALIZED = -2,  /* called before ringrun_init() or after finalize */
  RINGRUN_ERR_BOOTSTRAP = -3,        /* rank discovery or rendezvous failed */
  RINGRUN_ERR_TIMEOUT = -4,          /* a wait ran past its timeout */
  RINGRUN_ERR_PEER = -5,             /* a peer died or its connection broke */
  RINGRUN_ERR_MISMATCH = -6,         /* ranks disagree on count, dtype, op or name */
  RINGRUN_ERR_INTERNAL = -7
};

int ringrun_init(void);
int ringrun_finalize(void);
int ringrun_rank(void);
int ringrun_size(void);
int ringrun_local_rank(void);
int ringrun_local_size(void);
int ringrun_cross_rank(void);
int ringrun_cross_size(void);
/* The transport collectives on host buffers use: "self" (one rank), "shm" (one host), "tcp", or
 * "shm+tcp" (shared memory within each host, TCP between hosts); NULL before ringrun_init(). */
const char *ringrun_transport_name(void);

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

#ifdef __cplusplus
}
#endif
#endif
