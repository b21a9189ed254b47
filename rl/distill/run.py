"""Offline RL distillation: teacher rollout groups -> rewards -> GRPO advantages -> fine-tuned student.

    from memupdate.rl.distill.run import DistillConfig, distill
    metrics = distill(store, train_conversations, eval_conversations, DistillConfig(teacher="heuristic",
                      student="tiny", group_size=4, iterations=1), out="runs/tiny")
    # runs/tiny: a Hugging Face checkpoint that `make_policy("hf", model=...)` and verl load unchanged

One iteration:
1. Rollout groups. For each training question the base bank is forked `group_size` times and the
   teacher edits each fork through the same LangGraph graph and tools as any policy, made stochastic
   (the heuristic's seeded `explore`, an LLM's sampling temperature). Every trajectory (messages as the
   student's chat template takes them, tool calls with their results, the reward and its parts) is
   appended to `trajectories.jsonl` as it finishes; a rerun skips the ones already there (resume).
2. Rewards and advantages. `compute_reward` on the target question plus its collateral sample; then
   GRPO's group-relative advantage (`advantages.group_advantages`, verl's own function when installed).
   Groups whose rewards are all equal carry no signal and are counted.
3. Student update. Trajectories with a positive advantage (rejection-sampling fine-tuning; or
   `weighting="advantage"`: weighted by it) are rendered with the student's chat template and trained
   on with the loss on assistant tokens only (`distill_render`), a plain PyTorch loop.
4. Evaluation. The student (greedy) edits held-back questions, scored with the same reward, beside the
   teacher and no edits (measured once).
With `iterations > 1` the student of iteration k rolls out the groups of k + 1, each group joined by
the original teacher's trajectories of the same question (iteration 1), so the student's trajectories
are judged against the teacher's and good teacher trajectories stay in the training set.

Limits (memory): training runs one trajectory at a time (`batch_size` trajectories per optimiser step
by gradient accumulation) cut to `max_length` tokens, and logits are computed only on the trained
tokens; peak memory is about the model, AdamW's two moments and one sequence's activations.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage

from memupdate.agent.graph import run_episode
from memupdate.agent.policies.hf import to_chat_dicts
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.data.locomo import Conversation, QAItem
from memupdate.rl.distill.advantages import group_advantages, zero_variance_groups
from memupdate.rl.evaluate import EvalConfig, Mode, eval_questions, trajectory_id, trajectory_namespace
from memupdate.rl.scoring.reward import RewardConfig, collateral_sample, compute_reward, score
from memupdate.store import MemoryStore, MemupdateError

Progress = Callable[[str, int, int], None]
TRAJECTORIES = "trajectories.jsonl"
EVALUATIONS = "eval.jsonl"
RUN_INFO = "memupdate.json"


@dataclass(frozen=True)
class DistillConfig:
    teacher: str = "heuristic"  # heuristic | openai:MODEL | hf:DIR
    student: str = "tiny"  # tiny | a Hugging Face checkpoint directory
    group_size: int = 4
    iterations: int = 1
    mode: Mode = "targeted"
    max_questions: int | None = 8  # training questions per training conversation
    eval_questions: int = 8  # held-back questions per evaluation conversation
    explore: float = 0.3  # heuristic teacher: share of candidate edits left out / shuffled per rollout
    temperature: float = 0.8  # LLM teachers and the student when it rolls out
    base_url: str | None = None  # openai teacher
    api_key: str | None = None
    weighting: Literal["positive", "advantage"] = "positive"
    epochs: int = 3
    learning_rate: float | None = None  # default: 1e-3 for a tiny student, 1e-5 for a pretrained one
    batch_size: int = 4  # trajectories per optimiser step (gradient accumulation, one sequence at a time)
    max_length: int = 4096  # tokens per trajectory; longer ones are cut (their start is kept)
    max_new_tokens: int = 384  # per student turn
    lora_rank: int = 0  # > 0: train LoRA adapters (peft), merged into the saved checkpoint
    gradient_checkpointing: bool = False
    tiny_vocab_size: int = 4000
    tiny_hidden_size: int = 128
    tiny_layers: int = 4
    max_turns: int | None = None
    max_operations: int | None = None
    seed: int = 0
    reward: RewardConfig = field(default_factory=RewardConfig)


# -- teachers --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Teacher:
    """Who rolls out a group: `make(seed)` gives one member's chat model (None: no edits)."""

    name: str
    make: Callable[[int], BaseChatModel | None]


