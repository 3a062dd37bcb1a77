"""The tables of stand-ins the shim swaps in: name in ``torch.cuda``, ``torch.cuda.memory`` and
``torch.accelerator`` -> what answers for it inside a block."""
from __future__ import annotations

from typing import Any

import torch

from syncguard.predict import rng
from syncguard.predict.devices import DEVICE_COUNT
from syncguard.predict.fakedevice import (_DeviceIndex, _acc_empty_host_cache,
                                          _acc_get_device_capability, _acc_synchronize,
                                          _empty_cache, _exchange_device, _get_device_capability,
                                          _get_device_name, _get_device_properties, _get_rng_state,
                                          _manual_seed, _maybe_exchange_device, _mem_get_info,
                                          _memory_stats, _memory_summary, _reset, _seed,
                                          _set_device, _set_rng_state, _zero)
from syncguard.predict.fakegraphs import FakeCUDAGraph, _GraphContext, _make_graphed_callables, _pool_ids
from syncguard.predict.fakestreams import (FakeEvent, FakeStream, _current, _current_stream,
                                           _default_stream, _set_stream, _stream, _synchronize)



#: name in torch.cuda -> stand-in; everything else in torch.cuda is left as it is.
SHIMMED: dict[str, Any] = {
    "is_available": lambda: True,
    "is_initialized": lambda: True,
    "_lazy_init": lambda: None,
    "init": lambda: None,
    "device_count": lambda: DEVICE_COUNT,
    "current_device": lambda: 0,
    "set_device": _set_device,
    "_exchange_device": _exchange_device,
    "_maybe_exchange_device": _maybe_exchange_device,
    "synchronize": _synchronize,
    "empty_cache": _empty_cache,
    "Stream": FakeStream,
    "Event": FakeEvent,
    "current_stream": _current_stream,
    "default_stream": _default_stream,
    "set_stream": _set_stream,
    "stream": _stream,
    "get_device_name": _get_device_name,
    "get_device_capability": _get_device_capability,
    "get_device_properties": _get_device_properties,
    "is_bf16_supported": lambda *a, **k: True,
    "manual_seed": _manual_seed,
    "manual_seed_all": _manual_seed,
    "seed": _seed,
    "seed_all": _seed,
    "initial_seed": lambda: rng.GENERATOR.initial_seed(),  # the stand-ins' generator
    "get_rng_state": _get_rng_state,
    "set_rng_state": _set_rng_state,
    "get_rng_state_all": lambda: [_get_rng_state(i) for i in range(DEVICE_COUNT)],
    "set_rng_state_all": lambda new_states: [_set_rng_state(s) for s in new_states] and None,
    "mem_get_info": _mem_get_info,
    "memory_stats": _memory_stats,
    "memory_summary": _memory_summary,
    "memory_allocated": _zero,
    "max_memory_allocated": _zero,
    "memory_reserved": _zero,
    "max_memory_reserved": _zero,
    "reset_peak_memory_stats": _reset,
    "reset_accumulated_memory_stats": _reset,
    "CUDAGraph": FakeCUDAGraph,
    "graph": _GraphContext,
    "graph_pool_handle": lambda: (0, next(_pool_ids)),
    "is_current_stream_capturing": lambda: _current().capturing,
    "make_graphed_callables": _make_graphed_callables,
}

#: the same stand-ins in torch.cuda.memory, where torch.cuda's own functions (memory_allocated
#: and kin read memory_stats) and code calling the module directly look them up
MEMORY_SHIMMED: dict[str, Any] = {
    "memory_stats": _memory_stats,
    "memory_summary": _memory_summary,
    "mem_get_info": _mem_get_info,
}


#: name in torch.accelerator -> stand-in, agreeing with the shimmed torch.cuda (only the names
#: this torch has are swapped)
ACCELERATOR_SHIMMED: dict[str, Any] = {
    "is_available": lambda: True,
    "current_accelerator": lambda check_available=False: torch.device("cuda"),
    "device_count": lambda: DEVICE_COUNT,
    "current_device_index": lambda: 0,
    "current_device_idx": lambda: 0,
    "set_device_index": lambda device, /: _set_device(device),
    "set_device_idx": lambda device, /: _set_device(device),
    "device_index": _DeviceIndex,
    "current_stream": lambda device=None, /: _current_stream(device),
    "set_stream": _set_stream,
    "synchronize": _acc_synchronize,
    "empty_cache": _empty_cache,
    "empty_host_cache": _acc_empty_host_cache,
    "get_device_capability": _acc_get_device_capability,
    "get_memory_info": lambda device=None, /: _mem_get_info(device),
    "memory_stats": lambda device=None, /: _memory_stats(device),
    "memory_allocated": lambda device=None, /: _zero(device),
    "max_memory_allocated": lambda device=None, /: _zero(device),
    "memory_reserved": lambda device=None, /: _zero(device),
    "max_memory_reserved": lambda device=None, /: _zero(device),
    "reset_peak_memory_stats": lambda device=None, /: _reset(device),
    "reset_accumulated_memory_stats": lambda device=None, /: _reset(device),
    "Graph": FakeCUDAGraph,
}
