"""Data-parallel Keras 3 training with ringrun.keras (Horovod's API): a small classifier on synthetic data.

    ringrun -np 2 python runtime/examples/train_keras.py
    python runtime/examples/train_keras.py                    # one process, no launcher

A Horovod script differs only in its imports (``import horovod.tensorflow.keras as hvd``).
"""

import argparse
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')  # TensorFlow's start-up notices, once per rank

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

import ringrun.keras as hvd  # noqa: E402


def synthetic_dataset(samples, features, classes):
    """Points around one random centre per class: learnable, and the same on every rank."""
    rng = np.random.default_rng(1234)
    centres = rng.normal(size=(classes, features)) * 0.6
    labels = rng.integers(classes, size=samples)
    points = centres[labels] + rng.normal(size=(samples, features))
    return points.astype('float32'), labels.astype('int64')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--batch-size', type=int, default=32, help='per rank')
    parser.add_argument('--lr', type=float, default=0.01, help='for one rank; scaled by size()')
    args = parser.parse_args()

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)  # ranks share the cores
    keras.utils.set_random_seed(42)

    x, y = synthetic_dataset(2048, 16, 8)
    # Each rank trains on its own 1/size() of the data.
    x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]

    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation='relu'), keras.layers.Dense(8)])
    # The global batch grows with the ranks: scale the learning rate with it.
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9))
    model.compile(optimizer=optimizer, metrics=['accuracy'],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),  # every rank starts from rank 0's weights
                 hvd.callbacks.MetricAverageCallback()]  # the logged metrics are the ranks' average
    history = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks,
                        verbose=0)
    if hvd.rank() == 0:
        for epoch, (loss, accuracy) in enumerate(zip(history.history['loss'], history.history['accuracy']), 1):
            print(f'epoch {epoch}: loss {loss:.4f}  accuracy {accuracy:.3f}  ({hvd.size()} ranks)', flush=True)


if __name__ == '__main__':
    main()
