"""mha from Python: libmha's batched multi-head attention engine.

    import numpy as np, mha
    e = mha.Engine({"model": {"d_model": 256, "heads": 4},
                    "batch": {"size": 2, "seq_len": 64}, "threads": {"count": 2}})
    e.set_weights(w_q, w_k, w_v, w_o)            # float32, (out, in) as nn.Linear holds them
    y = e.forward(x, causal=True)                # x (batch, seq, d_model) float32 -> y the same

An Engine is made from a config: a dict shaped like the YAML files (docs/config.md: "model",
"engine", "batch", "threads", "weights" sections) or a YAML file's path. Arrays are numpy's (a
torch CPU tensor is taken through .numpy(), another DLPack producer's inputs through
np.from_dlpack, no copy): float32 and C-contiguous as the engine reads them, or converted once
(a copy) when they are not (core: any strides). Every call checks its arrays' shapes against
the config before the engine reads them, runs with the GIL released, and raises
MhaError(message, status) with the engine's own message when the engine refuses. One engine
serves one call at a time: calls from several threads wait their turn.
"""
import json
import os
import sys

import numpy as np

from . import _mha
from ._mha import MhaError

__all__ = ["Engine", "KVCache", "MhaError", "info", "__version__"]
__version__ = _mha.info()["version"]


def info():
    """The library and this machine as `mha info` shows them: version, the kernel table and bf16
    kernel an engine would take here, BLIS, L2, and each table's description."""
    return _mha.info()


def _array(a):
    """An array's memory as numpy, no copy: a torch CPU tensor through .numpy() (bfloat16 as its
    bits, uint16), another DLPack producer (JAX, CuPy's host arrays, ...) through
    np.from_dlpack (read-only: inputs), numpy's as it is."""
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "detach") and hasattr(a, "numpy"):  # torch's: imported already
        torch = sys.modules["torch"]
        if a.requires_grad:
            a = a.detach()
        if a.dtype is torch.bfloat16:
            return a.view(torch.int16).numpy().view(np.uint16)
        return a.numpy()
    if hasattr(a, "__dlpack__"):
        return np.from_dlpack(a)
    return np.asarray(a)


def _f32(a, name):
    a = _array(a)
    if a.dtype != np.float32:
        raise TypeError(f"{name}: dtype {a.dtype}; float32 is needed")
    return np.ascontiguousarray(a)


def _i32(a, name, n):
    if a is None:
        return None
    a = np.ascontiguousarray(np.asarray(a), dtype=np.int32)
    if a.shape != (n,):
        raise ValueError(f"{name}: shape {a.shape}; ({n},) is needed")
    return a


def _shape3(a, name, d):
    if a.ndim != 3 or a.shape[2] != d:
        raise ValueError(f"{name}: shape {a.shape}; (batch, rows, {d}) is needed")
    return a.shape


