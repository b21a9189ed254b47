"""The learning run's settings, each default defined once: `TrainConfig` (one fine-tune) and `LearnConfig`
(a whole run: a `TrainConfig` plus the run's own settings, as TRL's `GRPOConfig` extends `TrainingArguments`).

    from memupdate.rl.distill.config import LearnConfig
    config = LearnConfig(student="tiny", iterations=0)
    config.training(learning_rate=1e-4, epochs=2)     # the TrainConfig of one stage

`memupdate rl learn` reads its options' defaults from `LearnConfig`. This module imports nothing heavy
(no torch, no store), so the command line can read it when it starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memupdate.scoring.reward import RewardConfig

# Memories per neighbourhood: ten of LoCoMo's (~110 characters as a tool shows them) fit in the
# 1,200 characters of a tool result a small student reads, so one look shows it all it may edit.
STUDENT_NEIGHBOURHOOD = 10


@dataclass(frozen=True)
class TrainConfig:
    learning_rate: float = 3e-4  # used when `sweep` is empty
    epochs: int = 3
    batch_size: int = 8  # trajectories per optimiser step (accumulated one at a time)
    top_layers: int = 4  # 0: all weights
    max_length: int = 2048  # tokens per trajectory; the start is kept
    warmup_steps: int = 2
    seed: int = 0
    # Candidates tried first, one short pass each from the same start on up to `sweep_examples` examples;
    # the one with the lowest held-out loss trains (empty: `learning_rate` as given).
    sweep: tuple[float, ...] = ()
    sweep_examples: int = 32
    keep_best: bool = False  # save the epoch with the lowest held-out loss (the start's if none lowers it), not the last
    lora_rank: int = 0  # > 0: LoRA adapters on every linear layer (peft, with the `rl` extra), merged on save
    clip: float = 0.2  # a negative-weight token stops being pushed down once its probability fell by this share
    gradient_checkpointing: bool = False


def _reward_config() -> RewardConfig:
    from memupdate.scoring.reward import RewardConfig  # the scoring layer is slow to import; needed only here

    return RewardConfig()


@dataclass(frozen=True)
class LearnConfig(TrainConfig):
    """A learning run (`rl/distill/learn.py`). The fine-tuning settings are `TrainConfig`'s; `epochs` and
    `learning_rate` are set per stage (`sft_epochs`, `rl_epochs`, the sweep's choice, `rl_learning_rate`)."""

    top_layers: int = 6  # a learning run trains the last 6 layers of the student (0: all)
    sweep: tuple[float, ...] = (1e-5, 1e-4, 3e-4, 1e-3)  # SFT tries each for one pass; the best held-out loss wins
    # Each RL iteration tries these the same way from its own start, unless `rl_learning_rate` is given
    # (empty: the rate SFT chose). A fitted student's rate is lower than a fresh one's.
    rl_sweep: tuple[float, ...] = (3e-5, 1e-4, 3e-4, 1e-3)
    keep_best: bool = True  # every stage saves its epoch with the lowest held-out loss
    task: str = "compaction"  # compaction | targeted (see learn.py's docstring)
    student: str = "smollm2"  # a model name (llm/models.py), a checkpoint folder, or `tiny` (built here)
    teacher: str = "heuristic"  # a policy name (agent.policies.POLICIES)
    teacher_model: str | None = None  # what the teacher's --model names (openai: the served model; hf: a folder)
    base_url: str | None = None  # an openai teacher's endpoint
    api_key: str | None = None
    train_questions: int = 10  # units per training conversation (questions, or neighbourhoods), spread over it
    eval_questions: int = 10  # targeted: questions per held-out conversation (compaction evaluates whole banks)
    neighbourhood: int = STUDENT_NEIGHBOURHOOD  # compaction: memories per neighbourhood
    group_size: int = 4  # teacher rollouts per training unit
    student_group_size: int = 3  # student rollouts per unit in an RL iteration
    rl_questions: int = 16  # training units (questions, or neighbourhoods) an RL iteration rolls out on (spread over all of them)
    # Compaction: up to this many more neighbourhoods per training conversation where the rule edits (then
    # where it stops at once), for imitation alone (no reward needed): the rule's trajectory on each trains
    # SFT, and each RL iteration the student rolls out on `rl_label_units` of them for DAgger's labels (0: none).
    label_units: int = 0
    label_cuts: int = 1  # cuts of each training bank label units come from (CompactionTask.label_units)
    rl_label_units: int = 32
    iterations: int = 2  # RL iterations after distillation, at most: the held-out loss stops them (0: distillation alone)
    explore: float = 0.5  # the heuristic teacher's share of edits dropped or shuffled per rollout
    stepwise: int = 8  # the heuristic teacher's first search shows this many memories; it edits only those
    teacher_operations: int = 4  # the heuristic teacher's plan: the search and up to three edits
    temperature: float = 0.8  # the student's RL rollouts (and an LLM teacher's groups)
    max_new_tokens: int = 192
    max_prose_tokens: int = 48  # a student turn with this many tokens and no <tool_call> is cut (a loop)
    threads: int = 0  # torch threads (0: torch's default); 1 is ~4x faster when other jobs share the cores
    max_turns: int = 4
    max_operations: int = 6
    # The budgets a held-out evaluation gives each episode: "training" (max_turns, max_operations above), or
    # "users": those `memupdate compact` runs with (settings.max_turns / max_operations, 15 and 30 by default).
    eval_budgets: str = "training"
    sft_epochs: int = 4
    rl_epochs: int = 2
    rl_learning_rate: float | None = None  # RL iterations' rate (None: `rl_sweep`'s choice, else the rate SFT chose)
    # What chooses an RL iteration's rate and whether it is kept. "agreement" (with the heuristic teacher, whose
    # rule labels any state): each rate trains `rl_epochs`, and the student at its start and each candidate roll
    # out greedily on the kept-out units, the rule labelling every state they visit; the candidate whose turns
    # do the rule's action most often is kept if it beats its start. "loss": the held-out loss of the rule's
    # own trajectories (one pass per rate, then the epoch with the lowest loss), which never sees the states
    # only the student reaches.
    rl_gate: str = "agreement"
    dagger: bool = True  # RL iterations also imitate the rule's action on the student's own states (dagger.py)
    # DAgger's examples: "every" turn where the student did otherwise (`relabelled`), or "first": each rollout up
    # to its first slip, the student's own right turns and the rule's action at the slip (`until_first_slip`).
    dagger_states: str = "every"
    # DAgger aggregates its data set: each RL iteration also replays this many of the rule's label-unit
    # trajectories SFT trained on per correction, spread over them (0: the corrections alone, which are
    # mostly one kind of slip and pull the student off what SFT taught).
    dagger_replay: float = 0.0
    grpo: bool = True  # RL iterations train on the groups, advantage-weighted (off: DAgger's corrections alone)
    tiny_vocab_size: int = 4000  # student "tiny": its tokenizer's vocabulary, width and depth
    tiny_hidden_size: int = 128
    tiny_layers: int = 4
    reward: RewardConfig = field(default_factory=_reward_config)

    def training(self, *, learning_rate: float, epochs: int, sweep: tuple[float, ...] = ()) -> TrainConfig:
        """The `TrainConfig` of one stage: this run's fine-tuning settings with the stage's rate, epochs and sweep."""
        settings = {f.name: getattr(self, f.name) for f in fields(TrainConfig)}
        return TrainConfig(**settings | {"learning_rate": learning_rate, "epochs": epochs, "sweep": sweep})


def default(name: str):
    """`LearnConfig`'s default of field `name`, without building one (the command line's options read it)."""
    found = next(f for f in fields(LearnConfig) if f.name == name)
    return found.default
