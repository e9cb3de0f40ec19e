"""ringrun.keras.callbacks: the callbacks of ringrun.tensorflow.keras.callbacks."""

from ringrun.tensorflow.keras.callbacks import (  # noqa: F401
    BestModelCheckpoint, BroadcastGlobalVariablesCallback, LearningRateScheduleCallback, LearningRateWarmupCallback,
    MetricAverageCallback)
