# ringrun-test: np=2,3 timeout=120
"""Process sets in ringrun.tensorflow: every collective, its gradient, the queries and the
distributed tape and optimizers on a subset of the ranks, checked against numpy references, while
the ranks outside the set run their own ops. With 3 ranks the sets are {0, 2} and {1} (a set of
one, and one that skips a rank, so set index and global rank differ); with 2 ranks {1} and {0}.
Also a set registered by init(process_sets=...) with its ranks unsorted, and removal.
"""

import os

import keras
import numpy as np
import tensorflow as tf

import ringrun.tensorflow as hvd
import ringrun.tensorflow.keras as hvd_keras

SIZE = int(os.environ['RINGRUN_SIZE'])
outer = hvd.ProcessSet([2, 0] if SIZE > 2 else [1])  # registered by init(), its ranks unsorted on purpose
hvd.init(process_sets=[outer])
R, N = hvd.rank(), hvd.size()
assert N >= 2, 'run with at least 2 ranks'
inner = hvd.add_process_set([1] if N > 2 else [0])
MINE = outer if R in outer.ranks else inner
MEMBERS = MINE.ranks
ME = MEMBERS.index(R)


def tensor_of(rank, shape, dtype=tf.float32):
    values = np.random.default_rng(7 + rank).integers(0, 10, size=shape)
    return tf.cast(tf.constant(values), dtype)


def close(actual, expected, what, tol=0.0):
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f'{what}: shape {a.shape}, expected {e.shape}'
    diff = float(np.max(np.abs(a - e))) if a.size else 0.0
    assert diff <= tol, f'{what} (rank {R}, set {MEMBERS}): differs by {diff}\n{a}\n{e}'


# The queries: the ProcessSet's, and the ops with Horovod's process_set_id argument.
assert outer.ranks == ([0, 2] if N > 2 else [1]) and MINE.included() and MINE.size() == len(MEMBERS)
assert MINE.rank() == ME
assert int(hvd.size_op(process_set_id=MINE.process_set_id)) == len(MEMBERS)
assert int(hvd.size_op()) == N
assert int(hvd.process_set_included_op(MINE.process_set_id)) == 1
other = inner if MINE is outer else outer
assert int(hvd.process_set_included_op(other.process_set_id)) == 0
try:
    hvd.process_set_included_op(987)
    raise AssertionError('an unknown process set id must raise')
except tf.errors.InvalidArgumentError as e:
    assert '987' in str(e), e

# allreduce (every op), grouped allreduce, Average divides by the set's size.
x = tensor_of(R, [3, 4])
total = sum(tensor_of(r, [3, 4]) for r in MEMBERS)
close(hvd.allreduce(x, op=hvd.Sum, process_set=MINE), total, 'allreduce sum')
close(hvd.allreduce(x, process_set=MINE), total / len(MEMBERS), 'allreduce average', 1e-6)
close(hvd.allreduce(x, op=hvd.Max, process_set=MINE), np.max([tensor_of(r, [3, 4]) for r in MEMBERS], 0), 'max')
close(hvd.allreduce(x, op=hvd.Sum, process_set=MINE, prescale_factor=2.0, postscale_factor=0.5), total, 'scaled')
ints = tensor_of(R, [5], tf.int32)
close(hvd.allreduce(ints, op=hvd.Average, postscale_factor=2.0, process_set=MINE),
      np.trunc(sum(tensor_of(r, [5], tf.int64) for r in MEMBERS).numpy() * (2.0 / len(MEMBERS))),
      'integer average with postscale: one factor postscale / size, as Horovod')
group = hvd.grouped_allreduce([x, x * 2], op=hvd.Sum, process_set=MINE)
close(group[1], total * 2, 'grouped allreduce')

# allgather (first dimensions differ per rank), grouped allgather, broadcast from every member
# (roots are global ranks), alltoall with splits, reducescatter, barrier.
rows = {r: r + 1 for r in MEMBERS}
close(hvd.allgather(tensor_of(R, [rows[R], 2]), process_set=MINE),
      tf.concat([tensor_of(r, [rows[r], 2]) for r in MEMBERS], 0), 'allgather')
parts = hvd.grouped_allgather([tensor_of(R, [1]), tensor_of(R, [2, 2])], process_set=MINE)
close(parts[1], tf.concat([tensor_of(r, [2, 2]) for r in MEMBERS], 0), 'grouped allgather')
for root in MEMBERS:
    close(hvd.broadcast(tensor_of(R, [4]), root, process_set=MINE), tensor_of(root, [4]), f'broadcast from {root}')
