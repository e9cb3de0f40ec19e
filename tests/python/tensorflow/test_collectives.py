# ringrun-test: np=2,3 timeout=150
"""ringrun.tensorflow's collectives against numpy references, eagerly, in a tf.function and in a
TensorFlow 1 graph: allreduce (every op and dtype, prescale/postscale, fp16 compression,
tf.IndexedSlices), grouped allreduce, allgather with per-rank first dimensions, grouped allgather,
broadcast (every root) and broadcast_ on variables, alltoall (splits, empty tensors, rows without
elements, zero splits), reducescatter (uneven, scaled), grouped reducescatter, join, barrier, the
query ops, object broadcasts, and the gradients of each op as Horovod defines them.

Every rank can compute every rank's input (tensor_of(rank)), so each checks the exact result.
"""

import numpy as np
import tensorflow as tf

import ringrun.tensorflow as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
NUMERIC = [tf.uint8, tf.int8, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64]
INTEGER = [tf.uint8, tf.int8, tf.int16, tf.int32, tf.int64]


def tensor_of(rank, shape, dtype, low=0, high=10):
    values = np.random.default_rng(100 + rank).integers(low, high, size=shape)
    return tf.cast(tf.constant(values), dtype)


def close(actual, expected, what, tol=0.0):
    a = np.asarray(tf.cast(actual, tf.float64) if tf.is_tensor(actual) else actual, dtype=np.float64)
    e = np.asarray(tf.cast(expected, tf.float64) if tf.is_tensor(expected) else expected, dtype=np.float64)
    assert a.shape == e.shape, f'{what}: shape {a.shape}, expected {e.shape}'
    diff = float(np.max(np.abs(a - e))) if a.size else 0.0
    assert diff <= tol, f'{what}: differs by {diff} (tolerance {tol})\n{a}\n{e}'


# The queries, and the same as ops.
assert (hvd.rank_op().numpy(), hvd.size_op().numpy()) == (R, N)
assert (hvd.local_rank_op().numpy(), hvd.local_size_op().numpy()) == (hvd.local_rank(), hvd.local_size())
assert hvd.process_set_included_op().numpy() == 1 and hvd.is_initialized() and hvd.is_homogeneous()
assert not any(f() for f in (hvd.mpi_built, hvd.gloo_built, hvd.cuda_built, hvd.rocm_built, hvd.ccl_built,
                             hvd.ddl_built, hvd.mpi_enabled, hvd.gloo_enabled, hvd.mpi_threads_supported))
assert hvd.nccl_built() == 0

# allreduce: every dtype and op, eagerly.
REDUCE = {hvd.Sum: np.sum, hvd.Min: np.min, hvd.Max: np.max, hvd.Product: np.prod}
for dtype in NUMERIC:
    for op, reduce in REDUCE.items():
        high = 3 if op == hvd.Product else 10
        inputs = [tensor_of(r, [3, 4], dtype, 1, high) for r in range(N)]
        expected = tf.cast(reduce(np.stack([t.numpy().astype(np.float64) for t in inputs]), axis=0), dtype)
        result = hvd.allreduce(inputs[R], op=op)
        assert result.dtype == dtype
        close(result, expected, f'allreduce {dtype.name} op {op}', 0.5 if dtype == tf.bfloat16 else 0.0)
    if dtype.is_floating:
        mean = sum(tf.cast(tensor_of(r, [5], dtype), tf.float64) for r in range(N)) / N
        close(hvd.allreduce(tensor_of(R, [5], dtype)), mean, f'allreduce average {dtype.name}', 0.05)
        close(hvd.allreduce(tensor_of(R, [5], dtype), average=True), mean, 'average=True', 0.05)
close(hvd.allreduce(tf.constant([True, False, False]) if R == 0 else tf.constant([False, False, True]), op=hvd.Sum),
      [1, 0, 1 if N > 1 else 0], 'bool sum is logical or')

# prescale and postscale: integers scaled in float64 then truncated, floats in their own type.
for dtype in [tf.int32, tf.int64, tf.uint8, tf.float16, tf.float32, tf.float64]:
    x = tensor_of(R, [7], dtype)
    scaled = [tf.cast(tf.cast(tensor_of(r, [7], dtype), tf.float64) * 0.25, dtype) for r in range(N)]
    close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.25), sum(tf.cast(s, tf.float64) for s in scaled),
          f'prescale {dtype.name}', 0.01 * N)
    total = sum(tf.cast(tensor_of(r, [7], dtype), tf.float64) for r in range(N))
    close(hvd.allreduce(x, op=hvd.Sum, postscale_factor=0.5), tf.cast(tf.cast(total * 0.5, dtype), tf.float64),
          f'postscale {dtype.name}', 0.01 * N)

# fp16 compression: sent as float16, returned in the input's dtype.
x = tensor_of(R, [6], tf.float64)
reduced = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
assert reduced.dtype == tf.float64
close(reduced, sum(tensor_of(r, [6], tf.float64) for r in range(N)), 'fp16 compression')
for dtype in [tf.int32, tf.bool]:
    compressed, ctx = hvd.Compression.fp16.compress(tf.ones([2], dtype))
    assert compressed.dtype == dtype and hvd.Compression.fp16.decompress(compressed, ctx).dtype == dtype

