"""Episodes that advance together: every live episode's next turn is decoded in one batch.

    from memupdate.agent.policies.batched import advance_together
    results = advance_together([member_a, member_b], [job, job])   # job(policy) -> anything, in order

A local checkpoint decodes one token of eight sequences in about twice the time of one (a 135 M model on
two cores is bound by per-layer overhead and memory traffic, not arithmetic), so episodes are run in
threads, one LangGraph graph each, and their chat models hand each prompt to one `BatchDecoder` per
loaded model. When every live episode is waiting for its next turn, one batched decode runs for all of
them and each thread gets its own reply; an episode that ends leaves, and the others no longer wait for
it. What each sequence keeps:

- its KV cache across its turns (only the tokens new since its last turn are prefilled), joined with
  the others' into one left-padded batch cache for the decode (attention mask and position ids per
  sequence) and cut back out afterwards;
- the shared prefix (system prompt and tool list, ~400 tokens for the student) is prefilled once per
  decoder and copied as each new episode's start;
- its own sampling generator (seeded from the episode's policy: the same seed gives the same sample
  whoever else is in the batch), its handle constraint (`.handles`), prose limit and stop tokens.

Greedy decoding picks the same tokens as `generate` up to float rounding: a batch's matrix products
round differently from one sequence's, which can flip a rare near-tie argmax.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memupdate.llm import hermes
from memupdate.llm.checkpoints import stop_and_pad_ids

from .handles import HandleConstraint

T = TypeVar("T")
TOP_K = 50  # `generate`'s default top-k when sampling, kept so both paths sample the same distribution
MIN_REUSE = 16  # a cache sharing fewer tokens with the prompt than this is not worth cutting


@dataclass
class DecodeRequest:
    """One episode's turn: the prompt's ids and how to decode its reply."""

    ids: list[int]
    cache: tuple[list[int], Any] | None  # the episode's last cache: (the ids it holds, a DynamicCache)
    prefix: list[int] | None  # the prompt's shared prefix (system turn), prefilled once per decoder
    max_new_tokens: int
    temperature: float = 0.0
    seed: int | None = None  # sampling seed of this turn (None with temperature > 0: unseeded)
    max_prose_tokens: int | None = None
    handles: dict[str, str] | None = None  # live handles and their texts (`handles.live_handles`)
    datable: frozenset[str] = frozenset()  # those a dating update may name (`handles.to_date`)


@dataclass
class DecodeReply:
    tokens: list[int]  # the new tokens, the stop token included when there was one
    cache: tuple[list[int], Any]  # the KV cache after the turn, for the episode's next turn
    prefilled: int  # prompt tokens actually run through the model this turn


@dataclass
class _Row:
    """A sequence being decoded."""

    request: DecodeRequest
    cache: Any
    generator: Any
    constraint: HandleConstraint | None
    prefilled: int
    tokens: list[int] = field(default_factory=list)
    done: bool = False


class BatchDecoder:
    """The shared batcher of one loaded model: participants `join`, each turn is `decode`d together with
    every other participant's, and a participant `leave`s when its episode ends. A thread that has not
    joined decodes alone at once."""

    def __init__(self, model: Any, tokenizer: Any):
        self._model, self.tokenizer = weakref.ref(model), tokenizer
        self.stop_ids = set(stop_and_pad_ids(model, tokenizer)["eos_token_id"])
        self._prefixes: dict[tuple[int, ...], Any] = {}
        self._state = threading.Condition()
        self._compute = threading.Lock()
        self._live = 0
        self._waiting: list[tuple[DecodeRequest, dict[str, Any]]] = []
        self._local = threading.local()
        self.batches: list[int] = []  # each batch's size, for benchmarks

    # -- who takes part ---------------------------------------------------------------------------

    def join(self, n: int = 1) -> None:
        """Announce `n` participants (before their threads start, so none decodes without the others)."""
        with self._state:
            self._live += n

    @property
    def model(self) -> Any:
        """The loaded model (alive while any policy on it is)."""
        return self._model()

    def enter(self) -> None:
        """Mark the calling thread as one of the announced participants."""
        self._local.active = True

    def participating(self) -> bool:
        """Whether the calling thread is a participant that has not left."""
        return getattr(self._local, "active", False)

    def leave(self) -> None:
        """The calling participant's episode ended (no-op for a thread that is not one, or left already)."""
        if not self.participating():
            return
        self._local.active = False
        with self._state:
            self._live -= 1
            batch = self._take_if_ready()
        if batch:
            self._run(batch)

    def decode(self, request: DecodeRequest) -> DecodeReply:
        """The reply to `request`, decoded in one batch with every other participant's pending turn."""
        if not self.participating():
            with self._compute:
                return self._decode_batch([request])[0]
        slot: dict[str, Any] = {}
        with self._state:
            self._waiting.append((request, slot))
            batch = self._take_if_ready()
        if batch:
            self._run(batch)
        with self._state:
            while "reply" not in slot and "error" not in slot:
                self._state.wait()
        if "error" in slot:
            raise slot["error"]
        return slot["reply"]

    def _take_if_ready(self) -> list[tuple[DecodeRequest, dict[str, Any]]]:
        if self._waiting and len(self._waiting) >= self._live:
            batch, self._waiting = self._waiting, []
            return batch
        return []

    def _run(self, batch: list[tuple[DecodeRequest, dict[str, Any]]]) -> None:
        try:
            with self._compute:
                replies = self._decode_batch([request for request, _ in batch])
            outcome = [("reply", reply) for reply in replies]
        except Exception as exc:  # every waiting episode gets the error, none hangs
            outcome = [("error", exc)] * len(batch)
        with self._state:
            for (_, slot), (key, value) in zip(batch, outcome, strict=True):
                slot[key] = value
            self._state.notify_all()

    # -- decoding ---------------------------------------------------------------------------------

    def _decode_batch(self, requests: list[DecodeRequest]) -> list[DecodeReply]:
        import torch

        self.batches.append(len(requests))
        with torch.no_grad():
            rows = [self._start(request) for request in requests]
            live = [row for row in rows if not row.done]
            if live:
                self._advance(live)
        return [
            DecodeReply(row.tokens, (row.request.ids + row.tokens[:-1], row.cache), row.prefilled) for row in rows
        ]

    def _start(self, request: DecodeRequest) -> _Row:
        """Prefill the prompt's tokens no cache holds and choose the first new token."""
        import torch

        cache, held = self._best_cache(request)
        new = request.ids[held:]
        out = self.model(
            input_ids=torch.tensor([new]),
            position_ids=torch.arange(held, len(request.ids))[None],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,  # only the last position's: a prompt's all would be (tokens x vocabulary) floats
        )
        generator = None
        if request.temperature > 0:
            generator = torch.Generator()
            if request.seed is not None:
                generator.manual_seed(request.seed)
            else:
                generator.seed()
        constraint = HandleConstraint(self.tokenizer, 0, request.handles, datable=request.datable) if request.handles else None
        row = _Row(request, out.past_key_values, generator, constraint, len(new))
        self._choose(row, out.logits[0, -1])
        return row

    def _best_cache(self, request: DecodeRequest) -> tuple[Any, int]:
        """The longest cache whose tokens start the prompt: the episode's last one cut to what it shares
        with this prompt, else a copy of the shared prefix's; (None, 0) when neither fits."""
        ids = request.ids
        if request.cache is not None:
            held, cache = request.cache
            shared = _common_length(held, ids[:-1])  # the last token is always fed: it gives the logits
            if shared >= MIN_REUSE:
                cache.crop(shared)
                return cache, shared
        prefix = request.prefix
        if prefix and len(prefix) < len(ids) and ids[: len(prefix)] == prefix:
            return _copy_cache(self._prefix_cache(prefix)), len(prefix)
        return None, 0

    def _prefix_cache(self, prefix: list[int]) -> Any:
        import torch

        key = tuple(prefix)
        if key not in self._prefixes:
            self._prefixes[key] = self.model(input_ids=torch.tensor([prefix]), use_cache=True, logits_to_keep=1).past_key_values
        return self._prefixes[key]

    def _advance(self, rows: list[_Row]) -> None:
        """`_decode_rows` with grouped-query attention that reads each key/value head once per step."""
        config = self.model.config
        saved = config._attn_implementation
        config._attn_implementation = _grouped_attention_name()
        try:
            self._decode_rows(rows)
        finally:
            config._attn_implementation = saved

    def _decode_rows(self, rows: list[_Row]) -> None:
        """Decode `rows` together, one token each per step, until each has stopped; a stopped row's cache
        is cut out of the batch and the batch shrinks."""
        import torch

        lengths = [len(row.request.ids) + len(row.tokens) - 1 for row in rows]  # tokens each cache holds
        cache, pads = _left_padded([row.cache for row in rows], lengths)
        width = max(lengths)
        mask = torch.tensor([[0] * pad + [1] * (width - pad) for pad in pads])
        positions = torch.tensor(lengths)
        while rows:
            mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=mask.dtype)], dim=1)
            out = self.model(
                input_ids=torch.tensor([[row.tokens[-1]] for row in rows]),
                attention_mask=mask,
                position_ids=positions[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            positions = positions + 1
            logits = out.logits[:, -1]
            for i, row in enumerate(rows):
                self._choose(row, logits[i])
            stopped = [i for i, row in enumerate(rows) if row.done]
            if not stopped:
                continue
            for i in stopped:
                rows[i].cache = _cut_row(cache, i, pads[i])
            keep = [i for i, row in enumerate(rows) if not row.done]
            rows, pads = [rows[i] for i in keep], [pads[i] for i in keep]
            if not rows:
                break
            index = torch.tensor(keep)
            cache.batch_select_indices(index)
            mask, positions = mask[index], positions[index]
            trim = min(pads)
            if trim:  # the longest sequence left: drop the padding every row now has
                _crop_front(cache, trim)
                mask, pads = mask[:, trim:], [pad - trim for pad in pads]

    def _choose(self, row: _Row, logits: Any) -> None:
        """Append the next token of `row` (greedy, or sampled from its own generator) and mark it done at
        a stop token, its token budget or its prose limit."""
        import torch

        request = row.request
        scores = logits.float()[None]
        if row.constraint is not None and row.tokens:  # no text yet: no key to constrain
            scores = row.constraint(torch.tensor([row.tokens]), scores)
        if request.temperature > 0:
            scores = scores / request.temperature
            floor = torch.topk(scores, min(TOP_K, scores.shape[-1])).values[..., -1:]
            scores = scores.masked_fill(scores < floor, float("-inf"))
            token = int(torch.multinomial(scores.softmax(-1)[0], 1, generator=row.generator))
        else:
            token = int(scores[0].argmax())
        row.tokens.append(token)
        limit = request.max_prose_tokens
        row.done = (
            token in self.stop_ids
            or len(row.tokens) >= request.max_new_tokens
            or bool(limit and len(row.tokens) >= limit and hermes.OPEN not in self._text(row.tokens))
        )

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)


# -- attention ------------------------------------------------------------------------------------

GROUPED_ATTENTION = "memupdate_grouped_decode"


def _grouped_attention_name() -> str:
    """Register (once) and name the attention the batched decode runs with: SDPA, except that a one-token
    query of a grouped-query model (SmolLM2: 9 query heads over 3 key/value heads) attends each key/value
    head with its group of query heads, instead of copying every key and value 3 times per layer and step
    as `transformers` does when an attention mask is given (the padding of a batch): 1.3-1.8x faster steps."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if GROUPED_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(GROUPED_ATTENTION, _grouped_decode_attention)
        AttentionMaskInterface.register(GROUPED_ATTENTION, sdpa_mask)
    return GROUPED_ATTENTION


def _grouped_decode_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    if length != 1 or kv_heads == heads or attention_mask is not None and attention_mask.shape[-2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    # Query head h uses key/value head h // groups (transformers' repeat_kv order): the group's queries
    # become query positions of their key/value head, all under the same mask row.
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    out = F.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask, scale=kwargs.get("scaling"))
    return out.reshape(batch, heads, 1, dim).transpose(1, 2), None


# -- caches ---------------------------------------------------------------------------------------


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _layers(cache: Any) -> list[Any]:
    return list(cache.layers)


def _copy_cache(cache: Any) -> Any:
    from transformers.cache_utils import DynamicCache

    copy = DynamicCache()
    for index, layer in enumerate(_layers(cache)):
        copy.update(layer.keys.clone(), layer.values.clone(), index)
    return copy


def _left_padded(caches: list[Any], lengths: list[int]) -> tuple[Any, list[int]]:
    """One batch cache from single-sequence caches, each left-padded with zeros to the longest."""
    import torch
    from transformers.cache_utils import DynamicCache

    width = max(lengths)
    pads = [width - n for n in lengths]
    batch = DynamicCache()
    for index in range(len(_layers(caches[0]))):
        keys, values = [], []
        for cache, pad, n in zip(caches, pads, lengths, strict=True):
            layer = cache.layers[index]
            k, v = layer.keys[..., :n, :], layer.values[..., :n, :]
            if pad:
                zeros = k.new_zeros(*k.shape[:-2], pad, k.shape[-1])
                k, v = torch.cat([zeros, k], dim=-2), torch.cat([zeros, v], dim=-2)
            keys.append(k)
            values.append(v)
        batch.update(torch.cat(keys), torch.cat(values), index)
    return batch, pads


def _cut_row(cache: Any, row: int, pad: int) -> Any:
    """Row `row` of a batch cache as a single-sequence cache, without its padding."""
    from transformers.cache_utils import DynamicCache

    single = DynamicCache()
    for index, layer in enumerate(_layers(cache)):
        single.update(layer.keys[row : row + 1, :, pad:].clone(), layer.values[row : row + 1, :, pad:].clone(), index)
    return single


def _crop_front(cache: Any, n: int) -> None:
    for layer in _layers(cache):
        layer.keys, layer.values = layer.keys[..., n:, :], layer.values[..., n:, :]


# -- running episodes together --------------------------------------------------------------------

# Keyed weakly by the model; a decoder refers to its model only weakly too (`BatchDecoder.model`), or
# the entry would keep its key alive and every checkpoint a run loads would stay in memory.
_DECODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_DECODERS_LOCK = threading.Lock()


def decoder_for(policy: Any) -> BatchDecoder | None:
    """The batch decoder of `policy`'s loaded model (one per model, shared by every copy and seeded member
    of it), or None for a policy that cannot batch (the heuristic, an endpoint, no policy)."""
    # A local checkpoint's policy (`hf.HuggingFaceChatModel`) carries its loaded model; others cannot batch.
    if getattr(policy, "hf_model", None) is None or not getattr(policy, "batch_episodes", False):
        return None
    with _DECODERS_LOCK:
        if policy.hf_model not in _DECODERS:
            _DECODERS[policy.hf_model] = BatchDecoder(policy.hf_model, policy.tokenizer)
        return _DECODERS[policy.hf_model]


def batched(policy: Any, *, own_seed: bool = False) -> Any:
    """`policy` decoding through its model's batch decoder (itself when it cannot batch). `own_seed`: the
    copy samples from its own generator, seeded by the next draw of `policy`'s (for episodes that share
    one policy: threads drawing from one generator would draw in no fixed order)."""
    decoder = decoder_for(policy)
    if decoder is None:
        return policy
    copy = policy.model_copy(update={"batcher": decoder})
    if own_seed and policy._rng is not None:
        import torch

        copy._rng = torch.Generator().manual_seed(policy._next_seed())
    return copy


def advance_together(
    policies: Sequence[Any], jobs: Sequence[Callable[[Any], T]], *, width: int = 16
) -> list[T | BaseException]:
    """Run `jobs[i](policies[i])` for every i and return their results in order (an exception a job raised
    in its place). Where every policy is one local checkpoint's, the jobs run in threads, at most `width`
    at once, and their episodes' turns are decoded in batches; otherwise one after another, as before."""
    return list(iter_together(policies, jobs, width=width))


