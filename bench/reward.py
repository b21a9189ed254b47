"""Reward throughput: how many reward-v2 `compute_reward` calls per second a training step can score.

Setup (untimed): a base of 200 memories (LoCoMo conv-26's facts padded with synthetic ones, else all
synthetic), 64 questions, and 8 forks per question, each edited through `run_tool` as the agent
would: update one of the question's top hits, create a memory (the answer, or a distractor), delete
another. Each trajectory is scored on its target and 8 collateral questions (`collateral_sample`),
as the trainer scores it. Timed: the 512 rewards in one batch, exactly as the trainer does it:

    base_scores = score(base, questions, config); base_snapshot = base.snapshot()      # once
    compute_reward(base, fork, [target, *collateral], base_scores=[...], base_snapshot=base_snapshot)

One round with the questions evicted from the embedder's cache and the base's hits not yet kept
(cold), then 3 warm rounds, then the baseline: the plain path (a search per question on the fork, two
Python snapshots), whose rewards must equal the fast path's to 1e-9 (asserted). The time
is split into embedding, search (the proxy's batched fork searches and faithfulness's nearest-source
searches), the fork-vs-base diff (SQL plus turning rows into records), and the rest (Python: the QA
proxy's text work, faithfulness and efficiency). Target: >= 500 rewards/s.

    python -m bench.reward [--json OUT] [--url postgresql://...]      # from the repo root, under a minute
    memupdate bench reward                                            # the same, through the CLI
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from contextlib import contextmanager

from bench.common import (
    Meter,
    bench_namespace,
    console,
    load_embedder,
    memory_bank,
    open_engine,
    parse_args,
    print_table,
    server_line,
    synthetic_facts,
    timed,
    verdict,
    write_json,
)
from memupdate.agent.tools import run_tool
from memupdate.rl.namespaces import trajectory_namespace
from memupdate.rl.scoring.faithfulness import check_faithfulness
from memupdate.rl.scoring.qa_proxy import QAScore, build_context, evidence_recall, qa_score, score_questions
from memupdate.rl.scoring.reward import (
    RewardConfig,
    collateral_sample,
    combine,
    compute_reward,
    memory_efficiency,
    performance_delta,
    score,
    unsupported_penalty,
)
from memupdate.store import MemoryStore

N_MEMORIES = 200
N_QUESTIONS = 64
FORKS_PER_QUESTION = 8
WARM_ROUNDS = 3
TARGET_REWARDS_PER_S = 500.0
SEED = 0
CONFIG = RewardConfig()
# The store methods a reward's SQL goes through, metered by name (whichever of them the code calls).
SEARCH_METHODS = ("search_by_vector", "ranked_many_by_vector")  # search_many_by_vector calls the latter
DIFF_METHODS = ("snapshot", "changes_from")


# -- setup: the base and its edited forks (untimed) ---------------------------------------------


def make_forks(base: MemoryStore, questions: list) -> list[tuple[list, MemoryStore]]:
    """Fork the base FORKS_PER_QUESTION times per question and make 3 edits in each through `run_tool`."""
    rng = random.Random(SEED)
    snapshot = base.snapshot()
    top_hits = [s.retrieved for s in score_questions(base, questions)]
    distractors = iter(text for text, _, _ in synthetic_facts(len(questions) * FORKS_PER_QUESTION, SEED + 1))
    plans = []
    for qi, q in enumerate(questions):
        for j in range(FORKS_PER_QUESTION):
            target = snapshot[rng.choice(top_hits[qi])]
            created = f"{q.question.rstrip('?')}: {q.answer}." if j % 2 == 0 else next(distractors)
            victim = rng.choice([k for k in snapshot if k != target.key])
            plans.append((qi, j, [
                ("manage_memory", {"action": "update", "memory_id": target.key,
                                   "content": f"{target.content} (mentioned again in session {j + 2})"}),
                ("manage_memory", {"action": "create", "content": created}),
                ("delete_memory", {"memory_id": victim}),
            ]))  # fmt: skip
    # The new texts in one batch first: ~10x faster than 1,024 one-text calls, and it is only setup.
    with console.status("embedding the edits' new texts ..."):
        base.embedder.embed([c[1]["content"] for _, _, calls in plans for c in calls if "content" in c[1]])
    forks = []
    with console.status(f"forking and editing {len(plans)} trajectories ..."):
        for qi, j, calls in plans:
            fork = base.fork(trajectory_namespace(base.namespace[:-1], f"q{qi:02d}-f{j}"))
            for name, arguments in calls:
                result = run_tool(fork, name, arguments)
                assert result.ok, f"{name} failed: {result.text}"
            scored = [questions[qi], *collateral_sample(questions, questions[qi].index, CONFIG.collateral_questions)]
            forks.append((scored, fork))
    return forks


# -- timing: where a round's seconds go ---------------------------------------------------------


@contextmanager
def metering(embedder):  # noqa: ANN001, ANN201
    """Meters on `embedder.embed` (cache included), the store's search methods and its fork-vs-base
    reads; lists the texts the model itself embeds (`_embed_fn` runs only on a cache miss)."""
    meters = {"embed": Meter(), "search": Meter(), "diff": Meter()}
    embedded: list[str] = []
    model_fn = embedder._embed_fn
    originals = {name: getattr(MemoryStore, name) for name in SEARCH_METHODS + DIFF_METHODS if hasattr(MemoryStore, name)}

    def counted_model(texts: list[str]):  # noqa: ANN202
        embedded.extend(texts)
        return model_fn(texts)

    embedder._embed_fn = counted_model
    embedder.embed = timed(embedder.embed, meters["embed"])  # an instance attribute shadows the method
    for name, method in originals.items():
        setattr(MemoryStore, name, timed(method, meters["search" if name in SEARCH_METHODS else "diff"]))
    try:
        yield meters, embedded
    finally:
        embedder._embed_fn = model_fn
        del embedder.embed
        for name, method in originals.items():
            setattr(MemoryStore, name, method)


def score_round(base: MemoryStore, forks: list, questions: list) -> dict:
    """Score every trajectory as the trainer does; return the rate, the time split and the rewards."""
    gc.collect()  # start without the garbage of setup or the previous round
    with metering(base.embedder) as (meters, embedded):
        start = time.perf_counter()
        base_scores = dict(zip((q.index for q in questions), score(base, questions, CONFIG), strict=True))
        base_snapshot = base.snapshot()
        rewards = [
            compute_reward(
                base, fork, scored, CONFIG,
                base_scores=[base_scores[q.index] for q in scored], base_snapshot=base_snapshot,
            )
            for scored, fork in forks
        ]  # fmt: skip
        total = time.perf_counter() - start
    # Memories were embedded when they were written: scoring may embed the questions, nothing else.
    assert set(embedded) <= {q.question for q in questions} and len(embedded) <= len(questions), embedded[:3]
    split = {name: m.seconds for name, m in meters.items()}
    return {
        "rewards_per_s": len(rewards) / total,
        "total_s": total,
        "texts_embedded": len(embedded),
        "search_calls": meters["search"].calls,
        "diff_calls": meters["diff"].calls,
        **{f"{name}_s": s for name, s in split.items()},
        "python_s": total - sum(split.values()),
        "rewards": [r.reward for r in rewards],
    }


def plain_reward(base: MemoryStore, fork: MemoryStore, questions: list, base_scores: list, base_snapshot: dict) -> float:
    """The baseline: reward v2 the plain way, as before the fast path: one `search_by_vector` per
    question on the fork, and the fork's snapshot compared with the base's in Python."""
    vectors = fork.embedder.embed([q.question for q in questions])
    contexts = [build_context(fork.search_by_vector(v, CONFIG.candidates), CONFIG.context_tokens) for v in vectors]
    fork_scores = [
        QAScore(qa_score(q, c), evidence_recall(q.evidence, c.whole), c.tokens, c.keys, c.text)
        for q, c in zip(questions, contexts, strict=True)
    ]
    fork_snapshot = fork.snapshot()
    delta = performance_delta(base_scores, fork_scores, CONFIG)[0]
    efficiency = memory_efficiency(base_snapshot, fork_snapshot, CONFIG)
    penalty = unsupported_penalty(check_faithfulness(base, base_snapshot, fork_snapshot), CONFIG)
    return combine(delta, efficiency.value) - penalty


def plain_round(base: MemoryStore, forks: list, questions: list, rewards: list[float]) -> dict:
    """One round of the baseline on the same forks; its rewards must equal the fast path's."""
    gc.collect()
    start = time.perf_counter()
    base_scores = dict(zip((q.index for q in questions), score(base, questions, CONFIG), strict=True))
    base_snapshot = base.snapshot()
    plain = [plain_reward(base, fork, scored, [base_scores[q.index] for q in scored], base_snapshot) for scored, fork in forks]
    total = time.perf_counter() - start
    worst = max(abs(a - b) for a, b in zip(plain, rewards, strict=True))
    assert worst <= 1e-9, f"the fast path's rewards differ from the plain path's by up to {worst}"
    return {"rewards_per_s": len(plain) / total, "total_s": total, "max_abs_difference": worst}


