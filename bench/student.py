"""Student rollouts on a CPU: today's path (each rollout alone, `generate`) against episodes that advance
together (`agent/policies/batched.py`), side by side in one run.

The rollouts are the learning run's own (`rl learn`'s defaults): `rl.distill.rollouts.collect` of the
compaction task (one neighbourhood of 10 memories of LoCoMo conv-26's bank per unit, blind, scored on every
question), `UNITS` units x `MEMBERS` members, SmolLM2-135M-Instruct (`--model`, default `smollm2`) sampling
at temperature 0.8 with 192 new tokens a turn at most, 48 without a call, 4 turns, 6 operations. Both paths
roll out the same keys with the same seeds; then each path rolls out each unit once greedily, and the calls
are compared. Last, the batched path compacts a `COMPACT_MEMORIES`-memory bank (conv-26's facts padded with
synthetic ones) with `compact_bank`, as `memupdate compact` does, with the same decoding budgets.

Figures: rollouts per minute, new tokens and prefill tokens (prompt tokens run through the model: the rest
came from a KV cache) per rollout, mean reward, and `speedup` = batched / alone rollouts per minute. The
load average is recorded beside each time: the machine may be shared.

    python -m memupdate.bench.student [--out PATH] [--model PATH] [--threads N]     # ~10 min on 2 cores
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from memupdate.bench.common import (
    bench_main,
    bench_namespace,
    console,
    load_embedder,
    locomo_file,
    memory_bank,
    open_engine,
    print_table,
    server_line,
)
from memupdate.rl.distill.config import LearnConfig

UNITS = 3
MEMBERS = 4
COMPACT_MEMORIES = 250
# The learning run's own decoding settings, budgets and neighbourhood, read from their one home.
_LEARN = LearnConfig()
SETTINGS = {"temperature": _LEARN.temperature, "max_new_tokens": _LEARN.max_new_tokens, "max_prose_tokens": _LEARN.max_prose_tokens}
BUDGETS = {"max_turns": _LEARN.max_turns, "max_operations": _LEARN.max_operations}
NEIGHBOURHOOD = _LEARN.neighbourhood


class TokenMeter:
    """Counts every reply the student decodes: replies, new tokens, prompt tokens, prefill tokens."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.replies = self.new = self.prompt = self.prefill = 0
        self.scoring_s = 0.0

    def install(self) -> Any:
        from memupdate.agent.policies.hf import HuggingFaceChatModel

        original = HuggingFaceChatModel._reply
        meter = self

        def counted(model: Any, new_tokens: Any, n_in: int, prefilled: int, stop: Any) -> Any:
            with meter.lock:
                meter.replies += 1
                meter.new += len(new_tokens)
                meter.prompt += n_in
                meter.prefill += prefilled
            return original(model, new_tokens, n_in, prefilled, stop)

        from memupdate.rl.distill import compaction

        reward = compaction.compute_compaction_reward

        def scored(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return reward(*args, **kwargs)
            finally:
                with meter.lock:
                    meter.scoring_s += time.perf_counter() - started

        HuggingFaceChatModel._reply = counted
        compaction.compute_compaction_reward = scored

        def restore() -> None:
            HuggingFaceChatModel._reply = original
            compaction.compute_compaction_reward = reward

        return restore


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def rollouts(path: str, store: Any, task: Any, units: list, student: Any, members: int, temperature: float,
             meter: TokenMeter, out: Path) -> dict[str, Any]:
    """`members` rollouts per unit through `collect`, alone or together; their figures and records."""
    from memupdate.agent.policies import with_seed
    from memupdate.rl.distill.rollouts import PolicyGroup, TrajectoryLog, collect

    policy = student.model_copy(update={"batch_episodes": path == "together", "temperature": temperature})
    group = PolicyGroup(f"student-{path}", lambda seed: with_seed(policy, seed))
    log = TrajectoryLog(out / f"{path}-{temperature}.jsonl")
    meter.reset()
    before = load()
    started = time.perf_counter()
    records = collect(store, task, group, units, members, "bench", log, seed=0)
    wall = time.perf_counter() - started
    n = len(records)
    return {
        "path": path, "temperature": temperature, "rollouts": n, "wall_s": round(wall, 1),
        "rollouts_per_min": round(60 * n / wall, 2), "turns_per_rollout": round(sum(r.turns for r in records) / n, 2),
        "replies": meter.replies, "new_tokens_per_rollout": round(meter.new / n, 1),
        "prompt_tokens_per_rollout": round(meter.prompt / n, 1), "prefill_tokens_per_rollout": round(meter.prefill / n, 1),
        "scoring_s_per_rollout": round(meter.scoring_s / n, 2),
        "reward_mean": round(sum(r.reward for r in records) / n, 4), "load_before": before, "load_after": load(),
        "records": records,
    }


def same_calls(a: list[Any], b: list[Any]) -> list[bool]:
    """Per rollout pair (`task.Rollout`s): the same tool calls (names, arguments) and the same assistant texts."""
    def calls(record: Any) -> Any:
        said = [m["content"] for m in record.messages if m["role"] == "assistant"]
        return [(c["name"], c["args"]) for c in record.calls], said

    return [calls(x) == calls(y) for x, y in zip(a, b, strict=True)]


def compaction(store: Any, student: Any, memories: list, source: str) -> dict[str, Any]:
    """`compact_bank` of a bank of `memories` with the batched student, timed."""
    from memupdate.agent.compaction import DEFAULT_NEIGHBOURHOOD, compact_bank

    bank = store.scoped((*store.namespace, "compact-bank"))
    bank.create_many(memories)
    policy = student.model_copy(update={"temperature": 0.0})
    before = load()
    started = time.perf_counter()
    with console.status(f"compacting a {len(memories)}-memory bank with the student ..."):
        result = compact_bank(policy, bank, (*store.namespace, "compact-fork"), size=DEFAULT_NEIGHBOURHOOD, **BUDGETS)
    wall = time.perf_counter() - started
    calls = len(result.calls)
    return {"memories": len(memories), "episodes": result.episodes, "failed_episodes": len(result.failed_episodes),
            "write_calls": calls, "stop_reasons": result.stop_reasons, "wall_s": round(wall, 1),
            "load_before": before, "load_after": load(), "source": source}


def run(args: argparse.Namespace) -> dict:
    import torch

    from memupdate.agent.policies.hf import HuggingFaceChatModel
    from memupdate.agent.prompts import STUDENT_PROMPT
    from memupdate.llm.models import resolve_model
    from memupdate.rl.data.locomo import load_locomo
    from memupdate.rl.data.namespaces import base_namespace
    from memupdate.rl.distill.compaction import CompactionTask
    from memupdate.scoring.reward import RewardConfig

    torch.set_num_threads(args.threads)
    path = locomo_file()
    if path is None:
        return {"skipped": "no LoCoMo file (the learning run's data): set MEMUPDATE_LOCOMO_FILE"}
    try:
        checkpoint = resolve_model(args.model, STUDENT_PROMPT)
    except Exception as exc:  # no student built here: `make student`
        return {"skipped": f"no student checkpoint {args.model!r} ({exc}); run `make student`"}
    conversation = load_locomo(path, ["conv-26"])[0]
    engine = open_engine(args)
    embedder = load_embedder()
    with console.status("loading the student ..."):
        student = HuggingFaceChatModel.from_pretrained(checkpoint, **{k: v for k, v in SETTINGS.items() if k != "temperature"})
    console.print(f"{server_line(engine, embedder)}\nstudent: {args.model}, {args.threads} torch threads")
    meter = TokenMeter()
    restore = meter.install()
    out = Path(tempfile.mkdtemp(prefix="memupdate-bench-student-"))
    results: list[dict[str, Any]] = []
    try:
        with bench_namespace(engine, embedder) as root:
            base = root.scoped(base_namespace(conversation.sample_id))
            created = base.count() == 0
            task = CompactionTask(root, RewardConfig(), size=NEIGHBOURHOOD, **BUDGETS)
            units = task.training_units([conversation], UNITS)
            try:
                with console.status("untimed warm-up: the base's scores, the model's first turn ..."):
                    task.rollout(student.model_copy(update={"max_new_tokens": 4}), base, units[0])
                for members, temperature in ((MEMBERS, SETTINGS["temperature"]), (1, 0.0)):
                    for name in ("alone", "together"):
                        with console.status(f"{name}: {len(units)} units x {members} at temperature {temperature} ..."):
                            results.append(rollouts(name, root, task, units, student, members, temperature, meter, out))
                memories, _, source = memory_bank(COMPACT_MEMORIES, 0)
                compacted = compaction(root, student, memories, source) if not args.skip_compact else None
            finally:
                if created:
                    base.drop()
    finally:
        restore()
    sampled, greedy = results[:2], results[2:]
    match = same_calls(greedy[0]["records"], greedy[1]["records"])
    sampled_match = same_calls(sampled[0]["records"], sampled[1]["records"])
    for r in results:
        r.pop("records")
    return {
        "model": args.model, "threads": args.threads, "units": UNITS, "members": MEMBERS, "settings": SETTINGS,
        "budgets": BUDGETS, "results": results,
        "speedup": round(sampled[1]["rollouts_per_min"] / sampled[0]["rollouts_per_min"], 2),
        "greedy_speedup": round(greedy[1]["rollouts_per_min"] / greedy[0]["rollouts_per_min"], 2),
        "greedy_same_calls": sum(match), "greedy_rollouts": len(match),
        "sampled_same_calls": sum(sampled_match), "sampled_rollouts": len(sampled_match),
        "compaction": compacted,
    }


def report(summary: dict) -> None:
    rows = [
        [r["path"], f"{r['temperature']:g}", str(r["rollouts"]), f"{r['wall_s']:.0f}", f"{r['rollouts_per_min']:.1f}",
         f"{r['turns_per_rollout']:.1f}", f"{r['new_tokens_per_rollout']:.0f}", f"{r['prefill_tokens_per_rollout']:.0f}",
         f"{r['prompt_tokens_per_rollout']:.0f}", f"{r['scoring_s_per_rollout']:.1f}", f"{r['reward_mean']:+.4f}", f"{r['load_before'][0]:.1f}-{r['load_after'][0]:.1f}"]
        for r in summary["results"]
    ]
    notes = [
        f"speedup (batched / alone, sampled rollouts): {summary['speedup']:.2f}x; greedy: {summary['greedy_speedup']:.2f}x",
        f"greedy rollouts with the same calls and texts on both paths: {summary['greedy_same_calls']}/{summary['greedy_rollouts']}; "
        f"sampled (same seeds): {summary['sampled_same_calls']}/{summary['sampled_rollouts']} "
        "(a batch rounds differently from one sequence: a near-tie may flip)",
        "prefill: prompt tokens run through the model per rollout; prompt: all prompt tokens (the rest came from a KV cache).",
        "score s: the reward's time per rollout (every question of the bank, both sides), the same work on both paths.",
        f"model {summary['model']}, {summary['threads']} torch threads; load: 1-minute load average before-after.",
    ]
    c = summary["compaction"]
    if c:
        notes.append(
            f"compact_bank of {c['memories']} memories, batched: {c['episodes']} episodes in {c['wall_s']:.0f} s "
            f"({c['write_calls']} write calls, stop reasons {c['stop_reasons']}; load {c['load_before'][0]:.1f}-{c['load_after'][0]:.1f})"
        )
    print_table(
        f"student rollouts: {summary['units']} compaction units x {summary['members']} members, alone vs together",
        ["path", "temp", "rollouts", "wall s", "per min", "turns", "new tok", "prefill tok", "prompt tok", "score s", "reward", "load"],
        rows, notes,
    )


def main(argv: list[str] | None = None) -> None:
    bench_main("student", __doc__, run, _report_or_skip, argv, options=_options)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2", help="the student checkpoint (default: smollm2)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (default: all cores)")
    parser.add_argument("--skip-compact", action="store_true", help="leave out the compaction of a bank")


def _report_or_skip(summary: dict) -> None:
    if "skipped" in summary:
        console.print(f"[yellow]bench student skipped: {summary['skipped']}[/yellow]")
    else:
        report(summary)


if __name__ == "__main__":
    main()
