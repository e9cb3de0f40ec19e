# ringrun-test: np=2,3 timeout=120
"""start_timeline/stop_timeline in ringrun.tensorflow (ringrun.common's dynamic timeline): rank 0
writes a Chrome trace of the ops run between them, valid JSON naming each op and its phases; a
second start_timeline replaces the file being written. The files are removed afterwards.
"""

import json
import os
import shutil
import tempfile

import tensorflow as tf

import ringrun.tensorflow as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
folder = hvd.broadcast_object(tempfile.mkdtemp(prefix='ringrun-tf-timeline-') if R == 0 else None, root_rank=0)
first, second = os.path.join(folder, 'first.json'), os.path.join(folder, 'second.json')


@tf.function
def step(t):
    return hvd.allreduce(t, op=hvd.Sum, name='timeline.step'), hvd.allgather(t, name='timeline.gather')


try:
    hvd.start_timeline(first, mark_cycles=True)
    step(tf.ones([4]))
    hvd.start_timeline(second)
    step(tf.ones([4]))
    hvd.stop_timeline()
    hvd.barrier()
    if R == 0:
        for path in (first, second):
            events = json.load(open(path))
            events = events['traceEvents'] if isinstance(events, dict) else events
            text = json.dumps(events)
            for word in ('timeline.step', 'timeline.gather', 'ALLREDUCE', 'ALLGATHER'):
                assert word in text, f'{path}: no {word} in the timeline'
        assert 'CYCLE_START' in open(first).read(), 'mark_cycles=True marks the cycles'
    try:
        hvd.start_timeline('')
        raise AssertionError('an empty file name must raise')
    except ValueError as e:
        assert 'file_path' in str(e), e
    hvd.barrier()
finally:
    if R == 0:
        shutil.rmtree(folder, ignore_errors=True)
print(f'rank {R}: timeline OK')