# -- the benchmark ------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict:
    memories, questions, source = memory_bank(N_MEMORIES, N_QUESTIONS, SEED)
    engine = open_engine(args)
    embedder = load_embedder()
    console.print(f"{server_line(engine, embedder)}\nmemories: {source}")
    with bench_namespace(engine, embedder) as root:
        base = root.scoped((*root.namespace, "base"))
        with console.status(f"writing the base ({len(memories)} memories) ..."):
            base.create_many(memories)
        forks = make_forks(base, questions)
        for q in questions:  # cold: the trainer's first batch of a conversation has never embedded them
            embedder._cache.pop(q.question, None)
        rounds = []
        for name in ["cold cache"] + [f"warm #{i + 1}" for i in range(WARM_ROUNDS)]:
            with console.status(f"scoring {len(forks)} rewards, {name} ..."):
                rounds.append({"round": name, **score_round(base, forks, questions)})
        rewards = rounds[0]["rewards"]
        with console.status(f"scoring {len(forks)} rewards the plain way (the baseline) ..."):
            plain = plain_round(base, forks, questions, rewards)
    for r in rounds:
        assert r.pop("rewards") == rewards, "scoring the same forks again gave other rewards"
    warm = statistics.median(r["rewards_per_s"] for r in rounds[1:])
    return {
        "source": source,
        "trajectories": len(forks),
        "questions": len(questions),
        "rounds": rounds,
        "mean_reward": statistics.fmean(rewards),
        "positive_negative": [sum(r > 0 for r in rewards), sum(r < 0 for r in rewards)],
        "plain": plain,
        "speedup_over_plain": warm / plain["rewards_per_s"],
        "cold_rewards_per_s": rounds[0]["rewards_per_s"],
        "warm_rewards_per_s": warm,
        "target_rewards_per_s": TARGET_REWARDS_PER_S,
        "met": warm >= TARGET_REWARDS_PER_S,
    }