def make_teacher(spec: str, store: MemoryStore, config: DistillConfig, *, temperature: float | None = None) -> Teacher:
    """`heuristic`, `openai:MODEL` or `hf:DIR` (also `none`: no edits), stochastic across seeds."""
    from memupdate.agent.policies import make_policy
    from memupdate.agent.policies.heuristic import HeuristicPolicy
    from memupdate.agent.policies.hf import HuggingFaceChatModel
    from memupdate.settings import get_settings

    kind, _, model = spec.partition(":")
    temperature = config.temperature if temperature is None else temperature
    if kind == "none":
        return Teacher(spec, lambda seed: None)
    if kind == "heuristic" and not model:
        operations = config.max_operations or get_settings().max_operations
        explore = config.explore if temperature > 0 else 0.0
        return Teacher(spec, lambda seed: HeuristicPolicy(store=store, seed=seed, explore=explore, max_operations=operations))
    if kind == "openai" and model:
        base = make_policy("openai", store, model=model, base_url=config.base_url, api_key=config.api_key, temperature=temperature)
        return Teacher(spec, lambda seed: base.model_copy(update={"seed": seed}))
    if kind == "hf" and model:
        loaded = make_policy("hf", store, model=model, temperature=temperature)
        assert isinstance(loaded, HuggingFaceChatModel)

        def member(seed: int) -> HuggingFaceChatModel:  # shares the loaded weights; its own sampling seed
            return HuggingFaceChatModel(
                hf_model=loaded.hf_model, tokenizer=loaded.tokenizer, max_new_tokens=config.max_new_tokens,
                temperature=temperature, seed=seed, system_prompt=loaded.system_prompt,
                tool_result_chars=loaded.tool_result_chars,
            )  # fmt: skip

        return Teacher(spec, member)
    raise MemupdateError(f"--teacher {spec!r} is not one of heuristic, openai:MODEL (e.g. openai:Qwen/Qwen2.5-7B-Instruct), hf:DIR")


# -- rollouts ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """One question to roll out a group on, with the questions its reward scores (target first)."""

    conversation: Conversation
    qa: QAItem
    scored: list[QAItem]

    @property
    def group(self) -> str:
        return f"{self.conversation.sample_id}/qa{self.qa.index}"


def training_prompts(conversations: Sequence[Conversation], config: DistillConfig) -> list[Prompt]:
    """The first `max_questions` answerable questions of each conversation, each with its collateral sample."""
    prompts = []
    for conversation in conversations:
        questions, _ = eval_questions(conversation, EvalConfig())
        for qa in questions[: config.max_questions]:
            scored = [qa, *collateral_sample(questions, qa.index, config.reward.collateral_questions)]
            prompts.append(Prompt(conversation, qa, scored))
    return prompts


def held_back_prompts(conversations: Sequence[Conversation], used: Sequence[Prompt], config: DistillConfig) -> list[Prompt]:
    """Up to `eval_questions` questions per conversation that no training group used."""
    seen = {p.group for p in used}
    prompts = []
    for conversation in conversations:
        questions, _ = eval_questions(conversation, EvalConfig())
        fresh = [qa for qa in questions if f"{conversation.sample_id}/qa{qa.index}" not in seen]
        for qa in fresh[: config.eval_questions]:
            prompts.append(Prompt(conversation, qa, [qa, *collateral_sample(questions, qa.index, config.reward.collateral_questions)]))
    return prompts


def member_seed(config: DistillConfig, key: str) -> int:
    """A seed per trajectory key: a resumed run draws the same rollouts as an uninterrupted one."""
    return int.from_bytes(hashlib.sha256(f"{config.seed}:{key}".encode()).digest()[:4], "big")


