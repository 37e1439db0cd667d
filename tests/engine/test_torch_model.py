"""Tests of the tiny torch model and its paged KV cache.

The central property: greedy generation through :meth:`TinyTransformer.forward_paged`
(chunked prefill, one-token decode, shuffled block allocation, shared batches) equals
greedy generation through the dense oracle token for token; on CPU even the logits are
bit-identical.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest
import torch

from asyncspec.engine.torch.paged_kv import KVBoundsError, PagedKVCache
from asyncspec.engine.torch.batch import PagedBatch, PagedRow
from asyncspec.engine.torch.kernels import greedy
from asyncspec.engine.torch.model import TinyTransformer, deterministic_mode, find_eos_prompts
from asyncspec.engine.torch.weights import TinyConfig, init_weights

PROMPTS: tuple[tuple[int, ...], ...] = (
    (5, 9, 13, 2, 40, 33),
    (17,),
    tuple(range(2, 40)),  # 38 tokens: several blocks even at block_size 16
    (63, 62, 3, 3, 3, 3, 3, 3, 3, 9, 8),
)
MAX_NEW = 12


# ----------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def _deterministic() -> Iterator[None]:
    """Run every test with ``torch.use_deterministic_algorithms(True)``."""
    with deterministic_mode():
        yield


@pytest.fixture(scope="module")
def model() -> TinyTransformer:
    """The default model on CPU."""
    return TinyTransformer(TinyConfig(), "cpu")


_DENSE: dict[tuple[int, ...], list[int]] = {}


def dense_generate(model: TinyTransformer, prompt: Sequence[int]) -> list[int]:
    """The oracle's greedy ``MAX_NEW``-token continuation (memoised: the oracle is slow)."""
    key = tuple(prompt)
    if key not in _DENSE:
        _DENSE[key] = model.generate_dense(prompt, MAX_NEW)
    return _DENSE[key]


# ------------------------------------------------------------------ driver


@dataclass
class Req:
    """A request for the toy driver: prompt, budget, chunking seed and arrival step."""

    prompt: Sequence[int]
    max_new_tokens: int = MAX_NEW
    chunk_seed: int = 0
    max_chunk: int = 8
    arrival: int = 0
    # driver state
    computed: int = 0
    output: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    last_token: torch.Tensor | None = None
    done: bool = False


def _next_row(req: Req, rng: random.Random, device_tokens: bool) -> PagedRow:
    """The row a request contributes to the next step (prefill chunk or decode token)."""
    if req.computed < len(req.prompt):
        size = min(len(req.prompt) - req.computed, rng.randint(1, req.max_chunk))
        chunk = list(req.prompt[req.computed : req.computed + size])
        return PagedRow(chunk, req.computed, req.blocks)
    if device_tokens:
        assert req.last_token is not None
        return PagedRow(req.last_token, req.computed, req.blocks)
    return PagedRow([req.output[-1]], req.computed, req.blocks)


def _ensure_blocks(req: Req, end: int, block_size: int, free: list[int]) -> None:
    """Grow the request's block table from the free list to cover ``[0, end)``."""
    while len(req.blocks) * block_size < end:
        req.blocks.append(free.pop())


def run_paged(
    model: TinyTransformer,
    reqs: Sequence[Req],
    block_size: int,
    *,
    num_blocks: int = 96,
    seed: int = 0,
    device_tokens: bool = False,
) -> list[list[int]]:
    """Greedy-generate all requests together through ``forward_paged``.

    Blocks come from a shuffled free list; finished requests return their blocks, which
    are poisoned with NaN, so a reuse that reads stale data would show up as NaN logits.
    """
    kv = model.new_kv_cache(num_blocks, block_size)
    free = list(range(num_blocks))
    random.Random(seed).shuffle(free)
    rngs = [random.Random(r.chunk_seed) for r in reqs]
    eos = model.config.eos_token_id
    step = 0
    while not all(r.done for r in reqs):
        active = [i for i, r in enumerate(reqs) if not r.done and r.arrival <= step]
        rows = [_next_row(reqs[i], rngs[i], device_tokens) for i in active]
        for i, row in zip(active, rows):
            _ensure_blocks(reqs[i], row.start_position + _row_len(row), block_size, free)
        step += 1
        if not rows:
            continue
        rows = [
            PagedRow(r.query_token_ids, r.start_position, list(reqs[i].blocks))
            for i, r in zip(active, rows)
        ]
        batch = PagedBatch.from_rows(rows, model.device, [f"req{i}" for i in active])
        logits = model.forward_paged_logits(batch, kv)
        tokens = greedy(logits)
        for j, (i, row) in enumerate(zip(active, rows)):
            req = reqs[i]
            req.computed += _row_len(row)
            if req.computed < len(req.prompt):
                continue  # non-final prefill chunk: token ignored
            req.output.append(int(tokens[j].item()))
            req.logits.append(logits[j].cpu())
            req.last_token = tokens[j : j + 1]
            if req.output[-1] == eos or len(req.output) >= req.max_new_tokens:
                req.done = True
                kv.poison(req.blocks)
                free.extend(req.blocks)
                req.blocks = []
    return [r.output for r in reqs]


