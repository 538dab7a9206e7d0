"""mha inside HF transformers: `mha.hf.register()` adds "mha" to transformers' AttentionInterface
(and the boolean masks it takes to its AttentionMaskInterface), so that

    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="mha")

runs every attention call of the model on mha's attention core (the op torch.ops.mha.attention:
mha/ops.py): Q, K and V as the model's attention module made them (after projection, RoPE,
QK-norm), GQA as the module's KV heads, its scaling, softcap and sinks (gpt-oss's s_aux),
float32 or bfloat16. Masks come as
sdpa's: none (causal, or none at all) or boolean (batch, 1, q, kv), taken as mha's mask where
the batch's rows agree and sequence by sequence where they do not (padding).

What it cannot compute raises, never falls back: dropout in training, an additive float mask
(a position bias), a mask per head. Engines are made once per shape class (heads, KV heads,
head dims, scale, softcap, sinks, precision: mha/ops.py) and grown, never per call.
"""
import torch

from . import ops


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, softcap=None,
              s_aux=None, **kwargs):
    """transformers' attention function contract: query (batch, heads, q, head_dim), key and value
    (batch, kv_heads, kv, head_dim); returns ((batch, q, heads, v_head_dim), None). The op checks
    the tensors' dtype and device."""
    if dropout and module.training:
        raise NotImplementedError("mha attention: dropout in training is not computed (inference only)")
    if kwargs.get("position_bias") is not None:
        raise NotImplementedError("mha attention: a position bias (an additive float mask) is not computed")
    batch, _, seq_q, dk = query.shape
    seq_kv = key.shape[2]
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
    scale = float(scaling) if scaling is not None else dk ** -0.5
    # the op where torch.compile traces (one node), the function itself where code runs eagerly
    op = torch.ops.mha.attention if torch.compiler.is_compiling() else ops.run
    return op(query, key, value, mask, causal, scale, float(softcap or 0.0), s_aux), None


def register(name="mha"):
    """Registers `name` with transformers' AttentionInterface and, for its masks, sdpa's mask
    function (boolean, or none where causal alone says it) with the AttentionMaskInterface."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, sdpa_mask)
