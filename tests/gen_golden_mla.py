#!/usr/bin/env python3
"""Writes the golden cases of multi-head latent attention (issue 34) in tests/data/, from HF
transformers' own DeepseekV3Attention, and checks in float64 that the absorbed form mha will
run (DESIGN.md "Multi-head latent attention") gives the module's output.

Run `make goldens-mla` (the venv of `make goldens-hf`). Each module is built from a small
random config (no hub downloads), weights drawn with torch's seed, and called as the model
calls it: eager attention, float32, its own rotary embedding, an additive causal mask. Each
case writes NAME.safetensors (the module's state_dict under model.layers.0.self_attn., as HF
saves a model), NAME.yaml (mha's config of the layer: model.mla and model.rope keys), NAME.json
(the HF config fields), NAME_x.npy (the input, (batch, seq, hidden)) and NAME_out.npy (the
output).

The absorbed form, per head h (kv_b_proj's rows of head h split into W_uk (nope × kv_lora) and
W_uv (v × kv_lora)):
    q_lat = W_ukᵀ · q_nope                      (kv_lora)
    score(t) = scale · (q_lat · c_t + q_rope · k_rope_t)
    out_h = W_uv · Σ_t softmax(score)_t · c_t    (v)
with c_t the normed latent and k_rope_t the rotated shared key of token t: attention with one
KV head of d_qk = kv_lora + rope whose V is the first kv_lora features of its K, every query
head a row of one pass.

Cases:
  mla_lora     q through q_a_proj, q_a_layernorm and q_b_proj (q_lora_rank 24), DeepSeek's
               interleaved RoPE, yarn with mscale_all_dim (the softmax scale times mscale²),
               v_head_dim 6 against qk_nope_head_dim 8, 4 heads in a 64-wide model
  mla_qproj    q_proj (q_lora_rank None), rotate-half RoPE (rope_interleave false), default
               RoPE, attention biases, 3 heads
Arguments: the cases to write (default: all).
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

from gen_golden_hf import BATCH, HERE, PREFIX, SEQ, additive_mask, randomize

# The absorbed form in float64 against HF's module run in float64: HF's RMSNorm computes in
# float32 whatever the module's dtype (7.9e-8 measured), so float32's rounding, not 1e-15.
ABSORBED_TOL = 1e-6


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_rotate(x, cos, sin, interleave):
    """HF's rotation of the rope features (x: (..., seq, r), cos/sin: (seq, r)), in float64; the
    interleaved form in HF's own output order (its even/odd slices, then concatenated)."""
    if interleave:
        x = np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def absorbed(attn, cfg, x, cos, sin):
    """The module's output by the absorbed form, float64 numpy (x: (batch, seq, hidden))."""
    W = {k: v.detach().double().numpy() for k, v in attn.state_dict().items()}
    h, nope, r, vd, kl = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    eps = cfg.rms_norm_eps
    lin = lambda a, name: a @ W[name + ".weight"].T + (W[name + ".bias"] if name + ".bias" in W else 0.0)
    if cfg.q_lora_rank is None:
        q = lin(x, "q_proj")
    else:
        q = lin(rms(lin(x, "q_a_proj"), W["q_a_layernorm.weight"], eps), "q_b_proj")
    q = q.reshape(x.shape[0], x.shape[1], h, nope + r)
    q_nope, q_rope = q[..., :nope], q[..., nope:]
    kv = lin(x, "kv_a_proj_with_mqa")
    c = rms(kv[..., :kl], W["kv_a_layernorm.weight"], eps)           # (b, s, kl): the latent cache
    k_rope = rope_rotate(kv[..., kl:], cos, sin, cfg.rope_interleave)  # (b, s, r): shared by every head
    q_rope = rope_rotate(q_rope.transpose(0, 2, 1, 3), cos, sin, cfg.rope_interleave).transpose(0, 2, 1, 3)
    wb = W["kv_b_proj.weight"].reshape(h, nope + vd, kl)
    w_uk, w_uv = wb[:, :nope, :], wb[:, nope:, :]                     # (h, nope, kl), (h, v, kl)
    q_lat = np.einsum("bshn,hnl->bshl", q_nope, w_uk)                  # q_nope into latent space
    scores = (np.einsum("bshl,btl->bhst", q_lat, c) + np.einsum("bshr,btr->bhst", q_rope, k_rope)) * attn.scaling
    scores = scores + additive_mask(x.shape[1]).double().numpy()
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    lat = np.einsum("bhst,btl->bshl", p, c)                            # values summed in latent space
    z = np.einsum("bshl,hvl->bshv", lat, w_uv).reshape(x.shape[0], x.shape[1], h * vd)
    return lin(z, "o_proj")


