"""The learning pipeline: one entry, `learn`, for every task a run can learn (`TASKS`), each in one
resumable run folder (`run_folder.RunFolder`: `stages.json`, then `metrics.json` and `learning_curve.png`).

    from memupdate.rl.distill.learn import LearnConfig, RunInputs, learn
    metrics = learn(store, LearnConfig(student="smollm2"), "runs/smollm2", RunInputs(train_conversations, eval_conversations))
    metrics = learn(store, LearnConfig(task="relation"), "runs/relation", RunInputs(data=Path("../shared/data")))
    # CLI: memupdate rl learn --student smollm2 --locomo FILE --train-conversations a,b,c --eval-conversations d,e \
    #          --out runs/smollm2          (--iterations 0: distillation alone)
    #      memupdate rl learn --task relation --data ../shared/data --out runs/relation   (`memupdate judge learn`)

A task is one entry of `TASKS`. A chat task (`task.Task`) is learnt by a chat student through the stages
below (`StudentStages`): `compaction` (what users run: a unit is one neighbourhood of a bank, edited
blind, scored on every question of the bank; a held-out bank is compacted whole as `memupdate compact`
does) or `targeted` (one visible question per unit, verl's setting). `relation`, the relation judge (a
classifier, no chat student), brings its own stages (`relation.relation_stages`: SFT, the reward table,
GRPO, calibration) to the same kind of run folder.

The student's stages, each recorded in `out/stages.json` when it finishes, so a rerun of the same command
resumes (rollouts inside a stage are logged one by one and not redone either):
1. `teacher-groups`: `group_size` rollouts of the teacher (by default the heuristic in its `stepwise`
   form, whose every handle is in the transcript before it) per training unit; `teacher-labels`: the
   rule's rollout on each of `label_units`, imitated whatever its reward.
2. `eval-teacher`, `eval-heuristic`, `eval-no-edits`, `eval-zero-shot`: one greedy rollout per held-out
   unit (conversations training never touches).
3. `sft`: fine-tune on the best of each teacher group and the label trajectories; `eval-sft`.
4. `rl-K`, K = 1..`iterations`: the student's own groups joined by the teacher's, GRPO advantages, an
   advantage-weighted update (`grpo`), plus DAgger's corrections of the student's own states (`dagger`,
   `dagger_states`, `dagger_replay`); `rl_gate` chooses the rate and whether the iteration is kept, and
   one that keeps its start's weights is the last; `eval-rl-K`.
Every eighth training and label unit is kept out of the updates: its teacher trajectories give the
held-out loss that chooses SFT's rate (`sweep`) and saved epoch (`keep_best`). The run ends with
`metrics.json` and `learning_curve.png` (`report.py`); the final student is the checkpoint the metrics name,
a plain Hugging Face folder that `--policy hf --model DIR` and verl load.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memupdate.errors import MemupdateError
from memupdate.rl.data.factconsolidation import FactBank
from memupdate.rl.data.locomo import Conversation
from memupdate.rl.distill.advantages import (
    advantage_weights,
    assign_advantages,
    imitation_weights,
    zero_variance_groups,
)
from memupdate.rl.distill.compaction import CompactionTask
from memupdate.rl.distill.config import LearnConfig
from memupdate.rl.distill.dagger import labelled, labelled_turns, relabelled, until_first_slip
from memupdate.rl.distill.finetune import finetune
from memupdate.rl.distill.relation import relation_stages
from memupdate.rl.distill.render import as_student_saw
from memupdate.rl.distill.report import collect_metrics, plot_learning_curve
from memupdate.rl.distill.rollouts import (
    PolicyGroup,
    Progress,
    TrajectoryLog,
    collect,
    policy_group,
    summarize,
)
from memupdate.rl.distill.run_folder import RunFolder, release_memory
from memupdate.rl.distill.targeted import TargetedTask
from memupdate.rl.distill.task import Rollout, RunInputs, Task, Unit, spread
from memupdate.scoring.summaries import mean
from memupdate.store import MemoryStore

__all__ = ["LearnConfig", "RunInputs", "learn", "spread"]
TRAJECTORIES = "trajectories.jsonl"
EVALUATIONS = "eval.jsonl"


@dataclass
class Run(RunFolder):
    """What every student stage reads: the run folder (its finished stages), the store, the task, the logs."""

    store: MemoryStore
    config: LearnConfig
    task: Task
    progress: Progress | None
    log: TrajectoryLog
    eval_log: TrajectoryLog
    units: list[Unit]
    evals: list[Unit]
    label_units: list[Unit]  # imitated whatever their reward (`Task.label_units`)
    kept_out: set[str]  # the held-out loss's units
    recipe: IterationRecipe  # what an RL iteration trains on and what keeps it
    teacher_records: list[Rollout] = field(default_factory=list)
    label_records: list[Rollout] = field(default_factory=list)  # the rule's trajectory on each label unit
    settings: dict[str, Any] = field(default_factory=dict)  # how the student sees its prompts (`prompt_settings`)

    def trains_on(self, group: str) -> bool:
        """Whether training reads the unit `group` (it is not kept out for the held-out loss and the gate)."""
        return group not in self.kept_out

    def collect(self, group: PolicyGroup, units: Sequence[Unit], members: int, prefix: str, label: str) -> list[Rollout]:
        return collect(self.store, self.task, group, units, members, prefix, self.log, self.config.seed, self.progress, label)


# The stages that learn a task: run (or resumed) in the run folder, they return the metrics they report.
Stages = Callable[[MemoryStore, LearnConfig, RunFolder, RunInputs, Progress | None], dict[str, Any]]


def learn(store: MemoryStore, config: LearnConfig, out: str | Path, inputs: RunInputs, progress: Progress | None = None) -> dict[str, Any]:
    """Run (or resume) the config's task into `out` (`TASKS`); returns the metrics also written to
    `out/metrics.json`."""
    if config.task not in TASKS:
        raise MemupdateError(f"--task {config.task!r}: choose {', '.join(TASKS)}")
    return TASKS[config.task](store, config, RunFolder.open(out), inputs, progress)


@dataclass(frozen=True)
class StudentStages:
    """The stages a chat student learns a chat task by (`task`: the task's class, made from the config):
    see the module docstring."""

    task: type[Task]

    def __call__(self, store: MemoryStore, config: LearnConfig, folder: RunFolder, inputs: RunInputs, progress: Progress | None = None) -> dict[str, Any]:
        from memupdate.llm.chat import prompt_settings

        task = self.task.from_config(config, store)
        train, held_out = inputs.train, inputs.held_out
        run = open_run(store, check_config(config, train, held_out), task, folder, train, held_out, progress)

        # 1-2. The teacher's groups; the student's start; the reference points on the held-out units.
        keys = run.stage("teacher-groups", lambda: teacher_groups(run))
        run.teacher_records = teacher_records = [run.log.records[k] for k in keys]
        check_teacher_signal(run, teacher_records)
        if run.label_units:
            run.label_records = [run.log.records[k] for k in run.stage("teacher-labels", lambda: teacher_labels(run))]
        start = student_start(run, teacher_records)
        run.settings = prompt_settings(start)
        run.stage("eval-teacher", lambda: evaluate(run, "teacher", teacher(run, 0.0, 0.0)))
        as_users_run = task.as_users_run()  # the reference users have (compaction: `memupdate compact --policy heuristic`)
        if as_users_run is not None:
            run.stage("eval-heuristic", lambda: evaluate(run, "heuristic", policy_group("heuristic", store), as_users_run))
        run.stage("eval-no-edits", lambda: evaluate(run, "no-edits", policy_group("none", store)))
        run.stage("eval-zero-shot", lambda: evaluate(run, "zero-shot", student(run, start, 0.0)))

        # 3. Distillation: imitate the teacher's better trajectories.
        run.stage("sft", lambda: sft(run, start, teacher_records))
        run.stage("eval-sft", lambda: evaluate(run, "sft", student(run, run.out / "sft", 0.0)))

        # 4. RL iterations: the student's own groups, joined by the teacher's, advantage-weighted. At most
        # `iterations`: one that does not beat its start (`improves`) keeps its start's weights and ends them.
        current = run.out / "sft"
        for k in range(1, config.iterations + 1):
            target = run.out / f"rl-{k}"
            result = run.stage(f"rl-{k}", lambda k=k, current=current, target=target: rl_iteration(run, k, current, target, teacher_records))
            if result["training"].get("kept_epoch") == 0:  # its start's weights saved: the evaluation is its start's
                run.stage(f"eval-rl-{k}", lambda current=current: run.done[f"eval-{current.name}"]["result"] | {"same_weights_as": current.name})
            else:
                run.stage(f"eval-rl-{k}", lambda k=k, target=target: evaluate(run, f"rl-{k}", student(run, target, 0.0)))
            if not improves(result):
                break
            current = target

        metrics = collect_metrics(run.done, config, task, train, held_out, current) | {"held_out_skipped": task.held_out_skipped()}
        return run.report(metrics, plot_learning_curve)


# What a run can learn: a task's name (`--task`) -> the stages that learn it. Add a task here: a chat task
# (`task.Task`) with the student's stages, or a task that brings its own (`Stages`).
TASKS: dict[str, Stages] = {
    "compaction": StudentStages(CompactionTask),
    "targeted": StudentStages(TargetedTask),
    "relation": relation_stages,
}


# -- set-up ---------------------------------------------------------------------------------------------


def check_config(config: LearnConfig, train: Sequence[Conversation], held_out: Sequence[Conversation]) -> LearnConfig:
    """Clear errors before any rollout; the config with the student resolved to a folder (or `tiny`)."""
    from memupdate.agent.policies import policy_kind
    from memupdate.agent.prompts import STUDENT_PROMPT
    from memupdate.llm.checkpoints import checkpoint_tokenizer
    from memupdate.llm.models import resolve_model

    overlap = {c.sample_id for c in train} & {c.sample_id for c in held_out}
    if overlap:
        raise MemupdateError(f"conversations {sorted(overlap)} are both trained on and held out: give disjoint lists")
    if not held_out:
        raise MemupdateError("no held-out conversation: pass --eval-conversations (at least one training never touches)")
    if config.group_size < 2:
        raise MemupdateError(f"--group-size {config.group_size}: GRPO compares rollouts of one unit, so it needs at least 2")
    policy_kind(config.teacher, "--teacher")
    if config.rl_gate not in ("agreement", "loss"):
        raise MemupdateError(f"--rl-gate {config.rl_gate!r}: give agreement or loss")
    if config.dagger_states not in ("every", "first"):
        raise MemupdateError(f"--dagger-states {config.dagger_states!r}: give every or first")
    if config.eval_budgets not in ("training", "users"):
        raise MemupdateError(f"--eval-budgets {config.eval_budgets!r}: give training or users")
    if config.student == "tiny":
        if config.top_layers > config.tiny_layers:
            raise MemupdateError(f"--top-layers {config.top_layers}: the tiny student has {config.tiny_layers} layers (--tiny-layers); give at most that (0: all)")
        return config
    student = resolve_model(config.student, STUDENT_PROMPT)
    try:
        checkpoint_tokenizer(student)
    except ValueError as exc:
        raise MemupdateError(f"--student {config.student!r} (give tiny, smollm2 or a checkpoint folder): {exc}") from None
    return replace(config, student=student)


def open_run(
    store: MemoryStore, config: LearnConfig, task: Task, folder: RunFolder, train: Sequence[Conversation], held_out: Sequence[Conversation],
    progress: Progress | None,
) -> Run:
    """The run on `folder`: its logs; the training and evaluation units."""
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    units = task.training_units(train, config.train_questions)
    if not units:
        raise MemupdateError("no training questions: check --train-conversations and --train-questions")
    labels = task.label_units(train, config.label_units, units) if config.label_units else []
    kept = kept_out(units) | kept_out(labels, at_least=0)
    return Run(
        folder.out, folder.done, store, config, task, progress, TrajectoryLog(folder.out / TRAJECTORIES),
        TrajectoryLog(folder.out / EVALUATIONS), units, task.evaluation_units(held_out, config.eval_questions), labels, kept,
        IterationRecipe.from_config(config, kept),
    )


def kept_out(units: Sequence[Unit], at_least: int = 1) -> set[str]:
    """The units whose teacher trajectories give the held-out loss: every eighth (the last where that
    leaves fewer than `at_least`)."""
    groups = {u.group for i, u in enumerate(units) if i % 8 == 7}
    return groups or ({units[-1].group} if at_least and len(units) > 1 else set())


def teacher(run: Run, explore: float, temperature: float) -> PolicyGroup:
    """The teacher's group: the heuristic in its stepwise form (seeded `explore`), or any other policy."""
    config = run.config
    if config.teacher == "heuristic":  # what its first look shows and how it edits: the task's (`teacher_options`)
        options = run.task.teacher_options(config.stepwise)
        return policy_group(
            "heuristic", run.store, label=f"heuristic(stepwise={options['stepwise']}, explore={explore})",
            max_operations=config.teacher_operations, explore=explore, look_first=True, **options,
        )
    return policy_group(
        config.teacher, run.store, label=f"{config.teacher}:{config.teacher_model}" if config.teacher_model else config.teacher,
        model=config.teacher_model, base_url=config.base_url, api_key=config.api_key, temperature=temperature,
        max_operations=config.max_operations, max_new_tokens=config.max_new_tokens, option="--teacher",
    )


def student(run: Run, path: str | Path, temperature: float) -> PolicyGroup:
    """The checkpoint at `path` as the `hf` policy; each member its own sampling seed, the weights shared."""
    config = run.config
    return policy_group(
        "hf", run.store, label=f"student:{path}", model=str(path), temperature=temperature, max_new_tokens=config.max_new_tokens,
        max_prose_tokens=config.max_prose_tokens, dtype="float32",
    )


def rule_labelled(run: Run, group: PolicyGroup) -> PolicyGroup:
    """`group` whose rollouts record the rule's label of each state they visit (`dagger.labelled`)."""
    return labelled(group, teacher(run, 0.0, 0.0).member(run.config.seed))


def check_teacher_signal(run: Run, teacher_records: list[Rollout]) -> None:
    """Before any evaluation: the teacher's groups hold something to imitate, else one clear error."""
    _, stats = assign_advantages(teacher_records)
    if not any(r.reward > 0 for r in teacher_records):
        raise MemupdateError(
            f"no teacher trajectory earned a reward above 0 ({stats['zero_variance_groups']} of "
            f"{stats['groups']} groups have equal rewards within the group): nothing to imitate; raise --explore "
            f"(heuristic) or --temperature, or --group-size. Trajectories are kept in {run.log.path}"
        )


def student_start(run: Run, teacher_records: Sequence[Rollout]) -> Path:
    """The checkpoint SFT starts from: the configured one, or for `tiny` one built once from the teacher's
    trajectories (a tiny Qwen2 whose tokenizer is trained on them; nothing downloaded)."""
    config = run.config
    if config.student != "tiny":
        return Path(config.student)
    path = run.out / "tiny-init"
    if not (path / "config.json").is_file():
        from memupdate.rl.distill.render import render_transcript
        from memupdate.rl.distill.tiny_student import build_tiny_checkpoint, train_tokenizer

        renderer = train_tokenizer()  # only its chat template is used, to render the texts the real one learns from
        texts = [render_transcript(renderer, r.messages) for r in teacher_records if r.messages]
        build_tiny_checkpoint(
            path, config.tiny_vocab_size, texts=texts, hidden_size=config.tiny_hidden_size, layers=config.tiny_layers,
            max_positions=max(config.max_length, 4096),
        )
    return path


# -- the stages -----------------------------------------------------------------------------------------


def teacher_groups(run: Run) -> list[str]:
    """`group_size` seeded rollouts of the teacher per training unit; their keys in the trajectory log."""
    config = run.config
    records = run.collect(teacher(run, config.explore, config.temperature), run.units, config.group_size, "teacher", "teacher groups")
    return [r.key for r in records]


def teacher_labels(run: Run) -> list[str]:
    """The rule's greedy rollout on each label unit; their keys in the trajectory log."""
    records = run.collect(teacher(run, 0.0, 0.0), run.label_units, 1, "labels", "teacher labels")
    return [r.key for r in records]


def evaluate(run: Run, label: str, group: PolicyGroup, task: Task | None = None) -> dict[str, Any]:
    """One greedy rollout of `group` per held-out unit (of the run's task with its held-out budgets, or
    `task`), logged under `eval/{label}`; the summary and rewards."""
    task = task or held_out_task(run)
    records = collect(run.store, task, group, run.evals, 1, f"eval/{label}", run.eval_log, run.config.seed, run.progress, f"eval {label}")
    return {**summarize(records), "rewards": [r.reward for r in records], "groups": [r.group for r in records],
            "tokens_per_rollout": mean([_tokens(r) for r in records])} | task.evaluation(records)


def held_out_task(run: Run) -> Task:
    """The run's task with the budgets of `--eval-budgets`: the training ones, or none of its own (users':
    `memupdate compact` runs each episode with `settings.max_turns` and `max_operations`)."""
    return run.task if run.config.eval_budgets == "training" else replace(run.task, max_turns=None, max_operations=None)


def sft(run: Run, start: Path, teacher_records: list[Rollout]) -> dict[str, Any]:
    """Fine-tune `start` into `out/sft` on the best of each teacher group (`imitation_weights`) and the
    rule's trajectories on the label units."""
    _, stats = assign_advantages(teacher_records)
    weights = imitation_weights(teacher_records)
    config = run.config
    imitations = label_trajectories(run)
    training = train_stage(
        run, start, run.out / "sft", teacher_records, weights, config.sft_epochs, config.learning_rate, config.sweep, imitations,
    )
    return {**stats, "label_trajectories": len(imitations), "training": training}


# Batches of units an RL iteration rolls out at most, looking for groups whose rewards differ.
DYNAMIC_SAMPLING_ROUNDS = 3


@dataclass(frozen=True)
class IterationRecipe:
    """What an RL iteration trains on and what keeps it, chosen once from the config (`from_config`), so the
    iteration reads one choice instead of testing flags where it uses them.

    `grpo`: the student's groups, joined by the teacher's, advantage-weighted. `dagger`: the rule labels every
    state the student visits, and `corrections` makes imitation examples of the turns where it did otherwise
    (`relabelled`, or `until_first_slip`). `gate`: "agreement" (`train_by_agreement`) or "loss" (the held-out
    loss chooses the rate and the epoch, `train_stage`)."""

    grpo: bool
    dagger: bool
    corrections: Callable[[Sequence[Rollout]], list[list[dict[str, Any]]]]
    gate: str

    @classmethod
    def from_config(cls, config: LearnConfig, kept_out: set[str]) -> IterationRecipe:
        """The recipe `config` asks for; `kept_out`: the units the agreement gate is measured on (none: "loss")."""
        rule = config.teacher == "heuristic"  # only the rule labels any state a student reaches
        if not config.grpo and not (config.dagger and rule):
            raise MemupdateError("--no-grpo trains RL iterations on DAgger's corrections alone: keep --dagger and the heuristic teacher")
        return cls(
            grpo=config.grpo,
            dagger=config.dagger and rule,
            corrections=until_first_slip if config.dagger_states == "first" else relabelled,
            gate="agreement" if config.rl_gate == "agreement" and rule and kept_out else "loss",
        )


def rl_iteration(run: Run, k: int, start: Path, target: Path, teacher_records: list[Rollout]) -> dict[str, Any]:
    """The student at `start` rolls out its own groups, joined by the teacher's; advantage-weighted into `target`."""
    config, recipe = run.config, run.recipe
    policy = student(run, start, config.temperature)
    if recipe.dagger:  # the rule labels each state the student visits
        policy = rule_labelled(run, policy)
    rolled, groups, dropped = informative_groups(run, policy, k, teacher_records)
    minutes = sum(r.seconds for r in rolled) / 60  # each rollout's own time: right on a resumed stage too
    labelling = []  # DAgger alone: one student rollout on each of `rl_label_units` label units, labelled
    if recipe.dagger and run.label_units and config.rl_label_units:
        pool = [u for u in run.label_units if run.trains_on(u.group)]
        labelling = run.collect(policy, spread(pool, config.rl_label_units), 1, f"rl-{k}/labels", f"rl-{k} label units")
    own = [r for r in rolled if r.group in groups]
    records = own + [r for r in teacher_records if r.group in groups]
    advantages, stats = assign_advantages(records)
    stats["groups_dropped_equal_rewards"] = dropped
    weights = advantage_weights(advantages)
    if not recipe.grpo:  # the rollouts only visit states for the rule to label
        records, weights = [], []
    students = [w for w, r in zip(weights, records, strict=True) if r.policy.startswith("student")]
    # DAgger: each turn where the student did otherwise than the rule would on the state it was in (or only
    # each rollout's first, `dagger_states`), with the rule's action as the turn (equal-reward groups too: a
    # label needs no reward to compare).
    corrections = recipe.corrections(rolled + labelling)
    replayed = replay(run, len(corrections))
    if recipe.gate == "agreement":
        gate = {"agreement": train_by_agreement(run, k, start, target, records, weights, corrections + replayed)}
        training = gate["agreement"].pop("training")
    else:
        gate, training = {}, train_stage(
            run, start, target, records, weights, config.rl_epochs, rl_learning_rate(run), () if config.rl_learning_rate else config.rl_sweep,
            corrections + replayed,
        )
    return {
        **stats,
        "dagger_labels": sum(len(r.facts.get("teacher_labels", [])) for r in rolled + labelling),
        "dagger_corrections": len(corrections),
        "dagger_label_unit_rollouts": len(labelling),
        "dagger_replayed": len(replayed),
        "student": summarize(own),
        "student_reward_mean": mean([r.reward for r in own]),
        "rollouts_per_minute": round(len(own) / minutes, 2) if minutes > 0 else None,
        "tokens_per_rollout": mean([_tokens(r) for r in own]),
        "student_trajectories_trained": sum(w > 0 for w in students),
        "student_trajectories_pushed_down": sum(w < 0 for w in students),
        "training": training,
        **gate,
    }


def label_trajectories(run: Run) -> list[list[dict[str, Any]]]:
    """The rule's trajectories on the label units training reads (SFT imitates them all)."""
    return [r.messages for r in run.label_records if r.messages and run.trains_on(r.group)]


def replay(run: Run, corrections: int) -> list[list[dict[str, Any]]]:
    """DAgger's aggregated data set: `dagger_replay` per correction of the rule's label-unit trajectories
    that SFT trained on, spread over them (the corrections alone are mostly one kind of slip)."""
    return spread(label_trajectories(run), round(run.config.dagger_replay * corrections))


def informative_groups(run: Run, policy: PolicyGroup, k: int, teacher_records: list[Rollout]) -> tuple[list[Rollout], set[str], int]:
    """DAPO's dynamic sampling: the student rolls out `rl_questions` units at a time, spread over the
    training units, and a group whose rewards (the student's and the teacher's) are all equal is dropped,
    since it carries no signal; more units are rolled out until `rl_questions` groups are kept or
    `DYNAMIC_SAMPLING_ROUNDS` batches are spent (a resumed stage reads the same batches back from the log).
    Returns every rollout, the groups kept and how many were dropped."""
    config = run.config
    pool = [u for u in run.units if run.trains_on(u.group)]
    first = spread(pool, config.rl_questions)
    order = first + [u for u in pool if u not in first]
    own: list[Rollout] = []
    kept: set[str] = set()
    dropped, cursor = 0, 0
    for _ in range(DYNAMIC_SAMPLING_ROUNDS):
        batch = order[cursor : cursor + config.rl_questions - len(kept)]
        cursor += len(batch)
        if not batch:
            break
        rolled = run.collect(policy, batch, config.student_group_size, f"rl-{k}", f"rl-{k} student groups")
        own += rolled
        groups = {u.group for u in batch}
        records = rolled + [r for r in teacher_records if r.group in groups]
        flat = groups & set(zero_variance_groups([r.reward for r in records], [r.group for r in records]))
        kept |= groups - flat
        dropped += len(flat)
        if len(kept) >= config.rl_questions:
            break
    return own, kept, dropped


def train_stage(
    run: Run, start: Path, target: Path, records: list[Rollout], weights: list[float], epochs: int,
    learning_rate: float, sweep: tuple = (), imitations: Sequence[list[dict[str, Any]]] = (), keep_best: bool | None = None,
) -> dict[str, Any]:
    """Fine-tune `start` into `target` on the weighted records and the teacher's `imitations` (weight 1:
    its trajectories on label units, DAgger's corrections), as the student saw them; the kept-out units'
    teacher trajectories give the held-out loss."""
    config = run.config
    examples = [(_seen(r, run.settings), w) for r, w in zip(records, weights, strict=True) if run.trains_on(r.group) and r.messages]
    examples += [(as_student_saw(messages, run.settings), 1.0) for messages in imitations]
    train_config = config.training(learning_rate=learning_rate, epochs=epochs, sweep=sweep)
    if keep_best is not None:
        train_config = replace(train_config, keep_best=keep_best)
    return finetune(start, target, examples, held_out_trajectories(run), train_config, progress=run.progress)


def train_by_agreement(
    run: Run, k: int, start: Path, target: Path, records: list[Rollout], weights: list[float], imitations: Sequence[list[dict[str, Any]]],
) -> dict[str, Any]:
    """Each rate (`rl_learning_rate`, else `rl_sweep`'s, else SFT's) trains `rl_epochs` from `start`; the
    start and each candidate are measured by `held_out_agreement`, and the candidate that agrees with the
    rule most often is moved to `target` if it agrees more often than its start (else nothing is saved:
    `training["kept_epoch"]` 0, the start's weights). Returns the measures, the rate chosen (None: the start
    kept) and the chosen candidate's `training` report."""
    config = run.config
    rates = (config.rl_learning_rate,) if config.rl_learning_rate else config.rl_sweep or (rl_learning_rate(run),)
    before = run.done.get(f"rl-{k - 1}", {}).get("result", {}).get("agreement", {})
    if before.get("chosen") is not None:  # the start is the last iteration's choice, measured there
        at_start = before["candidates"][str(before["chosen"])]
    else:
        at_start = held_out_agreement(run, f"rl-{k}/held-out/start", start)
    paths = {rate: target.with_name(f"{target.name}-lr{rate:g}") for rate in rates}
    candidates, reports = {}, {}
    for rate, path in paths.items():
        reports[rate] = train_stage(run, start, path, records, weights, config.rl_epochs, rate, imitations=imitations, keep_best=False)
        candidates[rate] = held_out_agreement(run, f"rl-{k}/held-out/lr{rate:g}", path)
        release_memory()
    best = max(rates, key=lambda rate: (candidates[rate]["agreement"], -rate))  # a tie: the smaller step
    chosen = best if candidates[best]["agreement"] > at_start["agreement"] else None
    for rate, path in paths.items():
        if rate == chosen:
            shutil.rmtree(target, ignore_errors=True)
            path.rename(target)
        else:
            shutil.rmtree(path, ignore_errors=True)
    training = reports[best] | ({} if chosen is not None else {"kept_epoch": 0})
    return {"start": at_start, "candidates": {str(r): m for r, m in candidates.items()}, "chosen": chosen, "training": training}


def held_out_agreement(run: Run, prefix: str, path: Path) -> dict[str, Any]:
    """The checkpoint at `path` rolled out greedily once on each kept-out unit (training and label units),
    the rule labelling every state it visits (`dagger.labelled`): the share of its turns that do one of the
    rule's actions, per bank kind and as the mean of the kinds' (as the held-out loss weighs them), the
    turns measured and the rollouts' mean reward. Unlike the held-out loss, it reads the states the
    student itself reaches (a supersession that repeats its last reason, an early stop)."""
    units = [u for u in [*run.units, *run.label_units] if u.group in run.kept_out]
    records = run.collect(rule_labelled(run, student(run, path, 0.0)), units, 1, prefix, prefix)
    kinds = {u.group: bank_kind(u) for u in units}
    by_kind: dict[str, list[bool]] = {}
    for record in records:
        by_kind.setdefault(kinds[record.group], []).extend(agreed for _, _, agreed in labelled_turns(record))
    shares = {kind: round(mean(turns), 4) for kind, turns in by_kind.items() if turns}
    return {
        "agreement": round(mean(list(shares.values())), 4) if shares else 0.0,
        "by_kind": shares,
        "turns": {kind: len(turns) for kind, turns in by_kind.items()},
        "reward_mean": mean([r.reward for r in records]),
    }


def improves(result: dict[str, Any]) -> bool:
    """Whether an RL iteration kept weights better than its start's (`rl_gate`): the next one starts there."""
    if "agreement" in result:
        return result["agreement"]["chosen"] is not None
    return lowers_held_out_loss(result["training"])


def lowers_held_out_loss(training: dict[str, Any]) -> bool:
    """Whether the weights a stage saved (its `kept_epoch`, else its last) have the kept-out units' loss
    below where it started (true where it measured none): the test that stops the RL iterations, so their
    count is chosen on the training banks."""
    losses = training.get("held_out_loss", [])
    if len(losses) < 2 or None in losses:
        return True
    return losses[training.get("kept_epoch", len(losses) - 1)] < losses[0]


def rl_learning_rate(run: Run) -> float:
    """`rl_learning_rate`, else the rate the SFT sweep chose (else `learning_rate`): an RL iteration's rate
    where it sweeps none (`rl_sweep` empty)."""
    chosen = run.done.get("sft", {}).get("result", {}).get("training", {}).get("learning_rate")
    return run.config.rl_learning_rate or chosen or run.config.learning_rate


def held_out_trajectories(run: Run) -> dict[str, list[list[dict[str, str]]]]:
    """The kept-out units' teacher trajectories that earned a reward (all of them if none did: a loss is
    still measured, and the learning-rate sweep still has something to choose by) and the rule's on the
    kept-out label units, by bank kind (`bank_kind`): the held-out loss is the mean of the kinds', so the
    decision of each kind of bank weighs alike however many units it has."""
    kept = [r for r in run.teacher_records if r.group in run.kept_out and r.messages]
    labels = [r for r in run.label_records if r.group in run.kept_out and r.messages]
    kinds = {u.group: bank_kind(u) for u in [*run.units, *run.label_units]}
    parts: dict[str, list[list[dict[str, str]]]] = {}
    for r in [*([r for r in kept if r.reward > 0] or kept), *labels]:
        parts.setdefault(kinds[r.group], []).append(_seen(r, run.settings))
    return parts


def bank_kind(unit: Unit) -> str:
    """`factconsolidation` for a unit of a FactConsolidation bank, else `locomo`."""
    return "factconsolidation" if isinstance(getattr(unit, "conversation", None), FactBank) else "locomo"


def _seen(record: Rollout, settings: dict[str, Any]) -> list[dict[str, str]]:
    return as_student_saw(record.messages, settings)


def _tokens(record: Rollout) -> float:
    """Characters / 4 of what the policy wrote (a token estimate that needs no tokenizer)."""
    return sum(len(m["content"]) for m in record.messages if m["role"] == "assistant") / 4
