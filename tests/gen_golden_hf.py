#!/usr/bin/env python3
"""Writes the golden cases of current open models' attention in tests/data/, from HF
transformers' own attention modules (issue 21).

Run `make goldens-hf`: it makes a venv under tests/.venv with torch and transformers from PyPI
(for generating goldens only; the library and its tests need neither) and runs this script in
it. The files are committed. Every module is built from a small random config (no hub
downloads), weights drawn with torch's seed, and called as the model calls it: eager
attention, float32, its own rotary embedding class, an additive causal (or sliding-window)
mask as transformers' masking utilities build it. Each case writes NAME.safetensors (the
module's state_dict under the prefix model.layers.0.self_attn, as HF saves a model), NAME.yaml
(the mha config of the same layer), NAME_x.npy (the input) and NAME_out.npy (the output).

Cases and what they cover:
  qwen3_qknorm    Qwen3Attention: head_dim 32 in a 64-wide model (Q 128 wide), GQA 4/2,
                  q_norm / k_norm (RMSNorm over each head), RoPE
  gemma2_softcap  Gemma2Attention: query_pre_attn_scalar (scale ≠ 1/sqrt(head_dim)), logit
                  softcapping, a sliding-window layer, head_dim 32
  gemma3_qknorm   Gemma3Attention: QK-norm with Gemma's (1 + w), MQA, sliding window, scale
  gptoss_sinks    GptOssAttention: sinks, biases on every projection, a sliding-window layer,
                  head_dim 16 in a 64-wide model with 8 heads (Q 128 wide), GQA 8/2, and
                  gpt-oss's own yarn RoPE (factor 32, truncate: false)
  bloom_alibi     BloomAttention: ALiBi over 6 heads (not a power of two), the fused
                  query_key_value (rows as (heads, 3, head_dim)) and dense, with biases
  olmo2_qknorm    Olmo2Attention: QK-norm over the whole projection (q_norm of heads·head_dim,
                  k_norm of kv_heads·head_dim, before the heads split), GQA 4/2, head_dim 24
                  in a 64-wide model (Q 96 wide), RoPE theta 500000
Arguments: the cases to write (default: all).
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PREFIX = "model.layers.0.self_attn."
BATCH, SEQ = 2, 12


def additive_mask(seq, window=None):
    """(1, 1, seq, seq): 0 where query i sees key j (j <= i, and i - j < window), else the
    float32 minimum, as transformers' causal / sliding masks are in eager attention."""
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    seen = j <= i
    if window:
        seen &= i - j < window
    m = torch.zeros(seq, seq)
    m[~seen] = torch.finfo(torch.float32).min
    return m[None, None]