def rollout(
    policy: BaseChatModel | None, base: MemoryStore, prompt: Prompt, config: DistillConfig, base_scores: list, base_snapshot: dict
) -> dict[str, Any]:
    """Fork the base, let `policy` edit the fork, score it with the reward, drop it; the trajectory record."""
    started = time.perf_counter()
    sample_id = prompt.conversation.sample_id
    trajectory = trajectory_id(sample_id, prompt.qa.index)
    fork = base.fork(trajectory_namespace(sample_id, trajectory), episode=trajectory)
    try:
        messages: list = []
        episode = None
        if policy is not None:
            question = prompt.qa.question if config.mode == "targeted" else None
            episode = run_episode(policy, fork, question, max_turns=config.max_turns, max_operations=config.max_operations)
            messages = episode.messages
        reward = compute_reward(base, fork, prompt.scored, config.reward, base_scores=base_scores, base_snapshot=base_snapshot)
    finally:
        fork.drop()
    return {
        "sample_id": sample_id,
        "qa_index": prompt.qa.index,
        "question": prompt.qa.question,
        "group": prompt.group,
        "messages": to_chat_dicts(messages),
        **call_summary(messages),
        "stop_reason": episode.stop_reason if episode else None,
        "turns": episode.turns if episode else 0,
        "reward": reward.reward,
        "reward_parts": reward.as_dict(),
        "seconds": round(time.perf_counter() - started, 2),
    }


def call_summary(messages: Sequence) -> dict[str, Any]:
    """Each tool call with its result, and the counts behind the share of valid calls."""
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    calls, invalid = [], 0
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        invalid += len(message.invalid_tool_calls)
        for call in message.tool_calls:
            result = results.get(call["id"])
            ok = result is not None and result.status == "success"
            calls.append({"name": call["name"], "args": call["args"], "ok": ok, "result": result.content if result else None})
    return {
        "calls": calls,
        "valid_calls": len(calls),
        "invalid_calls": invalid,
        "ok_calls": sum(c["ok"] for c in calls),
    }


class TrajectoryLog:
    """An append-only JSONL of records keyed by `key`; what is already there is not rolled out again."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        if path.is_file():
            lines = path.read_text().splitlines()
            for number, line in enumerate(lines):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    if number == len(lines) - 1:  # a run killed mid-write leaves a partial last line
                        break
                    raise MemupdateError(f"{path}, line {number + 1}, is not JSON: fix or delete that line to resume") from None
                self.records[record["key"]] = record
            # Rewrite without a partial tail, so appends start on a fresh line.
            path.write_text("".join(json.dumps(r) + "\n" for r in self.records.values()))
        path.touch()  # the dataset's place exists from the start, even if the first rollout fails

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def append(self, record: dict[str, Any]) -> None:
        self.records[record["key"]] = record
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def collect(
    store: MemoryStore,
    teacher: Teacher,
    prompts: Sequence[Prompt],
    members: int,
    prefix: str,
    log: TrajectoryLog,
    config: DistillConfig,
    progress: Progress | None = None,
    stage: str = "rollouts",
) -> list[dict[str, Any]]:
    """`members` rollouts of `teacher` per prompt, keyed `{prefix}/{group}/g{member}`; logged ones are reused."""
    records, done, total = [], 0, len(prompts) * members
    for conversation, group in _by_conversation(prompts):
        base = ingest_conversation(store, conversation)
        if base.count() == 0:
            raise MemupdateError(f"conversation {conversation.sample_id} has no facts to remember: leave it out of --conversations")
        snapshot = None
        for prompt in group:
            base_scores = None
            for member in range(members):
                key = f"{prefix}/{prompt.group}/g{member}"
                if key not in log:
                    if base_scores is None:
                        snapshot = snapshot or base.snapshot()
                        base_scores = score(base, prompt.scored, config.reward)
                    seed = member_seed(config, key)
                    try:
                        record = rollout(teacher.make(seed), base, prompt, config, base_scores, snapshot)
                    except MemupdateError:
                        raise
                    except Exception as exc:  # the teacher (an endpoint, a checkpoint) failed: keep what is logged
                        raise MemupdateError(
                            f"teacher {teacher.name} failed on {key}: {type(exc).__name__}: {exc}. The {len(log.records)} "
                            f"trajectories so far are kept in {log.path}; fix the teacher and rerun the same command to resume"
                        ) from exc
                    log.append({"key": key, "policy": teacher.name, "member": member, "seed": seed, **record})
                records.append(log.records[key])
                done += 1
                if progress:
                    progress(stage, done, total)
    return records


def _by_conversation(prompts: Sequence[Prompt]) -> list[tuple[Conversation, list[Prompt]]]:
    grouped: dict[str, tuple[Conversation, list[Prompt]]] = {}
    for prompt in prompts:
        grouped.setdefault(prompt.conversation.sample_id, (prompt.conversation, []))[1].append(prompt)
    return list(grouped.values())


# -- advantages ---------------------------------------------------------------------------------------


def assign_advantages(records: Sequence[dict[str, Any]]) -> tuple[list[float], dict[str, Any]]:
    """Each record's group-relative advantage (grouped by question), and the counts a report needs."""
    rewards = [r["reward"] for r in records]
    groups = [r["group"] for r in records]
    advantages = [float(a) for a in group_advantages(rewards, groups)] if records else []
    flat = zero_variance_groups(rewards, groups)
    return advantages, {
        "groups": len(set(groups)),
        "zero_variance_groups": len(flat),
        "trajectories": len(records),
        "positive": sum(a > 0 for a in advantages),
        "reward_mean": _mean(rewards),
    }


