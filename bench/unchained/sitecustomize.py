"""The worker without its hash chain (DESIGN 1.2, "Tamper evidence"), for `make bench` only.

bench/run.py starts one worker with this directory first on PYTHONPATH, so Python imports this
module at start-up, before `python -m workers worker` runs: its entries are then written with no
`chain` header and its heads keep none. The chain's cost is that worker's throughput and latency
beside the worker's with it, in one run. No setting of the worker turns the chain off: this
module is the only switch, and it lives in bench/.
"""

import importlib

# the module (workers.core re-exports a function of the same name)
importlib.import_module("workers.core.decide").chained = lambda head, key, entry: None
