"""ringrun.keras.elastic: the elastic state and callbacks of ringrun.tensorflow.keras.elastic."""

from ringrun.tensorflow.keras.elastic import (  # noqa: F401
    CommitStateCallback, KerasState, TensorFlowKerasState, UpdateBatchStateCallback, UpdateEpochStateCallback, run)
