# ringrun-test: np=3 timeout=150 direct
"""Elastic TensorFlow training survives a SIGKILLed worker (ringrun.tensorflow.elastic).

`ringrun -np 3 --min-np 2` runs this file with --worker: a Keras model trained by a tf.function
step through DistributedGradientTape, ``KerasState(model, optimizer, batch=0)``,
``@hvd.elastic.run``, a commit every 2 batches. Elastic id 1 SIGKILLs itself before its batch 5
(last commit: 4). Checked: the survivors' step raises a TensorFlow error from a ringrun op, which
run() takes as InternalError: they roll back to batch 4, join the world of 2 (same pids) and finish
with identical weights; ringrun exits 0. Before that, outside elastic mode (`ringrun -np 2`), the
states' sync, commit and restore (Horovod's test_elastic_state, for KerasState and
TensorFlowState).
"""
import os
import re
import signal
import subprocess
import sys

TOTAL, B = 12, 2


def worker():
    import numpy as np
    import tensorflow as tf
    import keras

    import ringrun.keras as hvd_keras
    import ringrun.tensorflow as hvd

    hvd.init()
    ident = int(os.environ.get("RINGRUN_ELASTIC_ID", hvd.rank()))
    keras.utils.set_random_seed(10 + ident)  # a different start per process: the sync fixes it
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='tanh'), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(64, 4)).astype('float32'), rng.normal(size=(64, 1)).astype('float32')

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb) - yb))
        grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    class Tracked(hvd_keras.elastic.KerasState):
        def restore(self):
            before = self.batch
            super().restore()
            print(f"RESTORE id={ident} from={before} to={self.batch}", flush=True)

    state = Tracked(model, optimizer, batch=0)

    @hvd.elastic.run
    def train(state):
        print(f"TRAIN id={ident} size={hvd.size()} batch={state.batch}", flush=True)
        while state.batch < TOTAL:
            if ident == 1 and state.batch == 5:
                os.kill(os.getpid(), signal.SIGKILL)
            first = (state.batch * hvd.size() + hvd.rank()) * B % 60
            step(x[first:first + B], y[first:first + B])
            state.batch += 1
            if state.batch % 2 == 0:
                state.commit()

    train(state)
    weights = ','.join(f'{v:.7g}' for w in model.get_weights() for v in w.ravel())
    print(f"FINAL id={ident} size={hvd.size()} batch={state.batch} weights={weights}", flush=True)


def plain_states():
    """Outside elastic mode: sync makes rank 0's state everyone's, restore goes back to the last
    commit (Horovod's test_elastic_state)."""
    import numpy as np
    import tensorflow as tf
    import keras

    import ringrun.keras as hvd_keras
    import ringrun.tensorflow as hvd

    hvd.init()
    r = hvd.rank()
    v = 1.0 if r == 0 else 2.0
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    model.set_weights([np.full((2, 2), v, np.float32), np.full((2,), v, np.float32)])
    state = hvd_keras.elastic.KerasState(model, keras.optimizers.Adam(0.001), batch=20 + r, epoch=10 + r)
    state.sync()
    assert all(np.allclose(w, 1.0) for w in model.get_weights()) and (state.batch, state.epoch) == (20, 10)
    model.set_weights([np.full((2, 2), 5.0, np.float32), np.zeros((2,), np.float32)])
    state.batch = 21
    state.restore()
    assert all(np.allclose(w, 1.0) for w in model.get_weights()) and state.batch == 20
    model.set_weights([np.full((2, 2), 5.0, np.float32), np.zeros((2,), np.float32)])
    state.batch = 21
    state.commit()
    state.restore()
    assert np.allclose(model.get_weights()[0], 5.0) and state.batch == 21
    variables = [tf.Variable([float(r)] * 2)]
    tf_state = hvd.elastic.TensorFlowState(variables, epoch=r)
    tf_state.sync()
    assert np.allclose(variables[0].numpy(), 0.0) and tf_state.epoch == 0
    calls = []

    @hvd.elastic.run
    def once(state, k):
        calls.append(k)
        return k * 2

    assert once(tf_state, 3) == 6 and calls == [3]  # not elastic: sync, then one call

    # The Keras callbacks drive a state from fit(): batch and epoch kept, a commit every 2 batches.
    class Counted(hvd_keras.elastic.KerasState):
        commits = 0

        def commit(self):
            Counted.commits += 1
            super().commit()

    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss='mse')
    counted = Counted(model, batch=0, epoch=3)
    seen = []
    record = keras.callbacks.LambdaCallback(on_batch_end=lambda b, logs: seen.append(counted.batch))
    model.fit(np.ones((8, 2), np.float32), np.ones((8, 2), np.float32), batch_size=2, epochs=2, verbose=0,
              callbacks=[hvd_keras.elastic.CommitStateCallback(counted, batches_per_commit=2),
                         hvd_keras.elastic.UpdateBatchStateCallback(counted),
                         hvd_keras.elastic.UpdateEpochStateCallback(counted), record])
    assert seen == [0, 1, 2, 3] * 2 and counted.batch == 0 and counted.epoch == 5, (seen, counted.batch, counted.epoch)
    assert Counted.commits == 2 * (2 + 1), Counted.commits  # every 2 of 4 batches, and each epoch's end
    hvd_keras.elastic.CommitStateCallback(counted).commit()  # Horovod's callbacks commit on demand too
    assert Counted.commits == 7, Counted.commits
    # horovod.keras.elastic has TensorFlowKerasState beside KerasState.
    assert hvd_keras.elastic.TensorFlowKerasState is hvd.elastic.TensorFlowKerasState
    print(f"PLAIN {r} OK", flush=True)


def events(lines, kind):
    return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in lines if f"]<stdout>:{kind} " in line]


def driver():
    ringrun, env = os.environ["RINGRUN"], dict(os.environ)
    plain = subprocess.run([ringrun, "-np", "2", sys.executable, __file__, "--plain"], capture_output=True,
                           text=True, timeout=60, env=env)
    assert plain.returncode == 0 and plain.stdout.count("OK") == 2, plain.stdout + plain.stderr
    run = subprocess.run([ringrun, "-np", "3", "--min-np", "2", sys.executable, __file__, "--worker"],
                         capture_output=True, text=True, timeout=90, env=env)
    lines = (run.stdout + run.stderr).splitlines()
    out = "\n".join(lines)
    assert run.returncode == 0, (run.returncode, out)
    assert any("id 1" in l and "signal 9" in l for l in lines), out
    for ident in (0, 2):
        restores = [e for e in events(lines, "RESTORE") if e["id"] == str(ident)]
        assert [(e["from"], e["to"]) for e in restores] == [("5", "4")], (ident, out)
        trains = [(e["size"], e["batch"]) for e in events(lines, "TRAIN") if e["id"] == str(ident)]
        assert trains == [("3", "0"), ("2", "4")], (ident, trains, out)
    finals = events(lines, "FINAL")
    assert sorted(f["id"] for f in finals) == ["0", "2"], out
    assert all(f["batch"] == str(TOTAL) and f["size"] == "2" for f in finals), finals
    assert finals[0]["weights"] == finals[1]["weights"], finals
    print("survivors 0 and 2 rolled back to batch 4 and finished alike")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    elif "--plain" in sys.argv:
        plain_states()
    else:
        driver()
