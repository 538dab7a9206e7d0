"""mha inside HF transformers: `mha.hf.register()` adds "mha" to transformers' AttentionInterface
(and the boolean masks it takes to its AttentionMaskInterface), so that

    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="mha")

runs every attention call of the model on mha's attention core (Engine.core): Q, K and V as the
model's attention module made them (after projection, RoPE, QK-norm), GQA as the module's KV
heads, its scaling, softcap and sinks (gpt-oss's s_aux), float32 or bfloat16. Masks come as
sdpa's: none (causal, or none at all) or boolean (batch, 1, q, kv), taken as mha's mask where
the batch's rows agree and sequence by sequence where they do not (padding).

What it cannot compute raises, never falls back: dropout in training, an additive float mask
(a position bias), a mask per head. Engines are made once per shape class (heads, KV heads,
head dims, scale, softcap, sinks, precision) and grown, never per call.
"""
import numpy as np

from . import Engine

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


def _numpy(t, bf16):
    """A torch CPU tensor's memory as numpy, strides kept (bfloat16 as its bits, uint16)."""
    import torch
    if bf16:
        return t.detach().view(torch.int16).numpy().view(np.uint16)
    return t.detach().numpy()


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, softcap=None,
              s_aux=None, **kwargs):
    """transformers' attention function contract: query (batch, heads, q, head_dim), key and value
    (batch, kv_heads, kv, head_dim); returns ((batch, q, heads, v_head_dim), None)."""
    import torch
    if dropout and module.training:
        raise NotImplementedError("mha attention: dropout in training is not computed (inference only)")
    if kwargs.get("position_bias") is not None:
        raise NotImplementedError("mha attention: a position bias (an additive float mask) is not computed")
    if query.dtype not in (torch.float32, torch.bfloat16) or key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(f"mha attention: float32 or bfloat16 tensors; got {query.dtype}, {key.dtype}, {value.dtype}")
    if query.device.type != "cpu":
        raise ValueError(f"mha attention: CPU tensors; got {query.device}")
    batch, heads, seq_q, dk = query.shape
    kvh, seq_kv, dv = key.shape[1], key.shape[2], value.shape[3]
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    mask = None
    if attention_mask is not None:
        if attention_mask.dtype != torch.bool:
            raise NotImplementedError("mha attention: boolean masks only (register() installs sdpa's); an additive "
                                      "float mask is not computed")
        if attention_mask.shape[1] != 1:
            raise NotImplementedError("mha attention: one mask for all heads")
        mask = attention_mask.expand(batch, 1, seq_q, seq_kv)[:, 0]
        causal = False
    else:  # sdpa's reading of no mask: causal over the first q_length keys when there are more
        causal = causal and seq_q > 1
        if causal and seq_kv > seq_q:
            key, value, seq_kv = key[:, :, :seq_q], value[:, :, :seq_q], seq_q
    bf16 = query.dtype == torch.bfloat16
    scale = float(scaling) if scaling is not None else dk ** -0.5
    sinks = None if s_aux is None else s_aux.detach().to(torch.float32).contiguous().numpy()
    e = _engine((heads, kvh, dk, dv, scale, float(softcap or 0.0), sinks is not None, bf16), batch, seq_q, seq_kv)
    out = torch.empty(batch, seq_q, heads, dv, dtype=query.dtype)
    q, k, v, o = (_numpy(t, bf16) for t in (query, key, value, out))
    ov = o.transpose(0, 2, 1, 3)  # out written through a (batch, heads, q, dv) view of HF's layout
    if mask is None:
        e.core(q, k, v, causal=causal, sinks=sinks, out=ov)
    else:
        m = mask.numpy()
        if (m == m[:1]).all():  # one mask for the batch
            e.core(q, k, v, mask=m[0], sinks=sinks, out=ov)
        else:  # padding differs: sequence by sequence, each with its own rows of the mask
            for b in range(batch):
                e.core(q[b:b + 1], k[b:b + 1], v[b:b + 1], mask=m[b], sinks=sinks, out=ov[b:b + 1])
    return out, None


def register(name="mha"):
    """Registers `name` with transformers' AttentionInterface and, for its masks, sdpa's mask
    function (boolean, or none where causal alone says it) with the AttentionMaskInterface."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, sdpa_mask)