class Engine:
    """An engine of one config (its capacity: batch, sequence lengths, heads, precision)."""

    def __init__(self, config):
        if isinstance(config, (str, os.PathLike)):
            self._e = _mha.engine_new(os.fspath(config), os.fspath(config), True)
        elif isinstance(config, dict):
            self._e = _mha.engine_new(json.dumps(config), "the config dict", False)
        else:
            raise TypeError("config: a dict shaped like the YAML files, or a YAML file's path")
        self.info = _mha.engine_info(self._e)
        self._dv = self.info["v_head_dim"]

    def __repr__(self):
        i = self.info
        return (f"mha.Engine(d_model={i['d_model']}, heads={i['n_heads']}/{i['n_kv_heads']}, "
                f"head_dim={i['head_dim']}, precision={i['precision']}, isa={i['isa']}, kernel={i['kernel']}, "
                f"threads={i['threads']})")

    def set_weights(self, w_q, w_k, w_v, w_o, b_q=None, b_k=None, b_v=None, b_o=None, q_norm=None, k_norm=None,
                    sinks=None, layout="torch"):
        """The projections as float32 arrays (copied and packed): layout "torch", each W (out, in)
        as nn.Linear holds it, or "xw", each (in, out). Biases, QK-norm weights and sinks where
        the config has them."""
        if layout not in ("torch", "xw"):
            raise ValueError(f"layout: '{layout}'; 'torch' or 'xw'")
        arrays = [w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, q_norm, k_norm, sinks]
        names = ["w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "q_norm", "k_norm", "sinks"]
        arrays = [None if a is None else _f32(a, n) for a, n in zip(arrays, names)]
        _mha.engine_set_weights(self._e, layout == "torch", *arrays)

    def forward(self, q, k=None, v=None, causal=False, q_lengths=None, kv_lengths=None, mask=None, out=None):
        """The layer: projections, attention, output projection. q (batch, seq_q, d_model); k and
        v (batch, seq_kv, d_model), or None for self-attention (q itself). causal aligns as
        PyTorch (bottom right); q_lengths, kv_lengths (batch,) pad; mask (seq_q, seq_kv), 0
        hidden. Returns out (batch, seq_q, d_model), or fills the float32 array given."""
        d = self.info["d_model"]
        q = _f32(q, "q")
        batch, seq_q, _ = _shape3(q, "q", d)
        k = q if k is None else _f32(k, "k")
        v = k if v is None else _f32(v, "v")
        _, seq_kv, _ = _shape3(k, "k", d)
        if v.shape != k.shape or k.shape[0] != batch:
            raise ValueError(f"k {k.shape} and v {v.shape}: the same (batch {batch}, seq_kv, {d}) are needed")
        if mask is not None:
            mask = np.ascontiguousarray(np.asarray(mask), dtype=np.uint8)
            if mask.shape != (seq_q, seq_kv):
                raise ValueError(f"mask: shape {mask.shape}; ({seq_q}, {seq_kv}) is needed")
        out = np.empty((batch, seq_q, d), np.float32) if out is None else out
        _mha.engine_forward(self._e, q, k, v, out, batch, seq_q, seq_kv, bool(causal),
                            _i32(q_lengths, "q_lengths", batch), _i32(kv_lengths, "kv_lengths", batch), mask)
        return out

    def core(self, q, k, v, causal=False, q_lengths=None, kv_lengths=None, mask=None, sinks=None, layout="bhsd",
             out=None):
        """The attention core alone, as PyTorch's SDPA: q (batch, heads, seq_q, head_dim), k and v
        (batch, kv_heads, seq_kv, head_dim) for layout "bhsd" (SDPA's), or (batch, seq, heads,
        head_dim) for "bshd" (HF's); read where they lie, whatever their strides (the features
        contiguous). float32, or bfloat16 (torch's, or its bits as uint16 arrays) in a bf16 engine.
        Returns out in q's layout (v_head_dim), or fills the array or tensor given (any strides)."""
        if layout not in ("bhsd", "bshd"):
            raise ValueError(f"layout: '{layout}'; 'bhsd' or 'bshd'")
        q, k, v = _array(q), _array(k), _array(v)
        bf16 = q.dtype == np.uint16
        if out is None:
            s = q.shape
            out = np.empty(s[:3] + (self._dv,) if len(s) == 4 else s, q.dtype)
        self._core_arrays(q, k, v, _array(out), layout == "bshd", bf16, causal, q_lengths, kv_lengths, mask, sinks)
        return out

    def _core_arrays(self, q, k, v, out, bshd, bf16, causal, q_lengths=None, kv_lengths=None, mask=None, sinks=None):
        """core on numpy arrays (bf16: their uint16 bits) and out given: what mha.ops calls."""
        n = q.shape[0] if q.ndim else 0
        _mha.engine_core(self._e, q, k, v, out, bshd, bf16, bool(causal), _i32(q_lengths, "q_lengths", n),
                         _i32(kv_lengths, "kv_lengths", n),
                         None if mask is None else np.ascontiguousarray(mask, dtype=np.uint8),
                         None if sinks is None else _f32(sinks, "sinks"))

    def step(self, cache, x, n_past, n_new, blocks):
        """One step through a KVCache: sequence s has n_past[s] tokens cached and brings n_new[s]
        (x's rows, sequence after sequence: (Σ n_new, d_model)); blocks (n_seqs, max_blocks) its
        cache blocks in position order. Returns the new tokens' outputs (Σ n_new, d_model)."""
        if not isinstance(cache, KVCache) or cache._engine is not self:
            raise TypeError("cache: a KVCache made for this engine")
        x = _f32(x, "x")
        d = self.info["d_model"]
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(f"x: shape {x.shape}; (new tokens, {d}) is needed")
        blocks = np.ascontiguousarray(np.asarray(blocks), dtype=np.int32)
        if blocks.ndim != 2:
            raise ValueError(f"blocks: shape {blocks.shape}; (n_seqs, max_blocks) is needed")
        n = blocks.shape[0]
        out = np.empty_like(x)
        _mha.engine_step(self._e, cache._c, n, _i32(n_past, "n_past", n), _i32(n_new, "n_new", n), blocks,
                         blocks.shape[1], x.shape[0], x, out)
        return out


class KVCache:
    """A paged KV cache for an engine's steps: n_blocks blocks of block_size positions, up to
    max_seqs sequences (docs/decoder.md)."""

    def __init__(self, engine, n_blocks, block_size, max_seqs=1):
        self._engine = engine
        self._c = _mha.cache_new(engine._e, int(n_blocks), int(block_size), int(max_seqs))
