"""The fine-tuning loop's pieces alone: the pull-up loss, the clipped push-down, the loss mask, the frozen
bottom's shortcut, the batches and the schedule.

The losses are tested on tiny hand-made tensors; the mask and the frozen bottom on conftest's `tiny_model`,
a tiny Qwen2 built from a config with a tokenizer trained locally (`memupdate.rl.distill.tiny_student`):
nothing is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from test_student import TRANSCRIPT

from memupdate.rl.distill.finetune import (
    TrainConfig,
    bottom_output,
    encode,
    evaluate,
    evaluate_parts,
    freeze_bottom,
    get_batches,
    held_out_loss,
    learning_rate_factor,
    load_student,
    pull_up_loss,
    push_down_loss,
    token_logps,
    train,
)


def test_pull_up_loss_is_the_weighted_cross_entropy():
    logps = torch.log(torch.tensor([0.5, 0.25]))
    assert pull_up_loss(logps, 1.0).item() == pytest.approx(math.log(2) + math.log(4))
    assert pull_up_loss(logps, 0.5).item() == pytest.approx(0.5 * (math.log(2) + math.log(4)))


def test_push_down_lowers_each_token_until_its_probability_fell_by_clip_then_stops():
    start = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    # Token 0 is unchanged, token 1 fell by 10%, token 2 by 30% (past the 20% clip).
    now = torch.log(torch.tensor([0.5, 0.45, 0.35])).requires_grad_(True)
    loss = push_down_loss(now, start, -2.0, clip=0.2)
    assert loss.item() == pytest.approx(2.0 * (1.0 + 0.9 + 0.8))  # the clipped token counts at 1 - clip
    loss.backward()
    assert now.grad[0] > 0 and now.grad[1] > 0  # descending the loss lowers their log-probabilities
    assert now.grad[2] == 0  # pushed far enough: left alone
    assert now.grad[0].item() == pytest.approx(2.0) and now.grad[1].item() == pytest.approx(2.0 * 0.9)


def test_mask_holds_the_assistant_tokens_only_shifted_by_one(tiny_model):
    student = load_student(tiny_model, TrainConfig(top_layers=1))
    example = encode(student, TRANSCRIPT, 1.0, max_length=4096)
    assert example.ids.shape[1] == example.mask.shape[0] + 1  # token t is predicted from those before it
    targets = student.tokenizer.decode(example.ids[0, 1:][example.mask])
    assert "search_memory" in targets and "Done." in targets
    assert "Berlin" not in targets and "When did Ann move" not in targets and "Memory bank" not in targets
    cut = encode(student, TRANSCRIPT, 1.0, max_length=example.ids.shape[1] - 3)
    assert cut.cut and cut.ids.shape[1] == example.ids.shape[1] - 3 and not example.cut


def test_frozen_bottom_gives_the_same_log_probabilities_as_a_full_pass(tiny_model):
    full = load_student(tiny_model, TrainConfig(top_layers=0))
    split = load_student(tiny_model, TrainConfig(top_layers=1))
    trained = freeze_bottom(split)
    assert {id(p) for p in trained} == {id(p) for p in [*split.body.layers[-1].parameters(), *split.body.norm.parameters()]}
    example = encode(full, TRANSCRIPT, 1.0, max_length=4096)
    with torch.no_grad():
        whole = token_logps(full, example)
    example.frozen = bottom_output(split, example.ids)
    with torch.no_grad():
        top_only = token_logps(split, example)
    assert torch.allclose(whole, top_only, atol=1e-4)
    assert evaluate(split, [example]) == pytest.approx(-whole.mean().item(), rel=1e-4)
    assert evaluate(split, []) is None


def test_batches_cover_every_row_each_epoch_reshuffled_and_seeded():
    epochs = list(get_batches(range(7), 3, 2, seed=0))
    assert [len(b) for b in epochs[0]] == [3, 3, 1]
    assert all(sorted(r for b in epoch for r in b) == list(range(7)) for epoch in epochs)
    assert epochs[0] != epochs[1] and epochs == list(get_batches(range(7), 3, 2, seed=0))


@pytest.mark.parametrize("weight", [1.0, -1.0])
def test_keep_best_ends_on_the_epoch_with_the_lowest_held_out_loss(tiny_model, weight):
    """Trained on the held-out trajectory itself: pulled up, its loss falls and the best epoch is a later
    one; pushed down, it rises, and the start's weights are put back (epoch 0). Either way the student ends
    with the lowest loss the loop measured; without `keep_best` it ends on the last epoch."""
    config = TrainConfig(top_layers=1, warmup_steps=0, batch_size=1)
    student = load_student(tiny_model, config)
    trained = freeze_bottom(student)
    example, held = (encode(student, TRANSCRIPT, w, max_length=4096) for w in (weight, 1.0))
    for e in (example, held):
        e.frozen = bottom_output(student, e.ids)
    with torch.no_grad():
        example.start_logps = token_logps(student, example)
    _, parts, kept = train(student, trained, [example], [held], [0], 1e-2, 3, config, "test", keep_best=True)
    held_losses = [held_out_loss(p) for p in parts]
    assert held_losses[kept] == min(held_losses) and evaluate(student, [held]) == pytest.approx(held_losses[kept], rel=1e-5)
    assert (kept > 0) if weight > 0 else (kept == 0 and held_losses[-1] > held_losses[0])
    _, last_parts, last = train(student, trained, [example], [held], [0], 1e-2, 2, config, "test")
    assert last == 2 and evaluate(student, [held]) == pytest.approx(held_out_loss(last_parts[-1]), rel=1e-5)


def test_the_held_out_loss_is_the_mean_of_its_parts_each_weighing_alike(tiny_model):
    """Two kinds of trajectory, one far longer: pooled per token the long one would dominate;
    the held-out loss weighs each part alike, as a run weighs LoCoMo's and FactConsolidation's."""
    student = load_student(tiny_model, TrainConfig(top_layers=0))
    with torch.no_grad():  # sharper logits: random weights read every text at ~ln(vocab), so the parts would tie
        student.model.get_output_embeddings().weight.mul_(20.0)
    short = replace(encode(student, TRANSCRIPT, 1.0, max_length=4096), part="short")
    longer = [*TRANSCRIPT[:-1], {"role": "assistant", "content": "Ann moved to Berlin in early May 2023. " * 8}]
    long = replace(encode(student, longer, 1.0, max_length=4096), part="long")
    parts = evaluate_parts(student, [short, long])
    assert set(parts) == {"short", "long"} and parts["short"] == pytest.approx(evaluate(student, [short]))
    mean = evaluate(student, [short, long])
    pooled = (parts["short"] * short.tokens + parts["long"] * long.tokens) / (short.tokens + long.tokens)
    assert mean == pytest.approx((parts["short"] + parts["long"]) / 2) and abs(mean - pooled) > 1e-3


def test_learning_rate_warms_up_then_decays_to_zero():
    factors = [learning_rate_factor(step, 2, 10) for step in range(10)]
    assert factors[0] == pytest.approx(0.5) and factors[1] == pytest.approx(0.9)
    assert all(a >= b for a, b in zip(factors[1:], factors[2:], strict=False)) and factors[-1] == pytest.approx(0.1)
