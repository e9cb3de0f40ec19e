"""ringrun.tensorflow against tf.distribute.MultiWorkerMirroredStrategy on the same ranks:
scripts/bench-tf.

Run it through scripts/bench-tf (which starts it under `ringrun -np N`); every rank runs this file.
Both live in the same processes: ringrun.tensorflow.init(), then a MultiWorkerMirroredStrategy
(collective ring over gRPC, CPU) whose TF_CONFIG names one loopback port per rank, picked by rank 0
and broadcast through ringrun before TensorFlow runs anything. Three copies of one Keras 3 model
(the same initial weights) train on the same per-rank data in alternating blocks of steps, so load
drift on a shared host hits all alike:

  ringrun  a tf.function step: GradientTape -> hvd.DistributedGradientTape -> SGD.apply_gradients
  mwms     the same step in strategy.run() (Keras' optimizer sums the gradients over the workers
           through the strategy's all-reduce; the loss is divided by the number of workers)
  local    the same step with no communication: the compute-only ceiling

Model (communication-heavy, like bench-torch's mlp): --layers Dense(--width) layers with ReLU,
batch --batch per rank, MSE loss; 8 x 1024 is 8.4 M parameters, 33.6 MB of float32 gradients a
step. A block is --steps steps (by default about --block-s seconds of local steps); its time is the
slowest rank's; rows report the median of --blocks blocks per contender. Exposed communication per
step = 1/contender - 1/local (what communication adds to a step); the goal: ringrun's at most half
of MWMS's.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

import numpy as np

import ringrun.tensorflow as hvd
from ringrun import _ringrun

COMM_TARGET = 0.5  # ringrun's exposed communication per step / MWMS's, at most


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench-tf", description="ringrun.tensorflow against MultiWorkerMirroredStrategy")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16, help="rows per rank and step (default 16)")
    p.add_argument("--steps", type=int, default=0, help="steps per block (default: about --block-s s of local steps)")
    p.add_argument("--block-s", type=float, default=1.5)
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def slowest(values):
    """Element-wise max over the ranks (through ringrun, outside any timed block)."""
    a = np.array(values, dtype=np.float64)
    _ringrun.allreduce(a.ctypes.data, a.ctypes.data, a.size, _ringrun.FLOAT64, _ringrun.MAX)
    return a.tolist()


def start_strategy(tf):
    """MultiWorkerMirroredStrategy over loopback ports rank 0 picked (before any TensorFlow op)."""
    ports = hvd.broadcast_object(free_ports(hvd.size()) if hvd.rank() == 0 else None, root_rank=0,
                                 name="bench_tf.ports")
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": hvd.rank()}})
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def make_model(keras, args):
    keras.utils.set_random_seed(1234)  # the same weights on every rank and for every copy
    layers = [keras.Input((args.width,))]
    layers += [keras.layers.Dense(args.width, activation="relu") for _ in range(args.layers - 1)]
    layers.append(keras.layers.Dense(args.width))
    return keras.Sequential(layers)


def contenders(tf, keras, strategy, args):
    """{name: step function} over one model copy each, and the copies."""
    rng = np.random.default_rng(100 + hvd.rank())
    x = tf.constant(rng.normal(size=(args.batch, args.width)).astype("float32"))
    y = tf.constant(rng.normal(size=(args.batch, args.width)).astype("float32"))
    models = {"ringrun": make_model(keras, args), "local": make_model(keras, args)}
    optimizers = {k: keras.optimizers.SGD(0.001) for k in models}
    with strategy.scope():
        models["mwms"] = make_model(keras, args)
        optimizers["mwms"] = keras.optimizers.SGD(0.001)

    def step_of(name, reduce):
        model, optimizer = models[name], optimizers[name]

        def step(scale):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y)) * scale
            tape = reduce(tape)
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return step

    ringrun_step = tf.function(lambda: step_of("ringrun", hvd.DistributedGradientTape)(1.0))
    local_step = tf.function(lambda: step_of("local", lambda tape: tape)(1.0))
    mwms_replica = step_of("mwms", lambda tape: tape)
    mwms_step = tf.function(lambda: strategy.run(mwms_replica, args=(1.0 / strategy.num_replicas_in_sync,)))
    return {"ringrun": ringrun_step, "mwms": mwms_step, "local": local_step}, models


def measure(steps_of, args):
    def run(key, n):
        _ringrun.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            loss = steps_of[key]()
        float(loss.numpy() if hasattr(loss, "numpy") else 0.0)  # the last step has run
        return time.perf_counter() - t0

    for key in steps_of:
        run(key, args.warmup)
    steps = args.steps or max(3, round(args.block_s / slowest([run("local", 2) / 2])[0]))
    times = {k: [] for k in steps_of}
    order = list(steps_of)
    for b in range(args.blocks):
        for key in (order if b % 2 == 0 else order[::-1]):  # ABC CBA: none always goes first
            times[key].append(run(key, steps))
    return steps, {k: slowest(v) for k, v in times.items()}


def main(argv):
    args = parse_args(argv)
    hvd.init()
    import tensorflow as tf
    import keras
    strategy = start_strategy(tf)
    steps_of, models = contenders(tf, keras, strategy, args)
    t0 = time.perf_counter()
    steps, times = measure(steps_of, args)
    rate = {k: steps / statistics.median(v) for k, v in times.items()}
    comm = {k: 1e3 * (1 / rate[k] - 1 / rate["local"]) for k in ("ringrun", "mwms")}
    diff = slowest([max(float(np.max(np.abs(a - b))) for a, b in zip(models["ringrun"].get_weights(),
                                                                       models["mwms"].get_weights()))])[0]
    params = sum(int(np.prod(w.shape)) for w in models["local"].get_weights())
    row = {
        "case": "mlp", "ranks": hvd.size(), "model": f"{args.layers} x Dense({args.width}), batch {args.batch}",
        "parameters": params, "grad_bytes": 4 * params, "steps_per_block": steps, "blocks": args.blocks,
        "ringrun_steps_per_s": rate["ringrun"], "mwms_steps_per_s": rate["mwms"], "local_steps_per_s": rate["local"],
        "ratio": rate["ringrun"] / rate["mwms"], "ringrun_comm_ms_per_step": comm["ringrun"],
        "mwms_comm_ms_per_step": comm["mwms"], "comm_ratio": comm["ringrun"] / comm["mwms"],
        "comm_target": COMM_TARGET, "verdict": "met" if comm["ringrun"] <= COMM_TARGET * comm["mwms"] else "not met",
        "max_weight_diff": diff, "case_seconds": time.perf_counter() - t0,
        "ringrun_block_s": times["ringrun"], "mwms_block_s": times["mwms"], "local_block_s": times["local"],
    }
    header = {"tensorflow": tf.__version__, "keras": keras.__version__, "transport": _ringrun.transport_name(),
              "load_1min": os.getloadavg()[0], "env": {k: os.environ.get(k) for k in (
                  "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", _ringrun.variables.FUSION_THRESHOLD_MB,
                  _ringrun.variables.CYCLE_TIME_MS) if os.environ.get(k)}}
    if hvd.rank() == 0:
        if args.json:
            print(json.dumps({"header": header, "rows": [row]}, indent=1), flush=True)
        else:
            knobs = ", ".join(f"{k}={v}" for k, v in header["env"].items())
            print(f"# bench-tf: {hvd.size()} ranks, TensorFlow {tf.__version__}, Keras {keras.__version__}, ringrun "
                  f"transport {header['transport']}; peer: MultiWorkerMirroredStrategy (RING, gRPC on loopback)"
                  f"{'; ' + knobs if knobs else ''}")
            print(f"# load average (1 min) at the end: {header['load_1min']:.2f}")
            print(f"# median of {args.blocks} alternating blocks per contender, slowest rank")
            print(f"{'case':>6} {'ranks':>5} {'ringrun_steps_per_s':>19} {'mwms_steps_per_s':>16} {'ratio':>7} "
                  f"{'ringrun_comm_ms':>15} {'mwms_comm_ms':>12} {'comm_ratio':>10} {'target':>7} {'verdict':>8}")
            print(f"{row['case']:>6} {row['ranks']:>5} {row['ringrun_steps_per_s']:>19.2f} {row['mwms_steps_per_s']:>16.2f} "
                  f"{row['ratio']:>7.2f} {row['ringrun_comm_ms_per_step']:>15.1f} {row['mwms_comm_ms_per_step']:>12.1f} "
                  f"{row['comm_ratio']:>10.3f} {'<=' + str(COMM_TARGET):>7} {row['verdict']:>8}")
            print(f"# {row['model']}, {params} parameters ({row['grad_bytes'] / 1e6:.1f} MB of gradients); {steps} "
                  f"steps per block; {row['case_seconds']:.0f} s; no communication (same blocks) "
                  f"{row['local_steps_per_s']:.2f} steps/s; max |ringrun - mwms| weight after the run {diff:.2e}")
    _ringrun.barrier()
    hvd.shutdown()
    os._exit(0)  # MultiWorkerMirroredStrategy's gRPC server does not stop by itself


if __name__ == "__main__":
    main(sys.argv[1:])