def _row_len(row: PagedRow) -> int:
    ids = row.query_token_ids
    return int(ids.numel()) if isinstance(ids, torch.Tensor) else len(ids)


def dense_logits_of(
    model: TinyTransformer, prompt: Sequence[int], output: list[int]
) -> torch.Tensor:
    """Dense logits at the positions that produced ``output``."""
    seq = list(prompt) + output
    logits: torch.Tensor = model.forward_dense(seq[:-1])[len(prompt) - 1 :]
    return logits.cpu()


# ------------------------------------------------------------ model tests


def test_weights_are_deterministic_per_seed() -> None:
    a, b = init_weights(TinyConfig(seed=0)), init_weights(TinyConfig(seed=0))
    c = init_weights(TinyConfig(seed=1))
    assert torch.equal(a.embed, b.embed) and torch.equal(a.layers[1].wqkv, b.layers[1].wqkv)
    assert not torch.equal(a.embed, c.embed)


def test_dense_matches_plain_torch_reference(model: TinyTransformer) -> None:
    """The invariant kernels compute the usual transformer (checked against F.linear/SDPA)."""
    seq = list(PROMPTS[2]) + [7, 8, 9]
    ours = model.forward_dense(seq)
    ref = _reference_logits(model, seq)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(greedy(ours), greedy(ref))


def _reference_logits(model: TinyTransformer, seq: list[int]) -> torch.Tensor:
    """Textbook forward pass with standard torch ops."""
    f = torch.nn.functional
    c, w = model.config, model.weights
    n = len(seq)

    def norm(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c.norm_eps) * g

    x = w.embed[torch.tensor(seq)] + w.pos[:n]
    for layer in w.layers:
        qkv = f.linear(norm(x, layer.attn_norm), layer.wqkv).view(n, 3, c.heads, c.head_dim)
        q, k, v = (t.transpose(0, 1) for t in qkv.unbind(1))
        a = f.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + f.linear(a.transpose(0, 1).reshape(n, c.hidden), layer.wo)
        x = x + f.linear(torch.relu(f.linear(norm(x, layer.mlp_norm), layer.w_up)), layer.w_down)
    logits = f.linear(norm(x, w.final_norm), w.lm_head)
    logits[:, c.eos_token_id] += c.eos_logit_bias
    return logits


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_paged_generation_equals_dense(model: TinyTransformer, block_size: int) -> None:
    """Each prompt alone: chunked prefill + decode through the paged cache == dense greedy."""
    for k, prompt in enumerate(PROMPTS):
        req = Req(prompt, chunk_seed=100 * block_size + k, max_chunk=7)
        (out,) = run_paged(model, [req], block_size, seed=k)
        assert out == dense_generate(model, prompt), (block_size, prompt)
        # on CPU the logits are bit-identical, not just the argmax
        assert torch.equal(torch.stack(req.logits), dense_logits_of(model, prompt, out))


