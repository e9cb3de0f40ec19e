# ringrun-test: np=2,3 timeout=120
"""Misuse of ringrun.tensorflow: the error, its type and its message, on every rank that made it,
and a job that goes on afterwards. Collectives whose ranks disagree (element count, dtype, the
dimensions after the first, the root) raise FailedPreconditionError on every rank (eagerly and in a
tf.function); a bad root, bad splits, a duplicate pending name or an op of a process set this rank
is not in InvalidArgumentError; what Horovod refuses too (Adasum of integers, or with a Keras
optimizer through hvd.DistributedOptimizer) and the one option ringrun does not have (init(comm=...)) their errors. Also the
one-line reason the import gives when the op library and TensorFlow do not match.
"""

import time

import keras
import numpy as np
import tensorflow as tf

import ringrun.tensorflow as hvd
import ringrun.tensorflow.keras as hvd_keras
from ringrun import tensorflow_build


def raises(kind, words, fn):
    try:
        fn()
    except kind as e:
        for word in words:
            assert word in str(e), (f'{kind.__name__} without "{word}"', str(e))
        return
    raise AssertionError(f'expected {kind.__name__} containing {words}')


# Before init(): a one-line precondition error naming the fix.
raises(tf.errors.FailedPreconditionError, ['ringrun.tensorflow.init()'], lambda: hvd.allreduce(tf.ones([2])))
hvd.init()
R, N = hvd.rank(), hvd.size()
mismatch = tf.errors.FailedPreconditionError

# Ranks that disagree: every rank raises, naming what each rank sent.
raises(mismatch, ['ranks disagree', '[3]', f'[{2 + N}]'], lambda: hvd.allreduce(tf.ones([3 if R == 0 else 2 + N])))
raises(mismatch, ['int32', 'float32'], lambda: hvd.allreduce(tf.ones([4], tf.int32 if R == 0 else tf.float32)))
raises(mismatch, ['ranks disagree', '[2, 3]', '[2, 4]'],
       lambda: hvd.allgather(tf.ones([2, 3 if R == 0 else 4])))
raises(mismatch, ['int32', 'float'], lambda: hvd.allgather(tf.ones([2], tf.int32 if R == 0 else tf.float32)))
raises(mismatch, ['from root 0', 'from root 1'], lambda: hvd.broadcast(tf.ones([3]), 0 if R == 0 else 1))
raises(mismatch, ['int32', 'float'], lambda: hvd.alltoall(tf.ones([N], tf.int32 if R == 0 else tf.float32)))
raises(mismatch, ['ranks disagree', f'[{N}, 2]', f'[{N}, 1]'], lambda: hvd.alltoall(tf.ones([N, 1 + (R == 0)])))
raises(mismatch, ['ranks disagree'], lambda: hvd.reducescatter(tf.ones([N + (R == 0), 2])))
# The same number of elements in other shapes: the engine compares the shapes the kernels pass.
raises(mismatch, ['[2, 3]', '[3, 2]'], lambda: hvd.allreduce(tf.ones([2, 3] if R == 0 else [3, 2])))
raises(mismatch, ['[4, 3]', '[4, 1, 3]'], lambda: hvd.reducescatter(tf.ones([4, 3] if R == 0 else [4, 1, 3])))


@tf.function
def in_a_function(t):
    return hvd.allreduce(t, op=hvd.Sum)


raises(mismatch, ['ranks disagree'], lambda: in_a_function(tf.ones([5 + (R == 0)])))

# Bad arguments: every rank that passes them.
raises(tf.errors.InvalidArgumentError, ['root 7 is not a rank'], lambda: hvd.broadcast(tf.ones([2]), 7))
raises(tf.errors.InvalidArgumentError, ['divide evenly'], lambda: hvd.alltoall(tf.ones([N + 1])))
raises(tf.errors.InvalidArgumentError, ['add up to'], lambda: hvd.alltoall(tf.ones([N]), splits=[2] * N))
raises(tf.errors.InvalidArgumentError, ['negative'], lambda: hvd.alltoall(tf.ones([N]), splits=[-1] + [1] * (N - 1)))
raises(tf.errors.InvalidArgumentError, ['one row count per rank'], lambda: hvd.alltoall(tf.ones([N]), splits=[1]))
raises(tf.errors.InvalidArgumentError, ['scalar'], lambda: hvd.reducescatter(tf.constant(1.0)))
raises(ValueError, ['rank'], lambda: tf.function(lambda t: hvd.allgather(t)).get_concrete_function(
    tf.TensorSpec([], tf.float32)))