def training_weights(advantages: Sequence[float], weighting: str) -> list[float]:
    """Rejection sampling keeps positive advantages with weight 1; `advantage` weights them by it (mean 1).
    Negative advantages are never trained on: a negative weight on the likelihood has no floor."""
    if weighting == "positive":
        return [1.0 if a > 0 else 0.0 for a in advantages]
    if weighting == "advantage":
        positive = [a for a in advantages if a > 0]
        scale = len(positive) / sum(positive) if positive else 0.0
        return [a * scale if a > 0 else 0.0 for a in advantages]
    raise MemupdateError(f"--weighting {weighting!r} is not positive or advantage")


# -- the student ------------------------------------------------------------------------------------


def check_student(path: str) -> None:
    """A clear error, before any rollout, when `path` is not a checkpoint a student can start from."""
    from memupdate.agent.policies.hf import checkpoint_tokenizer

    try:
        checkpoint_tokenizer(path)
    except ValueError as exc:
        raise MemupdateError(f"--student {path!r} (give `tiny` or a checkpoint folder): {exc}") from None


def build_tiny_student(path: Path, records: Sequence[dict[str, Any]], config: DistillConfig) -> Path:
    """A tiny Qwen2 whose tokenizer is trained on the rendered trajectories (nothing downloaded)."""
    from memupdate.rl.distill.render import render_transcript
    from memupdate.rl.distill.tiny_student import build_tiny_checkpoint, train_tokenizer

    renderer = train_tokenizer()  # only its chat template is used, to render the texts the real one learns from
    texts = [render_transcript(renderer, r["messages"]) for r in records if r["messages"]]
    return build_tiny_checkpoint(
        path, config.tiny_vocab_size, texts=texts, hidden_size=config.tiny_hidden_size, layers=config.tiny_layers,
        max_positions=max(config.max_length, 4096),
    )  # fmt: skip