# tf.IndexedSlices: allgathered values and indices (Sum and Average).
slices = tf.IndexedSlices(tf.fill([1, 3], float(R + 1)), tf.constant([R]), dense_shape=tf.constant([N, 3]))
summed = hvd.allreduce(slices, op=hvd.Sum)
close(summed.indices, list(range(N)), 'IndexedSlices indices')
close(summed.values, [[r + 1.0] * 3 for r in range(N)], 'IndexedSlices sum')
close(hvd.allreduce(slices).values, [[(r + 1.0) / N] * 3 for r in range(N)], 'IndexedSlices average', 1e-6)

# grouped_allreduce: dense and IndexedSlices mixed, in order.
group = [tensor_of(R, [4], tf.float32), slices, tensor_of(R, [2, 2], tf.float32)]
out = hvd.grouped_allreduce(group, op=hvd.Sum)
close(out[0], sum(tensor_of(r, [4], tf.float32) for r in range(N)), 'grouped dense 0')
close(out[2], sum(tensor_of(r, [2, 2], tf.float32) for r in range(N)), 'grouped dense 2')
close(out[1].values, summed.values, 'grouped slices')
assert hvd.grouped_allreduce([]) == []


# In a tf.function: several collectives at once (fused by the engine), and their gradients.
@tf.function
def fused(a, b, c):
    return [hvd.allreduce(a, op=hvd.Sum), hvd.allreduce(b, op=hvd.Max), hvd.allgather(c), hvd.broadcast(a, N - 1)]


a, b, c = tensor_of(R, [8], tf.float32), tensor_of(R, [3, 3], tf.int32), tensor_of(R, [R + 1, 2], tf.float64)
s, m, g, br = fused(a, b, c)
close(s, sum(tensor_of(r, [8], tf.float32) for r in range(N)), 'tf.function sum')
close(m, np.max([tensor_of(r, [3, 3], tf.int32).numpy() for r in range(N)], axis=0), 'tf.function max')
close(g, tf.concat([tensor_of(r, [r + 1, 2], tf.float64) for r in range(N)], 0), 'tf.function allgather')
close(br, tensor_of(N - 1, [8], tf.float32), 'tf.function broadcast')

# allgather: per-rank first dimensions, every dtype that moves, empty ranks.
for dtype in NUMERIC + [tf.uint16, tf.uint32, tf.uint64, tf.bool]:
    rows = [r % 3 for r in range(N)]  # rank 0 sends nothing
    close(hvd.allgather(tensor_of(R, [rows[R], 2, 3], dtype, 0, 2)),
          tf.concat([tensor_of(r, [rows[r], 2, 3], dtype, 0, 2) for r in range(N)], 0), f'allgather {dtype.name}')
outs = hvd.grouped_allgather([tensor_of(R, [R + 1], tf.float32), tensor_of(R, [2, 2], tf.float32)])  # one dtype
close(outs[0], tf.concat([tensor_of(r, [r + 1], tf.float32) for r in range(N)], 0), 'grouped_allgather 0')
close(outs[1], tf.concat([tensor_of(r, [2, 2], tf.float32) for r in range(N)], 0), 'grouped_allgather 1')

# broadcast: every root and dtype; broadcast_ overwrites variables.
for root in range(N):
    for dtype in [tf.uint8, tf.int32, tf.float16, tf.float64, tf.bool]:
        close(hvd.broadcast(tensor_of(R, [2, 3], dtype, 0, 2), root), tensor_of(root, [2, 3], dtype, 0, 2),
              f'broadcast {dtype.name} from {root}')
variables = [tf.Variable(tensor_of(R, [3], tf.float32)), tf.Variable(tensor_of(R, [2, 2], tf.int64))]
values = hvd.broadcast_(variables, root_rank=N - 1)
for var, value, shape, dtype in zip(variables, values, ([3], [2, 2]), (tf.float32, tf.int64)):
    close(var, tensor_of(N - 1, shape, dtype), 'broadcast_ variable')
    close(value, tensor_of(N - 1, shape, dtype), 'broadcast_ value')
variables[0].assign(tensor_of(R, [3], tf.float32))
hvd.broadcast_variables(variables, root_rank=0)
close(variables[0], tensor_of(0, [3], tf.float32), 'broadcast_variables')

# alltoall: explicit splits (rank r sends r + j rows to rank j), even splits, empty tensors.
splits = [R + j for j in range(N)]
sent = [tf.reshape(tf.range(sum(r + j for j in range(N)) * 2) + 1000 * r, [-1, 2]) for r in range(N)]
output, received = hvd.alltoall(sent[R], splits=splits)
expected = [sent[r][sum(r + j for j in range(R)):sum(r + j for j in range(R + 1))] for r in range(N)]
close(output, tf.concat(expected, 0), 'alltoall with splits')
close(received, [r + R for r in range(N)], 'alltoall received splits')
close(hvd.alltoall(tf.range(2 * N) + 10 * R), tf.concat([tf.range(2 * R, 2 * R + 2) + 10 * r for r in range(N)], 0),
      'alltoall even splits')