def iter_together(
    policies: Sequence[Any], jobs: Sequence[Callable[[Any], T]], *, width: int = 16
) -> Iterator[T | BaseException]:
    """`advance_together`, yielding each result in order as soon as it and all before it are done."""
    decoders = {id(d): d for d in map(decoder_for, policies)}
    if len(jobs) <= 1 or None in [decoder_for(p) for p in policies] or len(decoders) != 1:
        for policy, job in zip(policies, jobs, strict=True):
            yield _attempt(job, policy)
        return
    (decoder,) = decoders.values()
    shared = {id(p) for p in policies if sum(q is p for q in policies) > 1}
    outcomes: list[Any] = [None] * len(jobs)
    finished = [threading.Event() for _ in jobs]
    room = threading.Semaphore(width)

    def work(i: int, policy: Any) -> None:
        decoder.enter()
        try:
            outcomes[i] = _attempt(jobs[i], policy)
        finally:
            decoder.leave()
            room.release()
            finished[i].set()

    members = [batched(p, own_seed=id(p) in shared) for p in policies]  # in order: seeds repeat

    def launch() -> None:
        for i in range(len(jobs)):
            room.acquire()
            if i >= width:  # the first `width` joined at once, below: none decodes before all have joined
                decoder.join()
            threading.Thread(target=work, args=(i, members[i]), daemon=True, name=f"episode-{i}").start()

    aside = decoder.participating()
    if aside:  # a participant's job running episodes of its own (a whole bank): it waits, they decode
        decoder.leave()
    decoder.join(min(width, len(jobs)))
    threading.Thread(target=launch, daemon=True, name="episodes").start()
    try:
        for i in range(len(jobs)):
            finished[i].wait()
            yield outcomes[i]
    finally:
        if aside:
            decoder.join()
            decoder.enter()


def _attempt(job: Callable[[Any], T], policy: Any) -> T | BaseException:
    try:
        return job(policy)
    except Exception as exc:
        return exc
