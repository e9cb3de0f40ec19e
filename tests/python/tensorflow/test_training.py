# ringrun-test: np=2,3 timeout=180
"""Training on N ranks equals one process trained on the global batch: a Keras 3 model through
ringrun.keras.DistributedOptimizer and model.fit (each rank starting from its own initial weights,
fixed by BroadcastGlobalVariablesCallback), a custom loop through DistributedGradientTape in a
tf.function, gradient aggregation (backward_passes_per_step), groups, fp16 compression, local
variables, a tf.compat.v1 optimizer in a TensorFlow 1 graph, SyncBatchNormalization, the callbacks
(MetricAverageCallback, LearningRateWarmupCallback) and load_model.

Every rank builds the global batch from one seed; a reference model on every rank trains on all of
it, the distributed one on its rows.
"""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

import ringrun.keras as hvd_keras
import ringrun.tensorflow as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
B, STEPS = 4, 3  # rows per rank and step, steps per epoch


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation='tanh'), keras.layers.Dense(3)])


def global_data(seed=0, steps=STEPS):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(steps * N * B, 5)).astype('float32'),
            rng.normal(size=(steps * N * B, 3)).astype('float32'))


def rows_of_rank(a, steps=STEPS):
    return np.concatenate([a[(s * N + R) * B:(s * N + R + 1) * B] for s in range(steps)])


def assert_close(model, ref, tol, what):
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(model.get_weights(), ref.get_weights()))
    assert diff <= tol, f'{what}: differs from the global-batch reference by {diff}'
    every = hvd.allgather_object([w.tolist() for w in model.get_weights()], name='check.' + what)
    assert all(e == every[0] for e in every), f'{what}: weights differ across ranks'


x, y = global_data()

# model.fit with DistributedOptimizer(Adam): the same weights as Adam on the global batch.
ref = make_model(1)
ref.compile(optimizer=keras.optimizers.Adam(0.01), loss='mse')
ref.fit(x, y, batch_size=N * B, shuffle=False, epochs=2, verbose=0)
model = make_model(1 + R)  # its own start on each rank
model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss='mse')
history = model.fit(rows_of_rank(x), rows_of_rank(y), batch_size=B, shuffle=False, epochs=2, verbose=0,
                    callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd_keras.callbacks.MetricAverageCallback()])
assert_close(model, ref, 1e-5, 'fit with DistributedOptimizer')
losses = hvd.allgather_object(history.history['loss'])
assert all(np.allclose(l, losses[0]) for l in losses), ('MetricAverageCallback: the same loss on every rank', losses)

# load_model: the optimizer comes back distributed, with its state.
path = os.path.join(tempfile.mkdtemp(prefix=f'ringrun-tf-{R}-'), 'model.keras')
model.save(path)
loaded = hvd_keras.load_model(path)
assert type(loaded.optimizer).__name__ == 'Adam' and hasattr(loaded.optimizer, 'register_local_var'), \
    type(loaded.optimizer).__mro__
assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations) == 2 * STEPS
os.remove(path)
os.rmdir(os.path.dirname(path))

# A custom loop: DistributedGradientTape in a tf.function, SGD with momentum.
ref, model = make_model(2), make_model(2)
ref_opt, opt = keras.optimizers.SGD(0.1, momentum=0.9), keras.optimizers.SGD(0.1, momentum=0.9)


@tf.function
def distributed_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for s in range(STEPS):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(ref(x[s * N * B:(s + 1) * N * B]) - y[s * N * B:(s + 1) * N * B]))
    ref_opt.apply_gradients(zip(tape.gradient(loss, ref.trainable_variables), ref.trainable_variables))
    distributed_step(x[(s * N + R) * B:(s * N + R + 1) * B], y[(s * N + R) * B:(s * N + R + 1) * B])
assert_close(model, ref, 1e-5, 'DistributedGradientTape in a tf.function')


def train_distributed(optimizer, steps=STEPS, data=None, seed=3):
    model = make_model(seed)
    model.compile(optimizer=optimizer, loss='mse')
    xs, ys = data if data is not None else (x, y)
    model.fit(rows_of_rank(xs, steps), rows_of_rank(ys, steps), batch_size=B, shuffle=False, epochs=1, verbose=0)
    return model


def train_reference(optimizer, batch, steps=STEPS, data=None, seed=3):
    model = make_model(seed)
    model.compile(optimizer=optimizer, loss='mse')
    xs, ys = data if data is not None else (x, y)
    model.fit(xs[:steps * N * B], ys[:steps * N * B], batch_size=batch, shuffle=False, epochs=1, verbose=0)
    return model


# backward_passes_per_step=2 with averaging: one update per two global batches.
data = global_data(seed=5, steps=4)
opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                     average_aggregated_gradients=True)
model = train_distributed(opt, steps=4, data=data)
assert int(opt._agg_helper.counter.numpy()) == 0 and int(opt.iterations) == 4
assert_close(model, train_reference(keras.optimizers.SGD(0.1), 2 * N * B, steps=4, data=data), 1e-5,
             'backward_passes_per_step=2')

