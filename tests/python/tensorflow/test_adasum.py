# ringrun-test: np=2,3 timeout=120
"""op=hvd.Adasum in ringrun.tensorflow against a reference: allreduce and
grouped_allreduce (eagerly and in a tf.function, every float dtype), in a process set, with the
scale factors, Horovod's properties (orthogonal tensors sum, equal ones stay), the tape
(DistributedGradientTape(op=Adasum)), Keras optimizers (ringrun.keras.DistributedOptimizer(op=Adasum):
the gradients combined whole, in apply_gradients and in model.fit, as horovod.keras does) and the
delta optimizer (DistributedOptimizer(op=Adasum) of a tf.compat.v1.train.Optimizer, with
backward_passes_per_step); and the refusals (integers, tf.IndexedSlices, a Keras optimizer through
ringrun.tensorflow.DistributedOptimizer, as horovod.tensorflow refuses it).

The reference is ringrun's tree over whole tensors in float64 (tests/python/adasum_reference.py,
shared with ringrun.torch's test_adasum.py).
"""

import math
import os
import sys

import keras
import numpy as np
import tensorflow as tf

import ringrun.keras
import ringrun.tensorflow as hvd
import ringrun.tensorflow.keras as hvd_keras

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/python
from adasum_reference import adasum_vectors  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
LEVELS = max(1, math.ceil(math.log2(N))) + 1
EPS = {tf.float64: 1e-12, tf.float32: 2.0 ** -23, tf.float16: 2.0 ** -10, tf.bfloat16: 2.0 ** -7}


def adasum_tree(tensors):
    """The reference (adasum_reference.py) in float64, in the shape of the inputs."""
    return adasum_vectors([np.asarray(x, np.float64).reshape(-1) for x in tensors]).reshape(np.shape(tensors[0]))


def inputs(shape, seed, ranks=None):
    return [np.random.default_rng(seed * 100 + r).standard_normal(shape) for r in (ranks or range(N))]


def check(got, expected, dtype, what):
    got = np.asarray(tf.cast(got, tf.float64))
    err = float(np.linalg.norm(got - expected)) / max(float(np.linalg.norm(expected)), 1e-300)
    assert err <= 4 * LEVELS * EPS[dtype], f'{what}: relative error {err:.3g}'
    every = hvd.allgather(tf.reshape(tf.constant(got), [1, -1]))
    assert np.array_equal(every.numpy(), np.repeat(every.numpy()[:1], N, 0)), f'{what}: results differ across ranks'


seed = 0
for dtype in (tf.float32, tf.float64, tf.float16, tf.bfloat16):
    for shape in ((1,), (N + 1,), (3, 5, 7), (4099,)):
        seed += 1
        xs = inputs(shape, seed)
        mine = tf.cast(tf.constant(xs[R]), dtype)
        check(hvd.allreduce(mine, op=hvd.Adasum), adasum_tree(xs), dtype, f'allreduce {dtype.name} {shape}')
seed += 1
xs, ys = inputs((6,), seed), inputs((2, 3), seed + 1)
first, second = hvd.grouped_allreduce([tf.constant(xs[R]), tf.constant(ys[R])], op=hvd.Adasum)
check(first, adasum_tree(xs), tf.float64, 'grouped 0')
check(second, adasum_tree(ys), tf.float64, 'grouped 1')
check(tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum))(tf.constant(xs[R], tf.float32)), adasum_tree(xs),
      tf.float32, 'tf.function')
check(hvd.allreduce(tf.constant(xs[R]), op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25),
      adasum_tree([2 * x for x in xs]) * 0.25, tf.float64, 'scaled')
check(hvd.allreduce(tf.constant(xs[R], tf.float32), op=hvd.Adasum, compression=hvd.Compression.fp16),
      adasum_tree([np.float16(x) for x in xs]), tf.float16, 'fp16 compression')

# Horovod's properties: orthogonal tensors add up, equal ones come back unchanged.
check(hvd.allreduce(tf.one_hot(R, N, dtype=tf.float64), op=hvd.Adasum), np.ones(N), tf.float64, 'orthogonal')
check(hvd.allreduce(tf.fill([4], 3.0), op=hvd.Adasum), np.full(4, 3.0), tf.float32, 'equal')