assert hvd.alltoall(tf.zeros([0, 3])).shape == (0, 3), 'alltoall of an empty tensor'
# Rows of no elements (Horovod's empty alltoall): no data, but the rows are still counted.
output, received = hvd.alltoall(tf.zeros([N, 0], tf.int8), splits=[1] * N)
assert output.shape == (N, 0) and output.dtype == tf.int8, output
close(received, [1] * N, 'alltoall of rows without elements: received splits')
assert hvd.allgather(tf.zeros([R + 1, 2, 0])).shape == (N * (N + 1) // 2, 2, 0), 'allgather of rows without elements'
zero = [0 if j == 0 else 1 for j in range(N)]  # nobody sends to rank 0
output, received = hvd.alltoall(tf.ones([N - 1, 2]) * R, splits=zero)
close(received, [0 if R == 0 else 1] * N, 'alltoall zero splits')

# reducescatter: uneven rows (the first rows % N ranks one more), Sum and Average, scaled.
rows = 2 * N + 1
whole = [tensor_of(r, [rows, 2], tf.float32) for r in range(N)]
first = R * (rows // N) + min(R, rows % N)
mine = rows // N + (1 if R < rows % N else 0)
close(hvd.reducescatter(whole[R], op=hvd.Sum), sum(whole)[first:first + mine], 'reducescatter sum')
close(hvd.reducescatter(whole[R]), (sum(whole) / N)[first:first + mine], 'reducescatter average', 1e-6)
close(hvd.reducescatter(whole[R], op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5),
      sum(whole)[first:first + mine], 'reducescatter scaled')
shares = hvd.grouped_reducescatter([whole[R], whole[R] * 2], op=hvd.Sum)
close(shares[1], 2 * sum(whole)[first:first + mine], 'grouped_reducescatter')

# The gradients, as Horovod defines them (checked against the closed forms).
x = tf.Variable(tensor_of(R, [2 * N, 2], tf.float32))
with tf.GradientTape(persistent=True) as tape:
    summed = hvd.allreduce(x, op=hvd.Sum)
    averaged = hvd.allreduce(x)
    gathered = hvd.allgather(x)
    from_root = hvd.broadcast(x, 0)
    exchanged = hvd.alltoall(x)
    share = hvd.reducescatter(x, op=hvd.Sum)
close(tape.gradient(summed, x), tf.fill([2 * N, 2], float(N)), 'allreduce sum gradient')
close(tape.gradient(averaged, x), tf.ones([2 * N, 2]), 'allreduce average gradient')
close(tape.gradient(gathered, x), tf.ones([2 * N, 2]), 'allgather gradient (averaged, own rows)')
close(tape.gradient(from_root, x), tf.ones([2 * N, 2]) * (1.0 if R == 0 else 0.0), 'broadcast gradient')
close(tape.gradient(exchanged, x), tf.ones([2 * N, 2]), 'alltoall gradient')
close(tape.gradient(share, x), tf.fill([2 * N, 2], float(N)), 'reducescatter gradient')
w = tf.Variable(tf.ones([3]) * (R + 1))
with tf.GradientTape() as tape:
    y = hvd.grouped_allreduce([w * 2.0, w * 3.0], op=hvd.Sum)
close(tape.gradient(y, w), tf.fill([3], 5.0 * N), 'grouped_allreduce gradient')

# join, barrier, objects.
assert 0 <= int(hvd.join()) < N
hvd.barrier()
assert hvd.broadcast_object({'rank': R} if R == 1 % N else None, root_rank=1 % N) == {'rank': 1 % N}
assert hvd.allgather_object({'r': R, 'pad': 'x' * R}) == [{'r': r, 'pad': 'x' * r} for r in range(N)]

# A TensorFlow 1 graph run by a session: the node names key the ops.
with tf.Graph().as_default():
    rows = tf.compat.v1.placeholder(tf.float32, [None])
    fixed = tf.compat.v1.placeholder(tf.float32, [3])
    ops = [hvd.allreduce(fixed, op=hvd.Sum), hvd.allgather(rows), hvd.broadcast(fixed, N - 1)]
    with tf.compat.v1.Session() as session:
        for step in range(2):
            s, g, b = session.run(ops, feed_dict={rows: np.full([R + 1], R + step, np.float32),
                                                  fixed: np.full([3], R + step, np.float32)})
            close(s, np.full([3], sum(r + step for r in range(N))), 'graph allreduce')
            close(g, np.concatenate([np.full([r + 1], r + step) for r in range(N)]), 'graph allgather')
            close(b, np.full([3], N - 1 + step), 'graph broadcast')
hvd.barrier()
print(f'rank {R}: collectives OK')