def finetune(
    start: Path, out: Path, records: Sequence[dict[str, Any]], weights: Sequence[float], config: DistillConfig, *, tiny: bool,
    progress: Progress | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Fine-tune the checkpoint at `start` on the weighted records, loss on assistant tokens; save to `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from memupdate.rl.distill.render import tokenize_with_mask

    tokenizer = AutoTokenizer.from_pretrained(start, local_files_only=True)
    examples, cut = [], 0
    for record, weight in zip(records, weights, strict=True):
        if weight <= 0 or not record["messages"]:
            continue
        ids, mask = tokenize_with_mask(tokenizer, record["messages"])
        cut += len(ids) > config.max_length
        ids, mask = ids[: config.max_length], mask[: config.max_length]
        if any(mask[1:]):
            examples.append((ids, mask, weight))
    if not examples:
        raise MemupdateError("no trajectory with a positive advantage has an assistant token to train on")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(config.seed)
    # float32 master weights (a 1e-5 step is below bf16's resolution), bf16 autocast on a GPU.
    model = AutoModelForCausalLM.from_pretrained(start, local_files_only=True, dtype=torch.float32).to(device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if config.lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=config.lora_rank, lora_alpha=2 * config.lora_rank, target_modules="all-linear"))
    model.train()
    rate = config.learning_rate or (1e-3 if tiny else 1e-5)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=rate, weight_decay=0.0)
    steps = config.epochs * math.ceil(len(examples) / config.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / max(steps, 1))
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    order, losses, step = list(range(len(examples))), [], 0
    shuffle = random.Random(config.seed)
    for _ in range(config.epochs):
        shuffle.shuffle(order)
        for first in range(0, len(order), config.batch_size):
            batch = [examples[i] for i in order[first : first + config.batch_size]]
            tokens = sum(sum(mask[1:]) for _, mask, _ in batch)
            total = 0.0
            for ids, mask, weight in batch:
                input_ids = torch.tensor([ids], device=device)
                trained = torch.tensor(mask[1:], device=device)  # token t is predicted from the ones before it
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                    hidden = decoder(input_ids=input_ids).last_hidden_state[0, :-1][trained]
                    logits = head(hidden).float()  # only where the loss is: a 150k vocabulary x 4k tokens would not fit
                loss = torch.nn.functional.cross_entropy(logits, input_ids[0, 1:][trained], reduction="sum") * weight / tokens
                loss.backward()
                total += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(total)
            step += 1
            if progress:
                progress("fine-tune", step, steps)
    if config.lora_rank:
        model = model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "examples": len(examples),
        "cut_to_max_length": cut,
        "trained_tokens": sum(sum(m[1:]) for _, m, _ in examples),
        "steps": steps,
        "learning_rate": rate,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": [round(v, 4) for v in losses],
    }


# -- evaluation ---------------------------------------------------------------------------------------


def evaluate_policy(
    store: MemoryStore, teacher: Teacher, prompts: Sequence[Prompt], label: str, log: TrajectoryLog, config: DistillConfig,
    progress: Progress | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One greedy rollout per held-back prompt, logged under `eval/{label}`; the summary."""
    records = collect(store, teacher, prompts, 1, f"eval/{label}", log, config, progress, f"eval {label}")
    return summarize(records)


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    valid = sum(r["valid_calls"] for r in records)
    invalid = sum(r["invalid_calls"] for r in records)
    tools = Counter(c["name"] for r in records for c in r["calls"])
    tools_ok = Counter(c["name"] for r in records for c in r["calls"] if c["ok"])
    return {
        "questions": len(records),
        "reward_mean": _mean([r["reward"] for r in records]),
        "qa_delta_mean": _mean([r["reward_parts"]["performance_delta"] for r in records]),
        "valid_call_share": valid / (valid + invalid) if valid + invalid else None,
        "ok_call_share": sum(r["ok_calls"] for r in records) / valid if valid else None,
        "calls_per_episode": (valid + invalid) / len(records) if records else 0.0,
        "tool_calls": {name: {"calls": n, "ok": tools_ok[name]} for name, n in sorted(tools.items())},
        "stop_reasons": dict(Counter(str(r["stop_reason"]) for r in records)),
    }


# -- the loop -----------------------------------------------------------------------------------------


def distill(
    store: MemoryStore,
    train: Sequence[Conversation],
    held_back: Sequence[Conversation],
    config: DistillConfig,
    out: str | Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the distillation into `out` (resuming from what is there); returns the metrics."""
    started = time.perf_counter()
    out = Path(out)
    tiny = config.student == "tiny"
    if not tiny:
        from memupdate.agent.models import resolve_model

        config = replace(config, student=resolve_model(config.student))
        check_student(config.student)
    if config.group_size < 2:
        raise MemupdateError(f"--group-size {config.group_size}: GRPO compares rollouts of one question, so it needs at least 2")
    out.mkdir(parents=True, exist_ok=True)
    log, eval_log = TrajectoryLog(out / TRAJECTORIES), TrajectoryLog(out / EVALUATIONS)
    prompts = training_prompts(train, config)
    evals = held_back_prompts(held_back, prompts, config)
    if not prompts:
        raise MemupdateError("no training questions: check --conversations and --max-questions")
    teacher = make_teacher(config.teacher, store, config)
    metrics: dict[str, Any] = {"config": _plain(config), "iterations": []}
    if evals:
        metrics["teacher"] = evaluate_policy(store, make_teacher(config.teacher, store, config, temperature=0.0), evals, "teacher", eval_log, config, progress)
        metrics["no_edits"] = evaluate_policy(store, make_teacher("none", store, config), evals, "none", eval_log, config, progress)

    teacher_records = collect(store, teacher, prompts, config.group_size, "it1", log, config, progress, "it1 teacher rollouts")
    start = Path(config.student)
    if tiny:
        start = out / "tiny-init"
        if not (start / "config.json").is_file():
            build_tiny_student(start, teacher_records, config)
    for iteration in range(1, config.iterations + 1):
        it_started = time.perf_counter()
        records = list(teacher_records)
        if iteration > 1:  # the previous student rolls out, its groups joined by the original teacher's
            student = make_teacher(f"hf:{start}", store, config)
            records += collect(store, student, prompts, config.group_size, f"it{iteration}", log, config, progress, f"it{iteration} student rollouts")
        advantages, stats = assign_advantages(records)
        weights = training_weights(advantages, config.weighting)
        (out / f"iter-{iteration}").mkdir(exist_ok=True)
        (out / f"iter-{iteration}" / "advantages.json").write_text(
            json.dumps({r["key"]: round(a, 6) for r, a in zip(records, advantages, strict=True)}, indent=1)
        )
        if stats["zero_variance_groups"] == stats["groups"]:
            raise MemupdateError(
                f"all {stats['groups']} groups have equal rewards within the group, so no trajectory is better than another; "
                f"raise --explore (heuristic) or --temperature, or --group-size. Trajectories are kept in {log.path}"
            )
        if not any(w > 0 for w in weights):
            raise MemupdateError(f"no trajectory has a positive advantage; nothing to learn from. Trajectories are kept in {log.path}")
        checkpoint = out / f"iter-{iteration}" / "student"
        if (checkpoint / "training.json").is_file():  # resumed: this iteration's student is already trained
            training = json.loads((checkpoint / "training.json").read_text())
        else:
            training = finetune(start, checkpoint, records, weights, config, tiny=tiny, progress=progress)
            (checkpoint / "training.json").write_text(json.dumps(training))
        row = {"iteration": iteration, **stats, "training": training}
        if evals:
            student = make_teacher(f"hf:{checkpoint}", store, config, temperature=0.0)
            row["student"] = evaluate_policy(store, student, evals, f"it{iteration}-student", eval_log, config, progress)
        row["seconds"] = round(time.perf_counter() - it_started, 1)
        metrics["iterations"].append(row)
        start = checkpoint
    metrics["seconds"] = round(time.perf_counter() - started, 1)
    _write_output(start, out, config, metrics)
    return metrics


def _write_output(final: Path, out: Path, config: DistillConfig, metrics: dict[str, Any]) -> None:
    """The last student's checkpoint files into `out`, with memupdate.json, metrics.json and the plot."""
    for item in final.iterdir():
        if item.is_file() and item.name != "training.json":
            shutil.copy2(item, out / item.name)
    last = metrics["iterations"][-1]
    info = {
        "kind": "distill",
        "base_model": config.student,
        "teacher": config.teacher,
        "iterations": config.iterations,
        "config": _plain(config),
        "metrics": {
            "student": last.get("student"),
            "teacher": metrics.get("teacher"),
            "no_edits": metrics.get("no_edits"),
            "zero_variance_groups": last["zero_variance_groups"],
            "groups": last["groups"],
            "loss_last": last["training"]["loss_last"],
        },
    }
    (out / RUN_INFO).write_text(json.dumps(info, indent=2))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_metrics(metrics, out / "distill.png")


def plot_metrics(metrics: dict[str, Any], path: Path) -> None:
    """Reward per iteration (student vs teacher vs no edits), share of valid tool calls, and the loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = metrics["iterations"]
    xs = [r["iteration"] for r in rows]
    fig, (reward_ax, valid_ax, loss_ax) = plt.subplots(1, 3, figsize=(13, 3.8))
    if all("student" in r for r in rows):
        reward_ax.plot(xs, [r["student"]["reward_mean"] for r in rows], "o-", label="student")
        for name, style in (("teacher", "--"), ("no_edits", ":")):
            if name in metrics:
                reward_ax.axhline(metrics[name]["reward_mean"], linestyle=style, color="gray" if name == "no_edits" else "C1", label=name.replace("_", " "))
        valid_ax.plot(xs, [r["student"]["valid_call_share"] or 0.0 for r in rows], "o-", label="well-formed")
        valid_ax.plot(xs, [r["student"]["ok_call_share"] or 0.0 for r in rows], "s-", label="ran without error")
    reward_ax.set(title="mean reward, held-back questions", xlabel="iteration")
    reward_ax.legend()
    valid_ax.set(title="student's tool calls", xlabel="iteration", ylim=(0, 1.05))
    valid_ax.legend()
    offset = 0
    for r in rows:
        losses = r["training"].get("losses", [])
        loss_ax.plot(range(offset, offset + len(losses)), losses, label=f"iteration {r['iteration']}")
        offset += len(losses)
    loss_ax.set(title="training loss (assistant tokens)", xlabel="optimiser step")
    loss_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plain(config: DistillConfig) -> dict[str, Any]:
    # Never write a key to disk.
    plain = asdict(replace(config, api_key=None, reward=replace(config.reward, answerer_api_key=None)))
    return json.loads(json.dumps(plain))


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0
