# ringrun-test: np=2,3 timeout=120
"""hvd.join() in ringrun.tensorflow: a rank that runs out of data joins; until every rank has, it
stands in for the allreduces the others still run (zeros for Sum and Average, which still divides
by every rank, as Horovod; the identity of Min, Max and Product), eagerly and in a tf.function, and
every rank's join() returns the rank that joined last. The other collectives cannot be stood in
for: they raise on the ranks that run them, and the job goes on.
"""

import numpy as np
import tensorflow as tf

import ringrun.tensorflow as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()


@tf.function
def fused_step(t):
    return [hvd.allreduce(t, op=hvd.Sum, name='joined.fused.a'), hvd.allreduce(t * 2, op=hvd.Sum, name='joined.fused.b')]


for first in range(N):
    others = [r + 1 for r in range(N) if r != first]
    if R == first:
        last = hvd.join()
    else:
        x = tf.fill([5], float(R + 1))
        assert np.array_equal(hvd.allreduce(x, op=hvd.Sum).numpy(), np.full(5, float(sum(others))))
        assert np.allclose(hvd.allreduce(x).numpy(), np.full(5, sum(others) / N)), 'Average divides by every rank'
        assert np.array_equal(hvd.allreduce(x, op=hvd.Min).numpy(), np.full(5, float(min(others))))
        assert np.array_equal(hvd.allreduce(x, op=hvd.Max).numpy(), np.full(5, float(max(others))))
        product = hvd.allreduce(tf.fill([3], tf.constant(R + 1, tf.int64)), op=hvd.Product)
        assert np.array_equal(product.numpy(), np.full(3, np.prod(others)))
        a, b = fused_step(x)
        assert np.array_equal(a.numpy(), np.full(5, float(sum(others)))) and np.array_equal(b.numpy(), 2 * a.numpy())
        last = hvd.join()
    assert last.dtype == tf.int32 and last.shape == ()
    assert int(last) != first or N == 1, (int(last), first)
    assert hvd.allgather_object(int(last)) == [int(last)] * N, 'join() returns the same rank everywhere'

# An allgather or a broadcast cannot be stood in for: it fails on the ranks that run it.
for first in range(N):
    if R == first:
        hvd.join()
        continue
    for call in (lambda: hvd.allgather(tf.ones([2, 2])), lambda: hvd.broadcast(tf.ones([2]), root_rank=R)):
        try:
            call()
            raise AssertionError('a collective a joined rank cannot stand in for must raise')
        except tf.errors.OpError as e:
            assert 'join' in str(e), e
    hvd.join()
assert np.array_equal(hvd.allreduce(tf.ones([1]), op=hvd.Sum).numpy(), [float(N)])
hvd.barrier()
print(f'rank {R}: join OK')