def randomize(module, gen):
    """Every parameter uniform in ±1/sqrt(fan-in) (vectors: around their init, so norm weights
    stay near 1 or 0 and sinks near 0 with spread), so each piece moves the output."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 2:
                bound = p.shape[1] ** -0.5
                p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound)
            elif name.endswith("norm.weight"):
                base = 0.0 if "gemma" in type(module).__name__.lower() else 1.0
                p.copy_(base + (torch.rand(p.shape, generator=gen) - 0.5))
            else:  # biases, sinks
                p.copy_(torch.rand(p.shape, generator=gen) * 2 - 1)


def write_case(name, module, x, out, yaml_text, comment):
    state = {PREFIX + k: v.detach().clone().contiguous() for k, v in module.state_dict().items()}
    save_file(state, os.path.join(HERE, name + ".safetensors"))
    np.save(os.path.join(HERE, name + "_x.npy"), x.numpy().astype("<f4"))
    np.save(os.path.join(HERE, name + "_out.npy"), out.detach().numpy().astype("<f4"))
    with open(os.path.join(HERE, name + ".yaml"), "w") as f:
        f.write("# tests/gen_golden_hf.py's %s: %s\n" % (name, comment))
        f.write("name: %s\n" % name)
        f.write(yaml_text)
        f.write("batch: { size: %d, seq_len: %d, mask: causal }\nrun:   { warmup: 0, iters: 1 }\n" % (BATCH, SEQ))


def decoder_case(name, attn_cls, rope_cls, config, yaml_text, comment, window=None, seed=0):
    config._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(seed)
    attn = attn_cls(config, layer_idx=0).eval()
    randomize(attn, gen)
    rope = rope_cls(config)
    x = torch.rand(BATCH, SEQ, config.hidden_size, generator=gen) * 4 - 2
    pos = torch.arange(SEQ)[None].expand(BATCH, -1)
    cos, sin = rope(x, pos)
    with torch.no_grad():
        out = attn(hidden_states=x, position_embeddings=(cos, sin), attention_mask=additive_mask(SEQ, window))[0]
    write_case(name, attn, x, out, yaml_text, comment)


def qwen3():
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding
    cfg = Qwen3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                      rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      attention_bias=False, max_position_embeddings=64)
    decoder_case("qwen3_qknorm", Qwen3Attention, Qwen3RotaryEmbedding, cfg,
                 "model:\n  d_model: 64\n  heads: 4\n  kv_heads: 2\n  head_dim: 32\n  bias: false\n"
                 "  rope: { style: neox, theta: 1000000 }\n  qk_norm: { kind: head, eps: 1e-6 }\n",
                 "HF Qwen3Attention, head_dim 32 (Q 128 wide), GQA 4/2, q_norm/k_norm, RoPE", seed=1)


def gemma2():
    from transformers import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention, Gemma2RotaryEmbedding
    cfg = Gemma2Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       query_pre_attn_scalar=16, attn_logit_softcapping=2.0, sliding_window=5,
                       layer_types=["sliding_attention"], num_hidden_layers=1, attention_bias=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, max_position_embeddings=64)
    decoder_case("gemma2_softcap", Gemma2Attention, Gemma2RotaryEmbedding, cfg,
                 "model:\n  d_model: 64\n  heads: 4\n  kv_heads: 2\n  head_dim: 32\n  bias: false\n"
                 "  rope: { style: neox, theta: 10000 }\n  window: 5\n  scale: 0.25\n  softcap: 2\n",
                 "HF Gemma2Attention, query_pre_attn_scalar 16, softcap 2, sliding window 5", window=5, seed=2)


def gemma3():
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding
    cfg = Gemma3TextConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                           query_pre_attn_scalar=24, sliding_window=6, layer_types=["sliding_attention"],
                           num_hidden_layers=1, rms_norm_eps=1e-6, attention_bias=False, max_position_embeddings=64,
                           rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})
    cfg._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(3)
    attn = Gemma3Attention(cfg, layer_idx=0).eval()
    randomize(attn, gen)
    rope = Gemma3RotaryEmbedding(cfg)
    x = torch.rand(BATCH, SEQ, cfg.hidden_size, generator=gen) * 4 - 2
    pos = torch.arange(SEQ)[None].expand(BATCH, -1)
    cos, sin = rope(x, pos, layer_type="sliding_attention")
    with torch.no_grad():
        out = attn(hidden_states=x, position_embeddings=(cos, sin), attention_mask=additive_mask(SEQ, 6))[0]
    write_case("gemma3_qknorm", attn, x, out,
               "model:\n  d_model: 64\n  heads: 4\n  kv_heads: 1\n  head_dim: 16\n  bias: false\n"
               "  rope: { style: neox, theta: 10000 }\n  window: 6\n  scale: %.9g\n"
               "  qk_norm: { kind: head, eps: 1e-6, weight_offset: 1 }\n" % (24 ** -0.5),
               "HF Gemma3Attention, QK-norm (1 + w), MQA, query_pre_attn_scalar 24, sliding window 6")


def gptoss():
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding
    cfg = GptOssConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                       sliding_window=5, layer_types=["sliding_attention"], num_hidden_layers=1,
                       attention_bias=True, max_position_embeddings=131072,
                       rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                        "original_max_position_embeddings": 4096})
    decoder_case("gptoss_sinks", GptOssAttention, GptOssRotaryEmbedding, cfg,
                 "model:\n  d_model: 64\n  heads: 8\n  kv_heads: 2\n  head_dim: 16\n  bias: true\n"
                 "  rope: { style: neox, theta: 150000, scaling: yarn, factor: 32, beta_fast: 32, beta_slow: 1,\n"
                 "          truncate: false, original_max_position: 4096 }\n  window: 5\n  sinks: true\n",
                 "HF GptOssAttention, sinks, biases, sliding window 5, GQA 8/2, head_dim 16, gpt-oss's yarn RoPE "
                 "(truncate: false)", window=5, seed=4)


def bloom():
    from transformers import BloomConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention, build_alibi_tensor
    cfg = BloomConfig(hidden_size=96, n_head=6, n_layer=1)
    cfg._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(5)
    attn = BloomAttention(cfg, layer_idx=0).eval()
    randomize(attn, gen)
    x = torch.rand(BATCH, SEQ, cfg.hidden_size, generator=gen) * 4 - 2
    alibi = build_alibi_tensor(torch.ones(BATCH, SEQ), cfg.n_head, torch.float32)
    with torch.no_grad():  # the residual is BLOOM's own add after the attention: zero here
        out = attn(x, torch.zeros_like(x), alibi, additive_mask(SEQ).expand(BATCH, -1, -1, -1))[0]
    write_case("bloom_alibi", attn, x, out,
               "model:\n  d_model: 96\n  heads: 6\n  bias: true\n  alibi: { max_bias: 8 }\n",
               "HF BloomAttention, ALiBi over 6 heads, fused query_key_value and dense")


def olmo2():
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention, Olmo2RotaryEmbedding
    cfg = Olmo2Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                      rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                      attention_bias=False, max_position_embeddings=64)
    decoder_case("olmo2_qknorm", Olmo2Attention, Olmo2RotaryEmbedding, cfg,
                 "model:\n  d_model: 64\n  heads: 4\n  kv_heads: 2\n  head_dim: 24\n  bias: false\n"
                 "  rope: { style: neox, theta: 500000 }\n  qk_norm: { kind: full, eps: 1e-6 }\n",
                 "HF Olmo2Attention, QK-norm over the whole projection, GQA 4/2, head_dim 24 (Q 96 wide), RoPE",
                 seed=6)


if __name__ == "__main__":
    torch.set_num_threads(1)
    cases = (qwen3, gemma2, gemma3, gptoss, bloom, olmo2)
    for case in cases:
        if len(sys.argv) < 2 or case.__name__ in sys.argv[1:]:
            case()
            print("wrote", case.__name__)