# Horovod's two phases through _compute_gradients() and apply_gradients() in a tf.function, with a
# custom Keras 3 optimizer (var += grad): the gradients of 3 calls are summed, averaged over the
# ranks and divided by 3 on the third, applied then; iterations counts every call.
class AddGradient(keras.optimizers.Optimizer):
    def update_step(self, gradient, variable, learning_rate):
        variable.assign_add(gradient)


opt = hvd_keras.DistributedOptimizer(AddGradient(learning_rate=1.0), backward_passes_per_step=3,
                                     average_aggregated_gradients=True)
w = tf.Variable([0.0, 0.0])


@tf.function
def two_phases():
    grads_and_vars = opt._compute_gradients(lambda: tf.reduce_sum(w * [R + 1.0, 1.0]), var_list=[w])
    opt.apply_gradients(grads_and_vars, experimental_aggregate_gradients=False)
    return grads_and_vars[0][0]


for call in range(1, 8):
    returned = two_phases()
    assert int(opt.iterations) == call and int(opt._agg_helper.counter) == call % 3
    updates = call // 3
    assert np.allclose(w.numpy(), [updates * sum(r + 1.0 for r in range(N)) / N, updates]), (call, w.numpy())
    if call % 3 == 0:
        assert np.allclose(returned.numpy(), [sum(r + 1.0 for r in range(N)) / N, 1.0]), returned.numpy()

# groups (two fused groups) and Sum give the reduction they name; fp16 compression is close.
assert_close(train_distributed(hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=2)),
             train_reference(keras.optimizers.SGD(0.1), N * B), 1e-5, 'groups=2')
assert_close(train_distributed(hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1 / N), op=hvd.Sum)),
             train_reference(keras.optimizers.SGD(0.1), N * B), 1e-5, 'op=Sum')
assert_close(train_distributed(hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                              compression=hvd.Compression.fp16)),
             train_reference(keras.optimizers.SGD(0.1), N * B), 2e-3, 'fp16 compression')

# A local variable keeps its own gradient, divided by size().
bias = tf.Variable([0.0])
shared = tf.Variable([0.0])
opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0))
opt.register_local_var(bias)
with tf.GradientTape() as tape:
    loss = (R + 1.0) * (bias + shared)
opt.apply_gradients(zip(tape.gradient(loss, [bias, shared]), [bias, shared]))
assert np.isclose(bias.numpy()[0], -(R + 1.0) / N), bias.numpy()
assert np.isclose(shared.numpy()[0], -sum(r + 1.0 for r in range(N)) / N), shared.numpy()

# LearningRateWarmupCallback: from initial_lr / size() up to initial_lr after warmup_epochs.
seen = []
model = make_model(4)
model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss='mse')
record = keras.callbacks.LambdaCallback(on_batch_begin=lambda b, logs: seen.append(
    float(model.optimizer.learning_rate.numpy())))
model.fit(rows_of_rank(x), rows_of_rank(y), batch_size=B, epochs=3, verbose=0, shuffle=False,
          callbacks=[hvd_keras.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=2), record])
assert seen[0] <= 0.1 / N * 1.5 and np.isclose(seen[-1], 0.1) and seen == sorted(seen), seen

# A tf.compat.v1 optimizer in a TensorFlow 1 graph.
with tf.Graph().as_default():
    w = tf.compat.v1.get_variable('w', initializer=tf.constant([1.0, 2.0]))
    feature = tf.compat.v1.placeholder(tf.float32, [2])
    loss = tf.reduce_sum(w * feature)
    train = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5)).minimize(loss)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(train, feed_dict={feature: [R + 1.0, 1.0]})
        final = session.run(w)
mean_feature = sum(r + 1.0 for r in range(N)) / N
assert np.allclose(final, [1.0 - 0.5 * mean_feature, 1.5]), final

# SyncBatchNormalization: the statistics of the global batch.
batch = np.random.default_rng(7).normal(size=(N * B, 4)).astype('float32')
sync_bn = hvd.SyncBatchNormalization(axis=1)
plain_bn = keras.layers.BatchNormalization(axis=1)
mine = sync_bn(batch[R * B:(R + 1) * B], training=True)
everyone = plain_bn(batch, training=True)
assert np.allclose(mine, everyone[R * B:(R + 1) * B], atol=1e-4)
assert np.allclose(sync_bn.moving_mean.numpy(), plain_bn.moving_mean.numpy(), atol=1e-5)
assert np.allclose(sync_bn.moving_variance.numpy(), plain_bn.moving_variance.numpy(), atol=1e-4)
hvd.barrier()
print(f'rank {R}: training OK')