def test_batching_invariance(model: TinyTransformer) -> None:
    """Three requests sharing steps (different chunk schedules, staggered) == each alone."""
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[3]]
    together = [
        Req(p, chunk_seed=7 + i, max_chunk=3 + 4 * i, arrival=i) for i, p in enumerate(prompts)
    ]
    run_paged(model, together, block_size=4, seed=3)
    for i, p in enumerate(prompts):
        alone = Req(p, chunk_seed=50 + i, max_chunk=16)
        run_paged(model, [alone], block_size=4, seed=11)
        assert together[i].output == alone.output
        assert torch.equal(torch.stack(together[i].logits), torch.stack(alone.logits))


def test_decode_rows_invariant_to_batch_size(model: TinyTransformer) -> None:
    """A decode row's logits do not depend on how many other rows share the step."""
    kv = model.new_kv_cache(num_blocks=64 * 3, block_size=4)
    rng = random.Random(5)
    prompts = [[rng.randrange(2, 64) for _ in range(9)] for _ in range(64)]
    tables = [[3 * i, 3 * i + 1, 3 * i + 2] for i in range(64)]
    model.forward_paged(PagedBatch.from_lists(prompts, [0] * 64, tables, "cpu"), kv)
    decode = [[rng.randrange(2, 64)] for _ in range(64)]
    full = model.forward_paged_logits(PagedBatch.from_lists(decode, [9] * 64, tables, "cpu"), kv)
    for size in (1, 2, 7, 33):
        part = model.forward_paged_logits(
            PagedBatch.from_lists(decode[:size], [9] * size, tables[:size], "cpu"), kv
        )
        assert torch.equal(part, full[:size])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # intra-op parallelism does not change any bit either
        single = model.forward_paged_logits(
            PagedBatch.from_lists(decode, [9] * 64, tables, "cpu"), kv
        )
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(single, full)


def test_freed_poisoned_blocks_are_safe_to_reuse(model: TinyTransformer) -> None:
    """Requests run one after another in a cache that only fits one of them, so every block
    is freed (and poisoned) and reused; a correct engine overwrites before it reads."""
    prompts = [PROMPTS[2], PROMPTS[0], PROMPTS[3]]
    reqs = [Req(p, chunk_seed=i, arrival=40 * i) for i, p in enumerate(prompts)]
    outs = run_paged(model, reqs, block_size=4, num_blocks=13, seed=9)
    assert outs == [dense_generate(model, p) for p in prompts]


def test_device_tensor_inputs_match_python_lists(model: TinyTransformer) -> None:
    """Feeding last step's sampled tokens as a device tensor == feeding python ints."""
    prompts = [PROMPTS[0], PROMPTS[3]]
    as_list = [Req(p, chunk_seed=i) for i, p in enumerate(prompts)]
    as_tensor = [Req(p, chunk_seed=i) for i, p in enumerate(prompts)]
    expected = run_paged(model, as_list, 4, seed=2)
    assert run_paged(model, as_tensor, 4, seed=2, device_tokens=True) == expected
    ids = torch.tensor([4, 5], dtype=torch.int64)
    mixed = PagedBatch.from_rows([PagedRow([1, 2, 3], 0, [0]), PagedRow(ids, 7, [1, 2])], "cpu")
    assert mixed.input_ids.tolist() == [1, 2, 3, 4, 5] and mixed.query_lens == (3, 2)


def _prefill_then_decode(model: TinyTransformer, poison: list[int]) -> torch.Tensor:
    """Prefill a 10-token prompt into blocks [5, 2, 9] (block_size 4), poison, decode once."""
    kv = model.new_kv_cache(num_blocks=12, block_size=4)
    table = [5, 2, 9]
    prompt = list(PROMPTS[3][:10])
    model.forward_paged(PagedBatch.from_lists([prompt], [0], [table], "cpu"), kv)
    kv.poison(poison)
    logits: torch.Tensor = model.forward_paged_logits(
        PagedBatch.from_lists([[7]], [10], [table], "cpu"), kv
    )
    return logits


def test_poisoned_block_corrupts_output(model: TinyTransformer) -> None:
    clean = _prefill_then_decode(model, [])
    assert torch.isfinite(clean).all()
    assert torch.equal(_prefill_then_decode(model, [0, 11]), clean)  # not in the table: harmless
    for block in (5, 2):  # blocks holding already-computed positions
        assert torch.isnan(_prefill_then_decode(model, [block])).all()
    # block 9 holds positions 8..9 (computed) and 10 (rewritten by this step): still visible
    assert torch.isnan(_prefill_then_decode(model, [9])).all()