def report(summary: dict) -> None:
    rounds = summary["rounds"]

    def share(r: dict, key: str) -> str:
        return f"{r[key] * 1000:,.0f} ({r[key] / r['total_s']:.0%})"

    rows = [
        ["rewards/s", *[f"[bold]{r['rewards_per_s']:,.0f}[/bold]" for r in rounds]],
        ["ms per reward", *[f"{r['total_s'] * 1000 / summary['trajectories']:.2f}" for r in rounds]],
        ["texts embedded (model)", *[str(r["texts_embedded"]) for r in rounds]],
        ["embedding ms (share)", *[share(r, "embed_s") for r in rounds]],
        ["search SQL ms (share)", *[share(r, "search_s") for r in rounds]],
        ["fork-vs-base diff ms (share)", *[share(r, "diff_s") for r in rounds]],
        ["rest, Python ms (share)", *[share(r, "python_s") for r in rounds]],
        [
            f"≥ {TARGET_REWARDS_PER_S:g} rewards/s",
            *[verdict(r["rewards_per_s"] >= TARGET_REWARDS_PER_S) for r in rounds],
        ],
    ]
    first = rounds[0]
    positive, negative = summary["positive_negative"]
    print_table(
        f"reward v2 throughput: {summary['trajectories']} rewards ({summary['questions']} questions × "
        f"{FORKS_PER_QUESTION} forks, each scored on 1 + {CONFIG.collateral_questions} questions), {N_MEMORIES} memories",
        ["metric", *[r["round"] for r in rounds]],
        rows,
        [
            f"per round: score(base) + base.snapshot() once, then compute_reward per trajectory: "
            f"{first['search_calls']:,} search calls, {first['diff_calls']:,} diff calls. Both include turning rows "
            "into records; the rest is the QA proxy's text work, faithfulness and memory_efficiency.",
            f"mean reward {summary['mean_reward']:+.4f} ({positive} positive, {negative} negative), "
            "the same in every round (asserted).",
            "Timings on a shared 2-core machine vary by ±10-20% between runs; the median of the warm rounds is the figure.",
            f"baseline, the plain path (a search per question, two Python snapshots per fork): "
            f"{summary['plain']['rewards_per_s']:,.0f}/s on the same forks, the same rewards (max difference "
            f"{summary['plain']['max_abs_difference']:.1e}); the fast path: [bold]{summary['speedup_over_plain']:.2f}×[/bold]",
            f"target ≥ {TARGET_REWARDS_PER_S:g} rewards/s: warm median {summary['warm_rewards_per_s']:,.0f}/s "
            f"{verdict(summary['met'])} (cold cache {summary['cold_rewards_per_s']:,.0f}/s)",
        ],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.reward", description=__doc__.split("\n\n")[0])
    args = parse_args(parser, argv)
    summary = run(args)
    report(summary)
    write_json(args.json, summary)


if __name__ == "__main__":
    main()
