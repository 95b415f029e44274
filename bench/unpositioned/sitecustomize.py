"""The exactly-once worker without its position records (DESIGN 1.3, "Reading at a position"),
for `make bench` only.

bench/run.py starts one worker, phase (c4), with this directory first on PYTHONPATH, so Python
imports this module at start-up, before `python -m workers worker` runs: its Processor is then
built with no PositionKeeper (`positions` None), so its transactions write no `position/<p>`
record and nothing is ever due, and it runs no gap watch (the once-a-second look at quiet
partitions' last stable offsets, with its probe consumer). The positions' cost is that worker's
drain beside the worker's with them (c), in one run. No setting of the worker turns positions
off: this module is the only switch, and it lives in bench/.
"""

import functools

from workers.stream import processor

_init = processor.Processor.__init__


@functools.wraps(_init)
def _without_positions(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
    kwargs["positions"] = None
    _init(self, *args, **kwargs)


processor.Processor.__init__ = _without_positions
# the worker's assembly (workers/stream/worker.py, build_app) sets `gap_watch` when it made a
# keeper, whether or not the processor kept it: the watch would still ask last stable offsets
# and probe gaps once a second for nobody. Every value set is dropped, so Processor.run finds
# None and starts none.
processor.Processor.gap_watch = property(lambda self: None, lambda self, value: None)