# A name still pending: rank 0 submits 'dup' twice while the others have not submitted it yet.
@tf.function
def twice_the_same_name():
    with tf.name_scope('first'):
        a = hvd.allreduce(tf.ones([2]), name='dup', ignore_name_scope=True)
    with tf.name_scope('second'):
        b = hvd.allreduce(tf.ones([2]) * 2, name='dup', ignore_name_scope=True)
    return a, b


@tf.function
def once():
    return hvd.allreduce(tf.ones([2]), name='dup')


if R == 0:
    raises(tf.errors.InvalidArgumentError, ["'dup'"], twice_the_same_name)
else:
    time.sleep(1.0)
    once()
hvd.barrier()

# Process sets: a rank outside the set that runs one of its ops gets InvalidArgumentError; the
# members get the reduction (test_process_sets.py checks every op).
other = hvd.add_process_set([0])
if R == 0:
    assert np.array_equal(hvd.allreduce(tf.ones([2]), op=hvd.Sum, process_set=other).numpy(), [1.0, 1.0])
    assert np.array_equal(hvd.allgather(tf.ones([2]), process_set=other).numpy(), [1.0, 1.0])
else:
    raises(tf.errors.InvalidArgumentError, ['not in'], lambda: hvd.allreduce(tf.ones([2]), process_set=other))
    raises(ValueError, ['root_rank 1 is not in'], lambda: hvd.broadcast(tf.ones([2]), 1, process_set=other))
hvd.DistributedGradientTape(tf.GradientTape(), process_set=other)  # accepted on every rank
hvd.remove_process_set(other)
raises(ValueError, ['add_process_set'], lambda: hvd.allreduce(tf.ones([2]), process_set=other))
# Horovod's option that ringrun does not have: running inside an MPI program.
raises(NotImplementedError, ['MPI communicator'], lambda: hvd.init(comm=[0, 1]))
# Adasum combines floating-point tensors (equal ones stay as they are: test_adasum.py checks the
# arithmetic); integers are refused, and Keras optimizers through hvd.DistributedOptimizer, as in
# horovod.tensorflow (the Keras module's DistributedOptimizer takes it: test_adasum.py).
assert np.allclose(hvd.allreduce(tf.fill([3], 2.0), op=hvd.Adasum).numpy(), 2.0)
raises(NotImplementedError, ['Adasum', 'int32', 'cast'], lambda: hvd.allreduce(tf.ones([2], tf.int32), op=hvd.Adasum))
raises(ValueError, ['Adasum', 'Keras'], lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Adasum))
raises(NotImplementedError, ['Adasum', 'sparse_as_dense'],
       lambda: hvd.allreduce(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0])), op=hvd.Adasum))
# The timeline starts at run time (test_timeline.py writes one); a file name is required.
raises(ValueError, ['file_path'], lambda: hvd.start_timeline(''))
slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]))
raises(NotImplementedError, ['Sum and Average'], lambda: hvd.allreduce(slices, op=hvd.Max))
raises(NotImplementedError, ['prescale'], lambda: hvd.allreduce(slices, op=hvd.Sum, prescale_factor=2.0))
raises(RuntimeError, ['broadcast_variables'], lambda: hvd.broadcast_global_variables(0))
raises(ValueError, ['Average, Sum or Adasum'], lambda: hvd_keras.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Min))
raises(ValueError, ['op=Average'], lambda: hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum,
                                                                       gradient_predivide_factor=2.0))
raises(ValueError, ['groups'], lambda: hvd.DistributedGradientTape(tf.GradientTape(), groups=-1))
raises(ValueError, ['backward_passes_per_step'],
       lambda: hvd_keras.DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=0))
raises(ValueError, ['op must be Average or Sum'], lambda: hvd.reducescatter(tf.ones([N]), op=hvd.Max))
xla_opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1))
xla_var = tf.Variable([1.0])
raises(ValueError, ['jit_compile=False'], lambda: tf.function(
    lambda: xla_opt.apply_gradients([(tf.ones([1]), xla_var)]), jit_compile=True)())

# The import's one line when the op library and TensorFlow do not match.
assert tensorflow_build.mismatch('2.21.0', '2.21.0') is None
assert 'built for TensorFlow 2.21.0 but this Python has TensorFlow 2.20.0' in tensorflow_build.mismatch('2.21.0', '2.20.0')
assert 'pip install tensorflow==2.21.0' in tensorflow_build.mismatch('2.21.0', '2.20.0')
assert 'no TensorFlow op library' in tensorflow_build.mismatch(None, '2.21.0')
assert tensorflow_build.status() == f'ringrun.tensorflow: built for TensorFlow {tf.__version__}', tensorflow_build.status()

# The job goes on.
assert np.allclose(hvd.allreduce(tf.ones([3]), op=hvd.Sum).numpy(), N)
hvd.barrier()
print(f'rank {R}: errors OK')
