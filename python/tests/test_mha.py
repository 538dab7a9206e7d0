"""The Python binding against a float64 numpy reference and against itself (make test-python).

Tolerance: the f32 engine's contract against a double-precision reference, 1e-5 relative over
an output (docs/precision.md): the binding adds no arithmetic, so its outputs are the engine's.
"""
import threading

import numpy as np
import pytest

import mha

F32_TOL = 1e-5  # the f32 contract (docs/precision.md)

D, H, KVH, DK = 64, 4, 2, 16


def config(batch=2, seq=9, kv=None, threads=2, **model):
    m = {"d_model": D, "heads": H, "kv_heads": KVH, "bias": True}
    m.update(model)
    return {"model": m, "batch": {"size": batch, "seq_len": seq, **({"kv_len": kv} if kv else {})},
            "threads": {"count": threads}}


def weights(seed=1, bias=True):
    r = np.random.default_rng(seed)
    s = 1 / np.sqrt(D)
    w = {"w_q": r.uniform(-s, s, (H * DK, D)), "w_k": r.uniform(-s, s, (KVH * DK, D)),
         "w_v": r.uniform(-s, s, (KVH * DK, D)), "w_o": r.uniform(-s, s, (D, H * DK))}
    if bias:
        w.update(b_q=r.uniform(-s, s, H * DK), b_k=r.uniform(-s, s, KVH * DK), b_v=r.uniform(-s, s, KVH * DK),
                 b_o=r.uniform(-s, s, D))
    return {k: v.astype(np.float32) for k, v in w.items()}


def engine(cfg=None, w=None):
    e = mha.Engine(cfg or config())
    e.set_weights(**(w or weights()))
    return e


def attention(q, k, v, causal):
    """(batch, heads, rows, dk) in float64; GQA by repeating K and V; causal bottom-right."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def layer(x, w, causal):
    x = x.astype(np.float64)
    b, n, _ = x.shape
    heads = lambda y, h: y.reshape(b, n, h, DK).transpose(0, 2, 1, 3)
    q = heads(x @ w["w_q"].T.astype(np.float64) + w["b_q"], H)
    k = heads(x @ w["w_k"].T.astype(np.float64) + w["b_k"], KVH)
    v = heads(x @ w["w_v"].T.astype(np.float64) + w["b_v"], KVH)
    o = attention(q, k, v, causal).transpose(0, 2, 1, 3).reshape(b, n, H * DK)
    return o @ w["w_o"].T.astype(np.float64) + w["b_o"]


def rel(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def test_info_names_the_library_and_the_tables():
    i = mha.info()
    assert i["version"] == mha.__version__ and i["isa"] in i["tables"]
    assert "ref" in i["tables"] and i["tables"]["ref"].startswith("needs nothing")


@pytest.mark.parametrize("causal", [False, True])
def test_forward_matches_the_float64_layer(causal):
    w = weights()
    x = np.random.default_rng(2).uniform(-1, 1, (2, 9, D)).astype(np.float32)
    y = engine(w=w).forward(x, causal=causal)
    assert y.shape == x.shape and y.dtype == np.float32
    assert rel(y, layer(x, w, causal)) <= F32_TOL


def test_a_yaml_file_and_the_same_dict_give_the_same_bits(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(f"model: {{ d_model: {D}, heads: {H}, kv_heads: {KVH}, bias: true }}\n"
                    "batch: { size: 2, seq_len: 9 }\nthreads: { count: 2 }\n")
    x = np.random.default_rng(3).uniform(-1, 1, (2, 9, D)).astype(np.float32)
    a, b = engine(str(path)).forward(x, causal=True), engine(config()).forward(x, causal=True)
    assert np.array_equal(a, b)


def test_core_on_hf_strided_layout_equals_sdpa_layout_bitwise_and_the_reference():
    e = mha.Engine(config(seq=7, kv=11))
    r = np.random.default_rng(4)
    q = r.uniform(-1, 1, (2, 7, H, DK)).astype(np.float32)  # HF's (batch, rows, heads, dk)
    kv = r.uniform(-1, 1, (2, 11, KVH, 2 * DK)).astype(np.float32)
    k, v = kv[..., :DK], kv[..., DK:]  # views: strides, no copy
    hf = e.core(q, k, v, causal=True, layout="bshd")
    qs, ks, vs = (np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in (q, k, v))
    sdpa = e.core(qs, ks, vs, causal=True)
    assert np.array_equal(hf.transpose(0, 2, 1, 3), sdpa)
    assert rel(sdpa, attention(qs.astype(np.float64), ks, vs, True)) <= F32_TOL


class DLPackOnly:
    """An array offered only through the DLPack protocol (as JAX's or CuPy's host arrays are)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_core_takes_dlpack_producers_without_a_copy():
    e = mha.Engine(config(seq=7, kv=11))
    r = np.random.default_rng(5)
    q = r.uniform(-1, 1, (2, 7, H, DK)).astype(np.float32)
    kv = r.uniform(-1, 1, (2, 11, KVH, 2 * DK)).astype(np.float32)
    k, v = kv[..., :DK], kv[..., DK:]  # strided: a copy would be contiguous
    want = e.core(q, k, v, causal=True, layout="bshd")
    assert np.shares_memory(mha._array(DLPackOnly(k)), kv)
    got = e.core(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), causal=True, layout="bshd")
    assert np.array_equal(got, want)