# In a process set (the odd ranks and rank 0 of 3, or rank 0 alone of 2).
members = [0, 1] if N > 2 else [0]
pairs = hvd.add_process_set(members)
if R in members:
    xs = inputs((7,), 99, members)
    got = hvd.allreduce(tf.constant(xs[members.index(R)]), op=hvd.Adasum, process_set=pairs)
    err = np.linalg.norm(got.numpy() - adasum_tree(xs)) / np.linalg.norm(adasum_tree(xs))
    assert err < 1e-12, f'process set: relative error {err}'
hvd.barrier()
hvd.remove_process_set(pairs)

# DistributedGradientTape(op=Adasum): the gradients combined whole.
w = tf.Variable(tf.constant(inputs((5,), 50)[R]))
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(w * w)
grads = hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(loss, [w])
check(grads[0], adasum_tree([2 * x for x in inputs((5,), 50)]), tf.float64, 'tape')

# Keras optimizers (horovod.keras: hvd.Adasum): each gradient combined whole, then applied.
starts = inputs((5,), 70)
kvar = tf.Variable(tf.constant(starts[R]))
kopt = ringrun.keras.DistributedOptimizer(keras.optimizers.SGD(0.5), op=ringrun.keras.Adasum)
kopt.apply_gradients([(tf.constant(2 * starts[R]), kvar)])
step = -0.5 * adasum_tree([2 * x for x in starts])  # each rank's own start: compared, not gathered
assert np.allclose(kvar.numpy() - starts[R], step, rtol=1e-12, atol=1e-12), (kvar.numpy() - starts[R], step)
# ... and in model.fit's compiled step: the kernel moves by the learning rate times the Adasum of
# the ranks' own gradients (which differ: every rank has its own data).
features, targets = inputs((8, 3), 80)[R].astype(np.float32), inputs((8, 1), 81)[R].astype(np.float32)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False, kernel_initializer='ones')])
with tf.GradientTape() as tape:
    loss = keras.losses.MeanSquaredError()(targets, model(features))
own = tape.gradient(loss, model.trainable_variables)[0].numpy().astype(np.float64)
every = hvd.allgather(tf.constant(own[None])).numpy()
model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum), loss='mse',
              jit_compile=False)
model.fit(features, targets, batch_size=8, epochs=1, shuffle=False, verbose=0)
check(model.get_weights()[0] - 1.0, -0.1 * adasum_tree(list(every)), tf.float32, 'keras model.fit')

# The delta optimizer: local SGD steps, then start + Adasum of the ranks' changes since the start.
starts = inputs((4,), 60)
var = tf.Variable(tf.constant(starts[R]))
opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), op=hvd.Adasum,
                               backward_passes_per_step=2)
grad_of = [np.full(4, float(r + 1)) * np.arange(1, 5) ** r for r in range(N)]  # not parallel across ranks
opt.apply_gradients([(tf.constant(grad_of[R]), var)])
assert np.allclose(var.numpy(), starts[R] - 0.5 * grad_of[R], rtol=1e-12), 'delta optimizer: this rank\'s own local step'
opt.apply_gradients([(tf.constant(grad_of[R]), var)])  # the second pass: the changes are combined
combined = adasum_tree([-1.0 * g for g in grad_of])
assert np.allclose(var.numpy() - starts[R], combined, rtol=1e-12, atol=1e-12), (var.numpy() - starts[R], combined)

# The refusals, as Horovod's.
for call, kind, word in (
        (lambda: hvd.allreduce(tf.ones([2], tf.int32), op=hvd.Adasum), NotImplementedError, 'floating-point'),
        (lambda: hvd.allreduce(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0])), op=hvd.Adasum),
         NotImplementedError, 'sparse_as_dense'),
        (lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Adasum), ValueError, 'ringrun.tensorflow.keras'),
        (lambda: hvd.reducescatter(tf.ones([N]), op=hvd.Adasum), ValueError, 'Average or Sum')):
    try:
        call()
        raise AssertionError(f'expected {kind.__name__}')
    except kind as e:
        assert word in str(e), e
hvd.barrier()
print(f'rank {R}: adasum OK')