def test_model_emits_eos_for_short_prompt(model: TinyTransformer) -> None:
    """The model ends some short prompts by itself (the engine fuzzer relies on it)."""
    rng = random.Random(0)
    candidates = [[rng.randrange(2, 64) for _ in range(rng.randint(2, 5))] for _ in range(20)]
    found = find_eos_prompts(model, candidates, max_new_tokens=30, want=3)
    print("EOS prompts (prompt, tokens to EOS):", found)
    assert found
    for prompt, steps in found:
        req = Req(prompt, max_new_tokens=30)
        (out,) = run_paged(model, [req], block_size=4)
        assert len(out) == steps and out[-1] == model.config.eos_token_id


# ------------------------------------------------------------ errors


def test_short_block_table_names_row(model: TinyTransformer) -> None:
    kv = model.new_kv_cache(num_blocks=8, block_size=4)
    batch = PagedBatch.from_lists(
        [[2, 3], [4, 5, 6, 7, 8]], [0, 0], [[0], [1]], "cpu", ["a", "b"]
    )
    with pytest.raises(KVBoundsError, match=r"request row 1 \(b\).*1 block") as info:
        model.forward_paged(batch, kv)
    assert isinstance(info.value, ValueError) and isinstance(info.value, IndexError)


def test_bad_block_id_duplicate_slot_and_position_limit(model: TinyTransformer) -> None:
    kv = model.new_kv_cache(num_blocks=8, block_size=4)
    with pytest.raises(ValueError, match="request row 0.*block 8"):
        model.forward_paged(PagedBatch.from_lists([[2]], [0], [[8]], "cpu"), kv)
    with pytest.raises(ValueError, match="request row 1 writes KV slot 0.*request row 0"):
        model.forward_paged(PagedBatch.from_lists([[2], [3]], [0, 0], [[0], [0]], "cpu"), kv)
    with pytest.raises(ValueError, match="exceed max_position"):
        batch = PagedBatch.from_lists([[2, 3]], [511], [list(range(8)) * 16], "cpu")
        model.forward_paged(batch, kv)
    with pytest.raises(ValueError, match="query_lens sum"):
        PagedBatch(torch.tensor([1, 2]), (3,), (0,), ((0,),))


# ------------------------------------------------------------ KV cache


def test_kv_write_gather_roundtrip_across_blocks() -> None:
    kv = PagedKVCache(num_blocks=6, block_size=3, layers=2, heads=2, head_dim=4, device="cpu")
    table = [4, 0, 5]
    k = torch.randn(7, 2, 4, generator=torch.Generator().manual_seed(0))
    kv.write(1, table, 0, k[:5], -k[:5])
    kv.write(1, table, 5, k[5:], -k[5:])
    got_k, got_v = kv.gather(1, table, 7)
    assert torch.equal(got_k, k) and torch.equal(got_v, -k)
    assert torch.equal(kv.k[1, 0, 0], k[3]) and torch.equal(kv.k[1, 5, 0], k[6])
    assert kv.k[0].abs().sum() == 0  # other layer untouched
    with pytest.raises(KVBoundsError, match="request row 3"):
        kv.gather(1, table, 10, row=3)
    kv.poison([0])
    assert torch.isnan(kv.gather(1, table, 7)[0][3:6]).all()
    assert torch.isfinite(kv.gather(1, table, 3)[0]).all()


# ------------------------------------------------------------ CUDA


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_paged_equals_dense_on_cuda() -> None:
    """The same paged-vs-dense check on the GPU (token for token), and CPU tokens agree."""
    gpu = TinyTransformer(TinyConfig(), "cuda")
    cpu = TinyTransformer(TinyConfig(), "cpu")
    for block_size in (1, 4, 16):
        reqs = [Req(p, chunk_seed=i, arrival=i) for i, p in enumerate(PROMPTS)]
        outs = run_paged(gpu, reqs, block_size, seed=block_size, device_tokens=True)
        for prompt, out in zip(PROMPTS, outs):
            assert out == gpu.generate_dense(prompt, MAX_NEW) == cpu.generate_dense(prompt, MAX_NEW)