def test_steps_through_the_cache_equal_the_causal_forward_bitwise():
    cfg = config(batch=1, seq=12)
    e = engine(cfg)
    x = np.random.default_rng(5).uniform(-1, 1, (1, 12, D)).astype(np.float32)
    full = e.forward(x, causal=True)[0]
    cache = mha.KVCache(e, n_blocks=4, block_size=4, max_seqs=1)
    blocks = np.array([[0, 1, 2]], np.int32)
    rows = [e.step(cache, x[0, :5], [0], [5], blocks)]
    for t in range(5, 12):
        rows.append(e.step(cache, x[0, t:t + 1], [t], [1], blocks))
    assert np.array_equal(np.concatenate(rows), full)


def test_bad_calls_raise_with_the_engines_message():
    e = engine()
    x = np.zeros((2, 9, D), np.float32)
    with pytest.raises(TypeError, match="float32"):
        e.forward(x.astype(np.float64))
    with pytest.raises(ValueError, match=r"\(batch, rows, 64\)"):
        e.forward(np.zeros((2, 9, D + 1), np.float32))
    with pytest.raises(mha.MhaError, match="batch 3") as err:  # past the capacity: the engine's own words
        e.forward(np.zeros((3, 9, D), np.float32))
    assert err.value.args[1] == "shape out of range"  # the status, as mha_status_str says it
    with pytest.raises(mha.MhaError, match="heads"):  # a config the engine refuses names its key
        mha.Engine({"model": {"d_model": 60, "heads": 7}, "batch": {"size": 1, "seq_len": 4}})
    with pytest.raises(ValueError, match="elements"):
        mha.Engine(config()).set_weights(**{**weights(), "w_q": np.zeros((3, 3), np.float32)})
    with pytest.raises(mha.MhaError):
        mha.Engine(config()).forward(x)  # no weights yet
    q = np.zeros((2, H, 9, DK), np.float32)
    kv = np.zeros((2, KVH, 9, DK), np.float32)
    with pytest.raises(TypeError, match="float32"):
        e.core(q.astype(np.float64), kv, kv)
    with pytest.raises(ValueError, match="dimension heads is 2; 4 is needed"):
        e.core(kv, kv, kv)
    with pytest.raises(ValueError, match="features must be contiguous"):
        e.core(q[..., ::-1], kv, kv)  # features reversed


def test_one_engine_from_several_threads_gives_every_caller_its_bits():
    e = engine(config(threads=2))
    xs = [np.random.default_rng(10 + i).uniform(-1, 1, (2, 9, D)).astype(np.float32) for i in range(4)]
    want = [e.forward(x, causal=True) for x in xs]
    got = [[] for _ in xs]

    def run(i):
        for _ in range(20):
            got[i].append(e.forward(xs[i], causal=True))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(g, want[i]) for i in range(len(xs)) for g in got[i])


def test_a_forward_releases_the_gil():
    e = engine(config(batch=8, seq=512, threads=1))
    x = np.random.default_rng(6).uniform(-1, 1, (8, 512, D)).astype(np.float32)
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        for _ in range(5):
            before = count[0]
            e.forward(x, causal=True)  # nothing else runs on this thread between the two reads
            if count[0] > before:
                break
        assert count[0] > before, "another thread never ran while forward did"
    finally:
        stop.set()
        t.join()


def test_the_readmes_example_runs_as_written(capsys):
    import pathlib
    import re
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"## From Python.*?```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    assert "(2, 16, 256)" in capsys.readouterr().out