def yaml_config(name, cfg, comment):
    """mha's config of the layer: the HF fields as model.mla and model.rope keys."""
    rp = cfg.rope_parameters
    rope = "{ style: %s, theta: %g" % ("gptj" if cfg.rope_interleave else "neox", rp["rope_theta"])
    if rp["rope_type"] == "yarn":
        rope += (", scaling: yarn, factor: %g, beta_fast: %g, beta_slow: %g, mscale: %g, mscale_all_dim: %g, "
                 "original_max_position: %d" % (rp["factor"], rp["beta_fast"], rp["beta_slow"], rp["mscale"],
                                                rp["mscale_all_dim"], rp["original_max_position_embeddings"]))
    rope += " }"
    return ("# %s (tests/gen_golden_mla.py)\nname: %s\nmodel:\n  d_model: %d\n  heads: %d\n  bias: %s\n"
            "  mla: { kv_lora_rank: %d, q_lora_rank: %d, qk_nope_head_dim: %d, qk_rope_head_dim: %d, v_head_dim: %d, "
            "eps: %g }\n  rope: %s\nbatch: { size: %d, seq_len: %d, mask: causal }\n"
            % (comment, name, cfg.hidden_size, cfg.num_attention_heads, "true" if cfg.attention_bias else "false",
               cfg.kv_lora_rank, cfg.q_lora_rank or 0, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
               cfg.rms_norm_eps, rope, BATCH, SEQ))


def case(name, cfg, comment, seed):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding
    cfg._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(seed)
    attn = DeepseekV3Attention(cfg, layer_idx=0).eval()
    randomize(attn, gen)
    rope = DeepseekV3RotaryEmbedding(cfg)
    x = torch.rand(BATCH, SEQ, cfg.hidden_size, generator=gen) * 4 - 2
    pos = torch.arange(SEQ)[None].expand(BATCH, -1)
    cos, sin = rope(x, pos)
    with torch.no_grad():
        out = attn(hidden_states=x, position_embeddings=(cos, sin), attention_mask=additive_mask(SEQ))[0]
        attn64 = attn.double()
        ref = attn64(hidden_states=x.double(), position_embeddings=(cos.double(), sin.double()),
                     attention_mask=additive_mask(SEQ).double())[0].numpy()
        attn.float()
    mine = absorbed(attn, cfg, x.double().numpy(), cos[0].double().numpy(), sin[0].double().numpy())
    err = np.linalg.norm(mine - ref) / np.linalg.norm(ref)
    assert err < ABSORBED_TOL, "%s: the absorbed form is %.3g from HF's module in float64" % (name, err)
    state = {PREFIX + k: v.detach().clone().contiguous() for k, v in attn.state_dict().items()}
    save_file(state, os.path.join(HERE, name + ".safetensors"))
    np.save(os.path.join(HERE, name + "_x.npy"), x.numpy().astype("<f4"))
    np.save(os.path.join(HERE, name + "_out.npy"), out.numpy().astype("<f4"))
    fields = ("hidden_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
              "qk_rope_head_dim", "v_head_dim", "rms_norm_eps", "rope_interleave", "attention_bias", "rope_parameters")
    meta = {k: getattr(cfg, k) for k in fields}
    meta.update({"comment": comment, "scaling": attn.scaling, "batch": BATCH, "seq": SEQ, "mask": "causal",
                 "prefix": PREFIX, "absorbed_rel_error_float64": err})
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1, default=float)
        f.write("\n")
    with open(os.path.join(HERE, name + ".yaml"), "w") as f:
        f.write(yaml_config(name, cfg, comment))
    print("wrote %s (absorbed form against the module in float64: %.2g)" % (name, err))


def mla_lora():
    from transformers import DeepseekV3Config
    cfg = DeepseekV3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24,
                           kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
                           rms_norm_eps=1e-6, rope_interleave=True, attention_bias=False, max_position_embeddings=2560,
                           rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                            "original_max_position_embeddings": 64})
    case("mla_lora", cfg, "HF DeepseekV3Attention: q_lora 24, kv_lora 16, nope 8, rope 4 (interleaved, yarn with "
         "mscale_all_dim), v 6, 4 heads", seed=11)


def mla_qproj():
    from transformers import DeepseekV3Config
    cfg = DeepseekV3Config(hidden_size=48, num_attention_heads=3, num_key_value_heads=3, q_lora_rank=None,
                           kv_lora_rank=12, qk_nope_head_dim=10, qk_rope_head_dim=6, v_head_dim=10,
                           rms_norm_eps=1e-6, rope_interleave=False, attention_bias=True, max_position_embeddings=64,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    case("mla_qproj", cfg, "HF DeepseekV3Attention: q_proj (no q_lora), kv_lora 12, nope 10, rope 6 (rotate-half), "
         "v 10, biases, 3 heads", seed=12)


if __name__ == "__main__":
    torch.set_num_threads(1)
    for fn in (mla_lora, mla_qproj):
        if len(sys.argv) < 2 or fn.__name__ in sys.argv[1:]:
            fn()
