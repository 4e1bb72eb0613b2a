"""A key/value cache layer with room reserved for the tokens still to come.

transformers' ``DynamicLayer`` appends each step's key/value states with ``torch.cat``:
every generated token copies the layer's whole cache (on the default model with a GSM8K
8-shot prompt, a fifth of the CPU time of greedy decoding). ``ReservedLayer`` keeps the
states in a buffer with ``reserve`` free positions and writes each step's states into it;
``keys``/``values`` are views of the filled part, so attention reads exactly the values a
``DynamicLayer`` would hold. When the buffer is full it grows by ``reserve`` again.

Anything that replaces ``keys``/``values`` from outside (``batch_select_indices`` when
finished rows leave the batch, ``crop``, ``reorder_cache``) is noticed on the next
``update``, which then starts a new buffer from the replaced tensors. Imported only by the
HF backend's generation path (it needs torch and transformers).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):  # type: ignore[no-untyped-call]
    """A ``DynamicLayer`` whose states live in a preallocated buffer (see the module)."""

    def __init__(self, reserve: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.reserve = max(1, int(reserve))
        self._keys_buf: torch.Tensor | None = None
        self._values_buf: torch.Tensor | None = None
        self._view: torch.Tensor | None = None  # the ``keys`` this layer last handed out
        self._filled = 0

    @classmethod
    def from_layer(cls, layer: Any, reserve: int) -> ReservedLayer:
        """A reserved layer holding ``layer``'s states (copied into the buffer on its first
        update, so tensors shared with other caches are never written to)."""
        new = cls(reserve)
        if getattr(layer, "is_initialized", False) and layer.keys is not None:
            new.lazy_initialization(layer.keys, layer.values)
            new.keys, new.values = layer.keys, layer.values
        return new

    @classmethod
    def filled(
        cls, keys: torch.Tensor, values: torch.Tensor, length: int, reserve: int
    ) -> ReservedLayer:
        """A reserved layer whose buffers are ``keys``/``values`` (batch, heads, capacity,
        head_dim), the first ``length`` positions filled (a cache laid out in one copy)."""
        new = cls(reserve)
        new.lazy_initialization(keys[:, :, :0], values[:, :, :0])
        new._keys_buf, new._values_buf, new._filled = keys, values, length
        new.keys = new._view = keys[:, :, :length]
        new.values = values[:, :, :length]
        return new

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        added = key_states.shape[-2]
        if (
            self._keys_buf is None
            or self.keys is not self._view  # replaced from outside
            or self._filled + added > self._keys_buf.shape[-2]  # full
        ):
            self._rebuffer(key_states, value_states, added)
        assert self._keys_buf is not None and self._values_buf is not None
        start = self._filled
        end = start + added
        self._keys_buf[:, :, start:end] = key_states
        self._values_buf[:, :, start:end] = value_states
        self._filled = end
        self.keys = self._view = self._keys_buf[:, :, :end]
        self.values = self._values_buf[:, :, :end]
        return self.keys, self.values

    def reset(self) -> None:
        self._keys_buf = self._values_buf = self._view = None
        self._filled = 0
        super().reset()

    def _rebuffer(self, key_states: torch.Tensor, value_states: torch.Tensor, added: int) -> None:
        """A new buffer holding the current ``keys``/``values`` (none yet, replaced from
        outside, or the filled part of a full buffer) with room for ``added`` more positions
        and the reserve."""
        keys, values = self.keys, self.values
        filled = 0 if keys is None or keys.numel() == 0 else int(keys.shape[-2])
        capacity = filled + added + self.reserve
        k, v = key_states, value_states
        self._keys_buf = k.new_empty((*k.shape[:2], capacity, k.shape[3]))
        self._values_buf = v.new_empty((*v.shape[:2], capacity, v.shape[3]))
        if filled:
            assert keys is not None and values is not None
            self._keys_buf[:, :, :filled] = keys
            self._values_buf[:, :, :filled] = values
        self._filled = filled


def reserved_cache(
    layers: list[tuple[torch.Tensor, torch.Tensor]], length: int, reserve: int
) -> Any:
    """A ``DynamicCache`` of reserved layers over the given (keys, values) buffers, each
    filled up to ``length`` (see :meth:`ReservedLayer.filled`)."""
    from transformers import DynamicCache

    cache: Any = DynamicCache()
    cache.layers.extend(ReservedLayer.filled(k, v, length, reserve) for k, v in layers)
    cache.layer_class_to_replicate = lambda: ReservedLayer(reserve)
    return cache


def reserve_room(cache: Any, reserve: int) -> Any:
    """``cache`` (a ``DynamicCache``) with its plain dynamic layers replaced by reserved
    ones, and reserved layers for the layers it creates later. A cache of another kind (an
    older transformers without cache layers, sliding-window layers) is returned as it is."""
    layers = getattr(cache, "layers", None)
    if layers is None or not hasattr(cache, "layer_class_to_replicate"):
        return cache
    for i, layer in enumerate(layers):
        if type(layer) is DynamicLayer:
            layers[i] = ReservedLayer.from_layer(layer, reserve)
    if cache.layer_class_to_replicate is DynamicLayer:
        cache.layer_class_to_replicate = lambda: ReservedLayer(reserve)
    return cache
