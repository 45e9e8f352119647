"""Key/value memory of the ``hf`` engine: the running batch's cache and a prefix store.

* :class:`BatchCache` holds the keys/values of the rows being decoded, one preallocated
  buffer per layer (``[rows, kv_heads, capacity, head_dim]``) that each forward pass writes
  into in place. transformers' ``DynamicCache`` concatenates instead, i.e. reallocates and
  copies the whole cache at every step: a quarter of a decode step for SmolLM2-135M on this
  CPU. Column ``c`` of row ``r`` holds a real token when ``mask[r, c] == 1``; rows are
  left-padded and a prompt glued to a reused prefix may leave a gap between the two, so
  rows of any lengths share one rectangle and positions come from the mask's running sum.
  The scheduler drops finished rows (:meth:`select`), admits new ones (:meth:`concat`)
  and takes a finished row's keys/values out (:meth:`extract`) between steps.
* :class:`PrefixCache` keeps finished turns' keys/values keyed by the token ids they cover,
  bounded in bytes (least recently used entries go first). A new turn of an episode is
  ``previous context + sampled ids + observation ids``, so its longest stored prefix is
  the previous turn and only the new suffix is prefilled. Entries an episode owns move
  back into the batch when it continues (taken, not copied); *shared* entries (a prompt
  prefix common to several requests, e.g. the system prompt) stay until evicted.

Only models whose cache is one plain keys/values pair per layer can use this (see
:func:`supports_kv_reuse`); the engine falls back to full prefill for the others.
Heavy (torch, transformers): imported lazily by :mod:`agents.engines.hf`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = ["KV", "BatchCache", "PrefixCache", "common_prefix", "supports_kv_reuse"]

#: One sequence's keys/values: per layer ``(keys, values)``, each ``[kv_heads, tokens, dim]``.
KV = list[tuple[torch.Tensor, torch.Tensor]]

_HEADROOM = 64  # spare columns per allocation: a decode step writes one


def supports_kv_reuse(model: Any) -> bool:
    """Whether ``model`` keeps one full-attention keys/values pair per layer.

    Sliding-window, chunked, linear-attention (Mamba-style) and KV-sharing layers keep
    state that a prefix cut or a padded gap would corrupt, and models that are not
    transformers models (test doubles, wrappers) may ignore the cache they are handed.
    """
    try:
        from transformers import DynamicCache, PreTrainedModel
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # pragma: no cover - transformers is what loads the model
        return False
    config = getattr(model, "config", None)
    if not isinstance(model, PreTrainedModel) or config is None:
        return False
    if getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager", None):
        return False  # flash/flex kernels take padding from the mask differently
    try:
        probe = DynamicCache(config=config)
    except Exception:
        return False
    return all(type(layer) is DynamicLayer for layer in probe.layers)


class _BufferLayer(CacheLayerMixin):
    """One layer's keys/values in a buffer with spare capacity; ``length`` columns used."""

    is_sliding = False

    def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None,
                 length: int = 0, capacity_hint: int = 0) -> None:
        super().__init__()
        self.buffer_keys, self.buffer_values = keys, values
        self.length = length
        self.capacity_hint = capacity_hint
        if keys is not None and values is not None:
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self._publish()

    def _publish(self) -> None:
        self.keys = self.buffer_keys[:, :, : self.length]
        self.values = self.buffer_values[:, :, : self.length]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        capacity = max(self.capacity_hint, key_states.shape[-2] + _HEADROOM)
        self.buffer_keys = _alloc(key_states, key_states.shape[0], capacity)
        self.buffer_values = _alloc(value_states, value_states.shape[0], capacity)
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.buffer_keys.shape[-2]:
            self._grow(end)
        self.buffer_keys[:, :, self.length : end] = key_states
        self.buffer_values[:, :, self.length : end] = value_states
        self.length = end
        self._publish()
        return self.keys, self.values

    def _grow(self, needed: int) -> None:
        capacity = max(needed + _HEADROOM, self.buffer_keys.shape[-2] * 3 // 2)
        for name in ("buffer_keys", "buffer_values"):
            old = getattr(self, name)
            new = _alloc(old, old.shape[0], capacity)
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1


def _alloc(like: torch.Tensor, rows: int, capacity: int, zero: bool = False) -> torch.Tensor:
    shape = (rows, like.shape[-3], capacity, like.shape[-1])
    return like.new_zeros(shape) if zero else like.new_empty(shape)


class BatchCache(Cache):
    """The running batch's keys/values plus ``mask`` ([rows, width], 1 = a real token).

    Invariant: every layer holds exactly ``width`` columns; pad columns are finite (zeros
    or the keys/values of a pad token), so a masked-out column never turns into NaN.
    """

    def __init__(self, layers: list[_BufferLayer], mask: torch.Tensor) -> None:
        super().__init__(layers=layers)
        self.mask = mask

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    @property
    def width(self) -> int:
        return self.mask.shape[1]

    @classmethod
    def from_prefixes(cls, prefixes: list[KV | None], num_layers: int, extra: int,
                      device: Any) -> BatchCache:
        """Rows starting from stored prefixes (None: from nothing), right-aligned so the
        tokens about to be prefilled (``extra`` columns, at most) follow each row's own."""
        lengths = [0 if p is None else p[0][0].shape[1] for p in prefixes]
        width = max(lengths, default=0)
        mask = torch.zeros((len(prefixes), width), dtype=torch.long, device=device)
        if width == 0:
            return cls([_BufferLayer(capacity_hint=extra + _HEADROOM) for _ in range(num_layers)],
                       mask)
        sample = next(p for p, n in zip(prefixes, lengths, strict=True) if n)
        layers = []
        for index in range(num_layers):
            keys = _alloc(sample[index][0], len(prefixes), width + extra + _HEADROOM, zero=True)
            values = _alloc(sample[index][1], len(prefixes), width + extra + _HEADROOM, zero=True)
            for row, (prefix, n) in enumerate(zip(prefixes, lengths, strict=True)):
                if n:
                    keys[row, :, width - n : width] = prefix[index][0]
                    values[row, :, width - n : width] = prefix[index][1]
            layers.append(_BufferLayer(keys, values, width))
        for row, n in enumerate(lengths):
            mask[row, width - n :] = 1
        return cls(layers, mask)

    @classmethod
    def concat(cls, parts: list[BatchCache]) -> BatchCache:
        """Stack batches row-wise; each part is right-aligned (left-padded) to the widest."""
        if len(parts) == 1:
            return parts[0]
        width = max(p.width for p in parts)
        rows = sum(p.rows for p in parts)
        layers = []
        for index in range(len(parts[0].layers)):
            first = parts[0].layers[index]
            keys = _alloc(first.buffer_keys, rows, width + _HEADROOM, zero=True)
            values = _alloc(first.buffer_values, rows, width + _HEADROOM, zero=True)
            start = 0
            for part in parts:
                layer, w = part.layers[index], part.width
                keys[start : start + part.rows, :, width - w : width] = layer.buffer_keys[:, :, :w]
                values[start : start + part.rows, :, width - w : width] = (
                    layer.buffer_values[:, :, :w])
                start += part.rows
            layers.append(_BufferLayer(keys, values, width))
        mask = parts[0].mask.new_zeros((rows, width))
        start = 0
        for part in parts:
            mask[start : start + part.rows, width - part.width :] = part.mask
            start += part.rows
        return cls(layers, mask)

    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order), dropping columns no kept row uses."""
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        used = mask.any(0).nonzero()
        start = int(used[0]) if len(used) else mask.shape[1]
        for layer in self.layers:
            if start == 0:  # one copy, capacity kept
                layer.buffer_keys = layer.buffer_keys.index_select(0, index)
                layer.buffer_values = layer.buffer_values.index_select(0, index)
            else:
                for name in ("buffer_keys", "buffer_values"):
                    old = getattr(layer, name)
                    kept = old[:, :, start : layer.length].index_select(0, index)
                    new = _alloc(kept, len(rows), kept.shape[-2] + _HEADROOM)
                    new[:, :, : kept.shape[-2]] = kept
                    setattr(layer, name, new)
                layer.length -= start
            layer._publish()
        self.mask = mask[:, start:]

    def extract(self, row: int) -> KV:
        """Row ``row``'s real columns, in order, as a compact copy."""
        columns = self.mask[row].nonzero().squeeze(1)
        first, count = (int(columns[0]), columns.numel()) if columns.numel() else (0, 0)
        contiguous = count and int(columns[-1]) - first + 1 == count
        out: KV = []
        for layer in self.layers:
            if contiguous:
                keys = layer.buffer_keys[row, :, first : first + count].clone()
                values = layer.buffer_values[row, :, first : first + count].clone()
            else:
                keys = layer.buffer_keys[row].index_select(1, columns)
                values = layer.buffer_values[row].index_select(1, columns)
            out.append((keys, values))
        return out

    def complete(self) -> bool:
        """Whether every layer really holds ``width`` columns (the model used this cache)."""
        return all(layer.length == self.width for layer in self.layers)


