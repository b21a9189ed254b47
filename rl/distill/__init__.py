"""The one learning pipeline: `learn.learn` runs any task of `learn.TASKS`.

- A chat student's stages, in `learn`: distillation, then RL iterations with dynamic sampling; an
  iteration's recipe is an `IterationRecipe`. Each run lives in a resumable folder (`run_folder`:
  `stages.json`, `metrics.json`, the learning curve).
- Its settings, each default once, `rl learn`'s options generated from them, the relation task's section
  too (`config`); what a run reports (`report`).
- Rollout groups (`rollouts`), advantages (`advantages`), DAgger's labels (`dagger`), rendering (`render`),
  the training loop (`finetune`), the tiny student (`tiny_student`).
- What it learns is a task: a chat task (`task`: the interface, the typed `Rollout`, `RunInputs`;
  compacting a bank in `compaction`, also verl's rows of its units; one question in `targeted`) or one that
  brings its own stages (the relation judge, SFT then GRPO: `relation`). **Add a task here**: its module
  and one entry of `learn.TASKS`.

Offline distillation: docs/distillation.md; the SmolLM2 student: docs/student.md.
"""
