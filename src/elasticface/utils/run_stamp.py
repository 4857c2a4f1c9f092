"""The run directory's time stamp, the same in every process of a multi-node torchrun job.

Each node's `torchrun ... train.py` composes its own config, and nodes start seconds apart, so
`${now:...}` would give every node its own `logs/train/runs/<time>`. Under torchrun every worker can
reach the launcher's key-value store (`TORCHELASTIC_USE_AGENT_STORE=True`, at MASTER_ADDR:MASTER_PORT):
global rank 0 publishes its stamp there and the other ranks read it, so all write one run directory.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

_FORMAT = "%Y-%m-%d_%H-%M-%S"
_cache: dict[str, str] = {}


def run_stamp(fmt: str = _FORMAT) -> str:
    """`time.strftime(fmt)`, taken by global rank 0 of a torchrun job and shared with every other rank."""
    if fmt in _cache:
        return _cache[fmt]
    stamp = time.strftime(fmt)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        from torch.distributed import TCPStore

        key = f"elasticface/run_stamp/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{fmt}"
        store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=300))
        if int(os.environ.get("RANK", "0")) == 0:
            store.set(key, stamp)
        else:
            stamp = store.get(key).decode()  # waits for rank 0 (the other nodes may start later)
    _cache[fmt] = stamp
    return stamp
