#!/usr/bin/python3
"""The reference numpy class, as such classes are written (x·W weights, split and combine
heads, mask 0 = hidden as -1e9, softmax with max subtraction), timed as a peer in float64
(as written) or float32. usage: numpy_mha.py D H B S DTYPE ITERS CAUSAL
The original reference class is not in this repository; this is a faithful stand-in."""
import json
import sys
import time

import numpy as np


class MultiHeadAttention:
    def __init__(self, d_model, num_heads, dtype=np.float64, seed=0):
        assert d_model % num_heads == 0
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        rng = np.random.default_rng(seed)
        scale = 1 / np.sqrt(d_model)
        self.W_q, self.W_k, self.W_v, self.W_o = (
            (rng.standard_normal((d_model, d_model)) * scale).astype(dtype) for _ in range(4))

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.reshape(b, s, self.num_heads, self.d_k).transpose(0, 2, 1, 3)

    def combine_heads(self, x):
        b, _, s, _ = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, s, self.d_model)

    @staticmethod
    def softmax(x, axis=-1):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)

    def scaled_dot_product_attention(self, q, k, v, mask=None):
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(self.d_k)
        if mask is not None:
            scores = np.where(mask == 0, -1e9, scores)
        weights = self.softmax(scores)
        return weights @ v, weights

    def forward(self, q, k, v, mask=None):
        Q, K, V = (self.split_heads(t @ w) for t, w in ((q, self.W_q), (k, self.W_k), (v, self.W_v)))
        out, _ = self.scaled_dot_product_attention(Q, K, V, mask)
        return self.combine_heads(out) @ self.W_o


if __name__ == "__main__":
    d, h, b, s = map(int, sys.argv[1:5])
    dtype = np.float32 if sys.argv[5] == "float32" else np.float64
    iters, causal = int(sys.argv[6]), int(sys.argv[7])
    m = MultiHeadAttention(d, h, dtype)
    x = (np.random.default_rng(1).random((b, s, d)) * 2 - 1).astype(dtype)
    mask = np.tril(np.ones((s, s))) if causal else None
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        m.forward(x, x, x, mask)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1]}))