@dataclass(slots=True)
class _Entry:
    key: tuple[int, ...]
    ids: np.ndarray
    kv: KV
    nbytes: int
    shared: bool


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two id arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class PrefixCache:
    """Stored keys/values keyed by token-id prefix; thread-safe; ``max_bytes=0`` disables it."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes={max_bytes}; must be >= 0 (0 disables reuse)")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.hits = 0
        self.evictions = 0
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def _best(self, ids: np.ndarray) -> tuple[_Entry | None, int]:
        """The entry sharing the longest prefix with ``ids``, and that prefix's length."""
        best, length = None, 0
        for entry in reversed(self._entries.values()):  # most recent first wins ties
            n = common_prefix(entry.ids, ids)
            if n > length:
                best, length = entry, n
        return best, length

    def match_length(self, ids: list[int]) -> int:
        """How many leading tokens of ``ids`` a :meth:`take` would reuse now."""
        with self._lock:
            if not self._entries:
                return 0
            return min(self._best(np.asarray(ids, dtype=np.int64))[1], len(ids) - 1)

    def take(self, ids: list[int]) -> tuple[KV | None, int]:
        """The stored keys/values of the longest prefix of ``ids`` (at most ``len(ids)-1``
        tokens: one must be fed to get logits) and its length. An episode's own entry (all
        of it a prefix of ``ids``) is handed over and removed; a shared or partly matching
        entry stays for others."""
        with self._lock:
            if not self._entries or len(ids) < 2:
                return None, 0
            entry, common = self._best(np.asarray(ids, dtype=np.int64))
            length = min(common, len(ids) - 1)
            if entry is None or length < 1:
                return None, 0
            if not entry.shared and common == len(entry.ids):
                del self._entries[entry.key]
                self.nbytes -= entry.nbytes
            else:
                self._entries.move_to_end(entry.key)
            self.hits += 1
            return [(k[:, :length], v[:, :length]) for k, v in entry.kv], length

    def put(self, ids: list[int], kv: KV, shared: bool = False) -> bool:
        """Store ``kv`` (covering exactly ``ids``); False when disabled or too large."""
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if not self.enabled or nbytes > self.max_bytes or len(ids) < 2:
            return False
        key = tuple(ids)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
                shared = shared or old.shared
            self._entries[key] = _Entry(key, np.asarray(ids, dtype=np.int64), kv, nbytes, shared)
            self.nbytes += nbytes
            while self.nbytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.nbytes -= evicted.nbytes
                self.evictions += 1
        return True

    def release(self, ids: list[int] | tuple[int, ...]) -> int:
        """Drop the entries an episode that ended with context ``ids`` owns (every
        non-shared entry that is a prefix of ``ids``); returns how many."""
        array = np.asarray(ids, dtype=np.int64)
        with self._lock:
            gone = [key for key, e in self._entries.items()
                    if not e.shared and len(e.ids) <= len(array)
                    and common_prefix(e.ids, array) == len(e.ids)]
            for key in gone:
                self.nbytes -= self._entries.pop(key).nbytes
        return len(gone)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0
