"""Rollout throughput: 512 rollouts (one GRPO step: 64 questions x 8) through `MemoryAgentLoop`.

Each rollout is what a training rollout does to the database: its first tool call forks a
200-memory base (LoCoMo conv-26's facts padded with synthetic ones, else all synthetic), then 10
tool calls (search x3, sample x2, create, update, delete, merge, split), then the reward on the open
fork (target question + 8 collateral ones), then the drop. The model is a scripted stand-in for the
rollout server returning the token ids of those Hermes tool calls (tiny locally trained tokenizer,
`memupdate.rl.distill.tiny_student`; no LLM weights exist here).

Two paths, each with 8 and with 64 rollouts in flight:
- `agent loop`: verl's real loop (`MemoryAgentLoop`: tokenization, Hermes parsing, our tools, reward);
- `database side`: the same tool calls and reward through the same `MemoryEditTool` objects and
  `finish_rollout`, without verl's loop: what memupdate itself costs. Target: 512 in under 10 s.
One untimed pass first embeds every text the scripts use (as a long run's cache would hold them),
so the timed passes measure database and Python work; the embedding model's time is reported.
Connections: the rollouts use `worker_store()`, the per-process pool of `WORKER_CONNECTIONS`.

    python -m memupdate.bench.rollouts [--out PATH] [--url postgresql://...]      # a few minutes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
import uuid
from collections import deque
from typing import Any

from memupdate.bench.common import (
    REPO,
    Meter,
    bench_main,
    bench_namespace,
    console,
    load_embedder,
    memory_bank,
    open_engine,
    percentile,
    print_table,
    server_line,
    timed,
    verdict,
)

N_MEMORIES = 200
N_QUESTIONS = 64
ROLLOUTS_PER_QUESTION = 8
CONCURRENCY = (8, 64)
TARGET_SECONDS = 10.0
SEED = 0


# -- the scripted rollouts ---------------------------------------------------------------------------


def call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def script(question: Any, keys: list[str], rng: random.Random) -> list[str]:
    """Ten tool calls, then a closing reply; `keys` are five distinct handles of the base."""
    k1, k2, k3, k4, k5 = rng.sample(keys, 5)
    return [
        call("search_memory", {"query": question.question}),
        call("sample_memory", {"strategy": "diverse", "k": 5}),
        call(
            "manage_memory",
            {"action": "create", "content": f"The answer to '{question.question}' is {question.answer}."},
        ),
        call("search_memory", {"query": f"{question.answer}"}),
        call(
            "manage_memory",
            {"action": "update", "memory_id": k1, "content": f"Updated note {k1}: {question.answer}."},
        ),
        call("delete_memory", {"memory_id": k2}),
        call("merge_memory", {"memory_ids": [k3, k4], "strategy": "concatenate"}),
        call("split_memory", {"memory_id": k5, "parts": [f"First part of {k5}.", f"Second part of {k5}."]}),
        call("sample_memory", {"strategy": "recent", "k": 3}),
        call("search_memory", {"query": question.question, "top_k": 5}),
        "The memory is ready.",
    ]


class ScriptedServer:
    """verl's `server_manager` stand-in: each new request id takes the next script; every call returns
    the next reply's token ids."""

    def __init__(self, tokenizer: Any, scripts: list[list[str]]):
        self.tokenizer, self.scripts, self.turns = tokenizer, deque(scripts), {}
        self.encoded: dict[str, list[int]] = {}

    async def generate(
        self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        await asyncio.sleep(0)
        if request_id not in self.turns:
            self.turns[request_id] = deque(self.scripts.popleft())
        reply = self.turns[request_id].popleft() if self.turns[request_id] else "Done."
        if reply not in self.encoded:
            self.encoded[reply] = self.tokenizer.encode(reply + "<|im_end|>", add_special_tokens=False)
        return TokenOutput(token_ids=self.encoded[reply], log_probs=None, stop_reason="completed")


def make_rows(base: Any, questions: list[Any]) -> list[dict[str, Any]]:
    """One preprocessed row per question (the shape `memupdate data preprocess` writes), 8 collateral each."""
    from memupdate.agent.prompts import system_prompt, task_prompt
    from memupdate.agent.tools import MEMORY_TOOLS
    from memupdate.rl.data.namespaces import trajectory_namespace
    from memupdate.rl.data.preprocess import DATA_SOURCE
    from memupdate.scoring.questions import qa_row
    from memupdate.store import namespace_path

    rows = []
    for i, q in enumerate(questions):
        trajectory = f"bench-qa{i}-{uuid.uuid4().hex[:8]}"
        bank = namespace_path(trajectory_namespace(base.namespace, trajectory))
        create_kwargs = {"base_namespace": base.path, "namespace": bank, "trajectory_id": trajectory}
        others = random.Random(i).sample([o for o in questions if o is not q], 8)
        extra_info = {
            **qa_row(q), "collateral": [qa_row(o) for o in others],
            "trajectory_id": trajectory, "base_namespace": base.path, "namespace": bank, "index": i,
            "tools_kwargs": {name: {"create_kwargs": create_kwargs} for name in MEMORY_TOOLS},
        }
        prompt = [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": task_prompt(bank, q.question)},
        ]
        rows.append({"data_source": DATA_SOURCE, "prompt": prompt, "extra_info": extra_info})
    return rows


# -- the two paths -----------------------------------------------------------------------------------


async def run_agent_loops(rows, scripts, concurrency: int, env: dict) -> list[float]:
    """512 rollouts through verl's MemoryAgentLoop, `concurrency` at a time; per-rollout seconds."""
    from hydra.utils import instantiate
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    server = ScriptedServer(env["tokenizer"], [list(s) for s in scripts])
    gate = asyncio.Semaphore(concurrency)
    target = {"_target_": "memupdate.rl.verl.agent_loop.MemoryAgentLoop"}

    async def one(i: int) -> float:
        row = rows[i // ROLLOUTS_PER_QUESTION]
        async with gate:
            start = time.perf_counter()
            loop = instantiate(
                target, trainer_config=DictConfigWrap(env["config"]), server_manager=server, tokenizer=env["tokenizer"],
                processor=None, hf_model_type="qwen2", dataset_cls=RLHFDataset,
                data_config=DictConfigWrap(env["config"].data), tools=ToolListWrap(env["tools"]),
            )
            output = await loop.run(
                {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False},
                raw_prompt=row["prompt"], tools_kwargs=row["extra_info"]["tools_kwargs"], extra_info=row["extra_info"],
                index=i, uid=str(i // ROLLOUTS_PER_QUESTION), data_source=row["data_source"],
            )
            assert output.extra_fields["reward_extra_info"]["tool_calls"] == 10, output.extra_fields
            return time.perf_counter() - start

    return list(await asyncio.gather(*(one(i) for i in range(len(scripts)))))


async def run_database_side(rows, scripts, concurrency: int, env: dict) -> list[float]:
    """The same tool calls and rewards through the same verl tool objects, without verl's loop."""
    from verl.experimental.agent_loop.tool_agent_loop import AgentData

    from memupdate.rl.verl.forks import finish_rollout

    tools = {tool.name: tool for tool in env["tools"]}
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> float:
        row = rows[i // ROLLOUTS_PER_QUESTION]
        tools_kwargs = row["extra_info"]["tools_kwargs"]
        async with gate:
            start = time.perf_counter()
            data = AgentData([], None, None, None, None, {}, uuid.uuid4().hex, tools_kwargs)
            for reply in scripts[i][:-1]:
                payload = json.loads(reply.split("\n")[1])
                tool = tools[payload["name"]]
                instance, _ = await tool.create(create_kwargs=tools_kwargs[tool.name]["create_kwargs"])
                response, _, _ = await tool.execute(instance, payload["arguments"], agent_data=data)
                await tool.release(instance)
                assert not response.text.startswith("error"), response.text
            await finish_rollout(data.extra_fields, row["extra_info"])
            return time.perf_counter() - start

    return list(await asyncio.gather(*(one(i) for i in range(len(scripts)))))


# -- set-up, timing, report --------------------------------------------------------------------------


def count_connections(engine: Any) -> dict[str, Any]:
    """Physical connections opened by `engine`, the most checked out at once, and the statements run
    with the time spent inside them (client round trip: driver, network, server)."""
    import threading

    from sqlalchemy import event

    counts: dict[str, Any] = {"opened": 0, "in_use": 0, "peak": 0, "statements": 0, "sql_s": 0.0}
    started = threading.local()
    lock = threading.Lock()

    def before_execute(*_: Any) -> None:
        started.at = time.perf_counter()

    def after_execute(*_: Any) -> None:
        elapsed = time.perf_counter() - started.at
        with lock:
            counts["statements"] += 1
            counts["sql_s"] += elapsed

    def on_connect(*_: Any) -> None:
        counts["opened"] += 1

    def on_checkout(*_: Any) -> None:
        counts["in_use"] += 1
        counts["peak"] = max(counts["peak"], counts["in_use"])

    def on_checkin(*_: Any) -> None:
        counts["in_use"] -= 1

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "checkout", on_checkout)
    event.listen(engine, "checkin", on_checkin)
    event.listen(engine, "before_cursor_execute", before_execute)
    event.listen(engine, "after_cursor_execute", after_execute)
    return counts


def prepare(engine: Any, embedder: Any) -> dict[str, Any]:
    """The tiny tokenizer, our GRPO config composed for it, verl's tools from our YAML, the worker store."""
    from transformers import AutoTokenizer
    from verl.tools.tool_registry import initialize_tools_from_config

    from memupdate.rl.distill.tiny_student import build_tiny_checkpoint
    from memupdate.rl.verl import worker_db
    from memupdate.rl.verl.launch import CONFIGS_DIR, compose_config

    model = build_tiny_checkpoint(tempfile.mkdtemp(prefix="memupdate-bench-tiny-"))
    config = compose_config(CONFIGS_DIR, "locomo_memory_grpo", [
        f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.prompt_length=4096",
        "actor_rollout_ref.rollout.response_length=8192", "data.max_prompt_length=4096", "data.max_response_length=8192",
    ])
    os.environ["MEMUPDATE_DATABASE_URL"] = engine.url.render_as_string(hide_password=False)
    from memupdate.settings import get_settings

    get_settings.cache_clear()
    worker_db.use_worker_store(None)
    store = worker_db.worker_store()  # the production pool: WORKER_CONNECTIONS connections
    worker_db.use_worker_store(type(store)(store.engine, embedder, store.namespace))
    tools = initialize_tools_from_config(str(REPO / "configs" / "tool_config" / "memory_tools.yaml"))
    return {
        "config": config,
        "tokenizer": AutoTokenizer.from_pretrained(model),
        "tools": tools,
        "engine": store.engine,
    }


def _restore_process(saved_url: str | None) -> None:
    """Undo `prepare`'s process-wide settings (`memupdate bench all` runs every benchmark in one process)."""
    from memupdate.rl.verl import worker_db
    from memupdate.settings import get_settings

    worker_db.use_worker_store(None)
    if saved_url is None:
        os.environ.pop("MEMUPDATE_DATABASE_URL", None)
    else:
        os.environ["MEMUPDATE_DATABASE_URL"] = saved_url
    get_settings.cache_clear()


def run(args: argparse.Namespace) -> dict:
    import contextlib
    import io

    from memupdate.rl.verl.worker_db import WORKER_CONNECTIONS

    memories, questions, source = memory_bank(N_MEMORIES, N_QUESTIONS, SEED)
    engine = open_engine(args)
    embedder = load_embedder()
    console.print(f"{server_line(engine, embedder)}\nmemories: {source}")
    saved_url = os.environ.get("MEMUPDATE_DATABASE_URL")
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints every tool schema it loads
        env = prepare(engine, embedder)
    connections = count_connections(env["engine"])
    model = Meter()
    model_fn = embedder._embed_fn
    embedder._embed_fn = timed(model_fn, model)
    results = []
    try:
        with bench_namespace(engine, embedder) as root:
            base = root.scoped((*root.namespace, "base"))
            base.create_many(memories)
            rows = make_rows(base, questions)
            keys = sorted(base.snapshot())
            rng = random.Random(SEED)
            scripts = [
                script(questions[i // ROLLOUTS_PER_QUESTION], keys, rng)
                for i in range(N_QUESTIONS * ROLLOUTS_PER_QUESTION)
            ]
            with console.status("untimed pass: embedding every text the scripts use ..."):
                asyncio.run(run_database_side(rows, scripts, 64, env))
            for name, path in (("database side", run_database_side), ("agent loop", run_agent_loops)):
                for concurrency in CONCURRENCY:
                    model.seconds = model.calls = 0
                    before = dict(connections)
                    with console.status(f"{name}, {concurrency} in flight ..."):
                        start = time.perf_counter()
                        seconds = asyncio.run(path(rows, scripts, concurrency, env))
                        wall = time.perf_counter() - start
                    left = root.list_namespaces(base.namespace)
                    assert left == [base.namespace], f"forks left behind: {left[:3]}"
                    results.append({
                        "path": name, "concurrency": concurrency, "rollouts": len(seconds), "wall_s": wall,
                        "p50_s": percentile(seconds, 50), "p95_s": percentile(seconds, 95),
                        "model_s": model.seconds, "connections_opened": connections["opened"] - before["opened"],
                        "connections_peak": connections["peak"],
                        "statements_per_rollout": (connections["statements"] - before["statements"]) / len(seconds),
                        "sql_s": connections["sql_s"] - before["sql_s"],
                    })
    finally:
        embedder._embed_fn = model_fn
        env["engine"].dispose()
        _restore_process(saved_url)
    return {"source": source, "memories": N_MEMORIES, "worker_connections": WORKER_CONNECTIONS,
            "connections_opened_total": connections["opened"], "target_s": TARGET_SECONDS, "results": results}


def report(summary: dict) -> None:
    rows = []
    for r in summary["results"]:
        met = verdict(r["wall_s"] < TARGET_SECONDS) if r["path"] == "database side" else "-"
        rows.append([r["path"], str(r["concurrency"]), str(r["rollouts"]), f"{r['wall_s']:.2f}", f"{r['p50_s'] * 1000:.0f}",
                     f"{r['p95_s'] * 1000:.0f}", f"{r['statements_per_rollout']:.0f}", f"{r['sql_s']:.1f}",
                     f"{r['model_s']:.2f}", f"{r['connections_opened']}/{r['connections_peak']}", met])
    print_table(
        f"{rows[0][2] if rows else 0} rollouts (fork + 10 tool calls + reward + drop) on a {summary['memories']}-memory base",
        ["path", "in flight", "rollouts", "wall s", "p50 ms", "p95 ms", "stmts", "SQL s", "model s",
         "conns new/peak", f"< {TARGET_SECONDS:g} s"],
        rows,
        [
            f"memories: {summary['source']}",
            "p50/p95: one rollout's time from its start (inside the in-flight limit) to its reward and drop.",
            "stmts: SQL statements per rollout; SQL s: time inside them, summed over the database threads "
            "(driver, socket and server; the rest of the wall time is Python: tools, QA proxy, reward, verl).",
            "model s: the embedding model's time in the pass (the texts were embedded by an untimed pass first).",
            f"conns: connections opened during the pass / most in use at once; a worker process opens at most "
            f"{summary['worker_connections']} (memupdate.rl.verl.worker_db.WORKER_CONNECTIONS); this run opened "
            f"{summary['connections_opened_total']} in all.",
            "Timings on a shared 2-core machine vary by ±10-20% between runs, more when another process is busy.",
        ],
        left=1,
    )


def main(argv: list[str] | None = None) -> None:
    bench_main("rollouts", __doc__, run, report, argv)


if __name__ == "__main__":
    main()