try:
    hvd.broadcast(x, [r for r in range(N) if r not in MEMBERS][0], process_set=MINE)
    raise AssertionError('a root outside the set must raise')
except ValueError as e:
    assert 'not in ProcessSet' in str(e), e
sent = {r: tf.reshape(tf.range(2 * sum(i + 1 for i in range(len(MEMBERS)))) + 100 * r, [-1, 2]) for r in MEMBERS}
splits = list(range(1, len(MEMBERS) + 1))  # member i sends i + 1 rows to member i
received, counts = hvd.alltoall(sent[R], splits=splits, process_set=MINE)
start = sum(splits[:ME])
close(received, tf.concat([sent[r][start:start + splits[ME]] for r in MEMBERS], 0), 'alltoall')
close(counts, [splits[ME]] * len(MEMBERS), 'alltoall received splits')
whole = {r: tensor_of(r, [2 * len(MEMBERS) + 1, 3]) for r in MEMBERS}
n_rows = 2 * len(MEMBERS) + 1
first = ME * (n_rows // len(MEMBERS)) + min(ME, n_rows % len(MEMBERS))
mine = n_rows // len(MEMBERS) + (1 if ME < n_rows % len(MEMBERS) else 0)
close(hvd.reducescatter(whole[R], op=hvd.Sum, process_set=MINE), sum(whole.values())[first:first + mine],
      'reducescatter')
hvd.barrier(process_set=MINE)

# Gradients stay in the set: allreduce Sum (x size of the set), broadcast (the root's only).
v = tf.Variable(tensor_of(R, [len(MEMBERS) * 2, 2]))
with tf.GradientTape(persistent=True) as tape:
    summed = hvd.allreduce(v, op=hvd.Sum, process_set=MINE)
    rooted = hvd.broadcast(v, MEMBERS[-1], process_set=MINE)
    gathered = hvd.allgather(v, process_set=MINE)
close(tape.gradient(summed, v), tf.fill(v.shape, float(len(MEMBERS))), 'allreduce gradient')
close(tape.gradient(rooted, v), tf.fill(v.shape, 1.0 if R == MEMBERS[-1] else 0.0), 'broadcast gradient')
close(tape.gradient(gathered, v), tf.ones(v.shape), 'allgather gradient')


# In a tf.function, both sets' ops traced by every rank but run by the members only.
@tf.function
def step(t):
    return hvd.allreduce(t, op=hvd.Sum, process_set=MINE), hvd.allgather(t, process_set=MINE)


s, g = step(x)
close(s, total, 'tf.function allreduce')
close(g, tf.concat([tensor_of(r, [3, 4]) for r in MEMBERS], 0), 'tf.function allgather')

# The tape, the Keras optimizer, broadcast_variables and broadcast_object with a process set.
w = tf.Variable(tf.fill([3], float(R + 1)))
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(w * w)
tape = hvd.DistributedGradientTape(tape, process_set=MINE)
close(tape.gradient(loss, [w])[0], tf.fill([3], 2.0 * sum(r + 1 for r in MEMBERS) / len(MEMBERS)), 'tape average')
model_w = keras.Variable(np.full([2], float(R + 1), np.float32))
opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0), process_set=MINE)
opt.apply_gradients([(tf.fill([2], float(R)), model_w)])
close(model_w.numpy(), np.full([2], R + 1 - sum(MEMBERS) / len(MEMBERS)), 'Keras optimizer step')
hvd.broadcast_variables([w], root_rank=MEMBERS[0], process_set=MINE)
close(w, tf.fill([3], float(MEMBERS[0] + 1)), 'broadcast_variables')
assert hvd.broadcast_object(R, root_rank=MEMBERS[-1], process_set=MINE) == MEMBERS[-1]
assert hvd.allgather_object(R, process_set=MINE) == MEMBERS

# An op on a set this rank is not in, or on one never registered, raises.
try:
    hvd.allreduce(x, process_set=other)
    raise AssertionError('an op on a set without this rank must raise')
except tf.errors.InvalidArgumentError as e:
    assert 'process set' in str(e), e
try:
    hvd.allreduce(x, process_set=hvd.ProcessSet([0]))
    raise AssertionError('an unregistered set must raise')
except ValueError as e:
    assert 'not registered' in str(e), e

# Removal is collective; the world's ops go on.
hvd.barrier()
assert hvd.remove_process_set(outer) and hvd.remove_process_set(inner)
close(hvd.allreduce(tf.ones([2]), op=hvd.Sum), [N, N], 'global allreduce after removal')
hvd.barrier()
print(f'rank {R}: process sets OK')
