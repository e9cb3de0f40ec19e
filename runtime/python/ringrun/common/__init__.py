"""What ringrun's framework bindings share (no framework imported): ``basics`` (init, ranks,
errors, reduction ops) and ``elastic`` (the elastic State protocol and the retry loop of ``run``);
``exceptions`` and ``process_sets`` give horovod.common's modules of those names their names."""
