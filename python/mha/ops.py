"""torch.ops.mha.attention: mha's attention core as a torch op (torch.library), with a fake kernel
for its shapes, so that torch.compile keeps it as one node of a graph (and traces around it).

    out = torch.ops.mha.attention(query, key, value, mask, causal, scale, softcap, sinks)

query (batch, heads, q, head_dim), key and value (batch, kv_heads, kv, head_dim / v_head_dim),
float32 or bfloat16 CPU tensors, read where they lie (any strides with the last dimension
contiguous); mask None or boolean (batch, q, kv), True where a query sees a key; causal
(bottom-right aligned, as mha and PyTorch's SDPA with is_causal); scale; softcap (0: none); sinks
None or (heads,) logits. Returns (batch, q, heads, v_head_dim), transformers' layout for an
attention function's output. mha.hf's attention function is this op.
"""
from typing import Optional

import numpy as np
import torch

from . import Engine, _array

_engines = {}


def _engine(key, batch, seq_q, seq_kv):
    """The engine of a shape class, big enough for the call (capacities doubled as they grow)."""
    held = _engines.get(key)
    if held and held[1] >= batch and held[2] >= seq_q and held[3] >= seq_kv:
        return held[0]
    grow = lambda n, old: max(n, 2 * old if old else 16)
    cap = (grow(batch, held[1] if held else 0), grow(seq_q, held[2] if held else 0),
           grow(seq_kv, held[3] if held else 0))
    h, kvh, dk, dv, scale, softcap, sinks, bf16 = key
    model = {"d_model": h * dk, "heads": h, "kv_heads": kvh, "head_dim": dk, "bias": False, "scale": scale,
             "softcap": softcap, "sinks": sinks}
    if dv != dk:
        model["v_head_dim"] = dv
    e = Engine({"model": model, "engine": {"precision": "bf16" if bf16 else "f32"},
                "batch": {"size": cap[0], "seq_len": cap[1], "kv_len": cap[2]}})
    _engines[key] = (e, *cap)
    return e


def run(query, key, value, mask, causal, scale, softcap, sinks):
    """The op's computation, called as a function: what eager code calls (mha.hf does), without
    the op's dispatch (tens of microseconds a call, a decode step's attention's fifth). Kept
    lean: at decode every Python step here is a visible share of the call."""
    dt = query.dtype
    if (dt is not torch.float32 and dt is not torch.bfloat16) or key.dtype is not dt or value.dtype is not dt:
        raise TypeError(f"mha attention: float32 or bfloat16 tensors; got {query.dtype}, {key.dtype}, {value.dtype}")
    if query.device.type != "cpu":
        raise ValueError(f"mha attention: CPU tensors; got {query.device}")
    batch, heads, seq_q, dk = query.shape
    kvh, seq_kv, dv = key.shape[1], key.shape[2], value.shape[3]
    bf16 = dt is torch.bfloat16
    s = None if sinks is None else sinks.detach().to(torch.float32).contiguous().numpy()
    e = _engine((heads, kvh, dk, dv, float(scale), float(softcap), s is not None, bf16), batch, seq_q, seq_kv)
    out = torch.empty(batch, seq_q, heads, dv, dtype=dt)
    q, k, v, o = _array(query), _array(key), _array(value), _array(out)
    ov = o.transpose(0, 2, 1, 3)  # out written through a (batch, heads, q, dv) view of its layout
    if mask is None:
        e._core_arrays(q, k, v, ov, False, bf16, causal, sinks=s)
        return out
    if mask.dtype != torch.bool or tuple(mask.shape) != (batch, seq_q, seq_kv):
        raise ValueError(f"mha attention: mask {mask.dtype} {tuple(mask.shape)}; bool ({batch}, {seq_q}, {seq_kv})")
    m = mask.numpy()
    lengths = _key_padding(m, causal)
    if lengths is not None:  # padding at the end of each sequence's keys (an encoder's, or causal): one call
        e._core_arrays(q, k, v, ov, False, bf16, lengths[1], kv_lengths=lengths[0], sinks=s)
    elif (m == m[:1]).all():  # one mask for the batch
        e._core_arrays(q, k, v, ov, False, bf16, causal, mask=m[0], sinks=s)
    else:  # rows that differ otherwise (left padding): sequence by sequence, each with its own mask
        for b in range(batch):
            e._core_arrays(q[b:b + 1], k[b:b + 1], v[b:b + 1], ov[b:b + 1], False, bf16, causal, mask=m[b], sinks=s)
    return out


def _key_padding(m, causal):
    """(kv_lengths, causal) when the boolean mask m (batch, q, kv) is each sequence's first
    kv_lengths keys, seen by every query or causally (bottom-right, as mha), and more than that
    where asked; else None."""
    seq_q, seq_kv = m.shape[1], m.shape[2]
    lengths = m[:, -1, :].sum(axis=-1, dtype=np.int32)  # the last query sees the most keys
    keys = np.arange(seq_kv)[None, None, :] < lengths[:, None, None]
    if np.array_equal(m, np.broadcast_to(keys, m.shape)):
        return lengths, causal
    tri = np.arange(seq_kv)[None, :] <= np.arange(seq_q)[:, None] + (seq_kv - seq_q)
    if np.array_equal(m, keys & tri[None]):
        return lengths, True
    return None


@torch.library.custom_op("mha::attention", mutates_args=())
def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor],
              causal: bool, scale: float, softcap: float, sinks: Optional[torch.Tensor]) -> torch.Tensor:
    return run(query, key, value, mask, causal, scale, softcap, sinks)


@attention.register_fake
def _(query, key, value, mask, causal, scale, softcap, sinks):
    return query.new_empty(query.shape[0], query.shape[2], query.shape[1], value.shape[3])
