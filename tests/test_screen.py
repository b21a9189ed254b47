"""The screen over stored vectors (`judge.screen`): what it keeps, its file, its judge, and `worth_judging` with it."""

import subprocess
import sys

import numpy as np
import pytest

from memupdate.judge.meeting import worth_judging
from memupdate.judge.screen import FEATURES, WORD_FEATURES, Screen, features, word_features
from memupdate.rl.screen_training import choose_threshold, screen_figures

DIMS = 8


class CardJudge:
    """A judge as the screen sees it: only its card's digest."""

    def __init__(self, digest):
        self.card = {"digest": digest} if digest else {}


def cosine_screen(threshold: float = 0.5, digest: str = "abc") -> Screen:
    """A screen whose score is the pair's cosine (one hidden unit reading the vectors' last feature)."""
    hidden = np.zeros((2 * DIMS + 1 + WORD_FEATURES, 1), dtype=np.float32)
    hidden[2 * DIMS, 0] = 1.0
    return Screen(hidden, np.zeros(1, np.float32), np.ones(1, np.float32), 0.0, threshold,
                  {"digest": digest, "features": FEATURES, "recall": 0.995})


def texts_of(count: int) -> list[tuple[str, str]]:
    return [("Ana lives in Paris", "Ana lives in Lyon")] * count


def unit(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def pairs_at(cosines) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of unit vectors at the given cosines."""
    first = np.zeros((len(cosines), DIMS), np.float32)
    first[:, 0] = 1
    second = np.zeros_like(first)
    second[:, 0] = cosines
    second[:, 1] = np.sqrt(1 - np.asarray(cosines) ** 2)
    return first, second


def test_features_are_symmetric():
    rng = np.random.default_rng(0)
    a, b = unit(rng.normal(size=(5, DIMS))), unit(rng.normal(size=(5, DIMS)))
    texts = [("Ana lives in Paris", "Ana moved to Berlin last month"), ("The CEO of X is A.", "The CEO of X is B."),
             ("I am vegetarian", "I am no longer vegetarian"), ("", "Bo has a cat"), ("Bo has a cat", "Bo has a cat")]
    turned = [(y, x) for x, y in texts]
    assert features(a, b, texts).shape == (5, 2 * DIMS + 1 + WORD_FEATURES)
    assert np.allclose(features(a, b, texts), features(b, a, turned))


def test_word_features_tell_which_words_differ():
    value, subject, change, same = word_features([("The CEO of Acme is Ann Lee.", "The CEO of Acme is Bo Chan."),
                                                  ("The CEO of Acme is Ann Lee.", "The CEO of Initech is Ann Lee."),
                                                  ("Bo is vegetarian", "Bo is no longer vegetarian"),
                                                  ("Bo has a cat", "bo has a cat")])
    assert value[2] == pytest.approx(5 / 7) and value[3] == 0  # the same beginning, another value at the end
    assert subject[2] == subject[3] == pytest.approx(3 / 7)  # another subject in the middle
    assert change[8] == 1 and value[8] == subject[8] == 0  # a word that says a state changed, in one only
    assert same[0] == same[1] == same[2] == same[3] == 1 and same[7] == 0  # one statement twice


def test_keeps_pairs_at_or_above_its_threshold_and_drops_the_rest():
    first, second = pairs_at([0.9, 0.5, 0.3, 0.49])
    assert cosine_screen(0.5).keep(first, second, texts_of(4)).tolist() == [True, True, False, False]
    assert cosine_screen(0.5).keep(np.zeros((0, DIMS)), np.zeros((0, DIMS)), []).tolist() == []


def test_save_and_load_give_the_same_screen(tmp_path):
    screen = cosine_screen(0.4)
    path = screen.save(tmp_path / "relation-screen.npz")
    loaded = Screen.load(path)
    first, second = pairs_at([0.9, 0.45, 0.3])
    assert np.allclose(loaded.scores(first, second, texts_of(3)), screen.scores(first, second, texts_of(3)))
    assert loaded.threshold == pytest.approx(0.4) and loaded.card == screen.card


def test_a_screen_serves_only_the_judge_it_was_trained_on(tmp_path):
    path = cosine_screen(digest="abc").save(tmp_path / "relation-screen.npz")
    assert Screen.for_judge(CardJudge("abc"), path) is not None
    assert Screen.for_judge(CardJudge("other"), path) is None  # a stale screen drops nothing
    assert Screen.for_judge(CardJudge(None), path) is None  # the rule, an endpoint
    assert Screen.for_judge(CardJudge("abc"), tmp_path / "none.npz") is None
    older = cosine_screen(digest="abc")
    older.card.pop("features")  # a screen saved for other features
    assert Screen.for_judge(CardJudge("abc"), older.save(tmp_path / "older.npz")) is None


def test_worth_judging_with_vectors_drops_only_what_the_screen_drops(tmp_path, monkeypatch):
    import memupdate.judge.screen as screen_module

    monkeypatch.setattr(screen_module, "SHIPPED_SCREEN", cosine_screen(0.5, digest="abc").save(tmp_path / "relation-screen.npz"))
    vectors = list(unit([[1, 0, 0, 0, 0, 0, 0, 0], [0.9, 0.44, 0, 0, 0, 0, 0, 0], [0.3, 0.95, 0, 0, 0, 0, 0, 0],
                         [0, 1, 0, 0, 0, 0, 0, 0]]))
    texts = ["Ana lives in Paris", "Ana lives in Lyon", "Ana likes tea", "Ana owns a cat"]
    pairs = [(0, 1), (0, 2), (1, 2), (2, 3)]
    judge = CardJudge("abc")
    expected = cosine_screen(0.5).keep(np.stack([vectors[i] for i, _ in pairs]), np.stack([vectors[j] for _, j in pairs]),
                                       [(texts[i], texts[j]) for i, j in pairs]).tolist()
    assert worth_judging(texts, pairs, vectors, judge) == expected == [True, False, True, True]
    assert worth_judging(texts, pairs) == [True] * 4  # no vectors: as before
    assert worth_judging(texts, pairs, vectors, CardJudge("other")) == [True] * 4  # not its judge: every pair
    vectors[2] = None  # a memory without a vector: its pairs are judged
    assert worth_judging(texts, pairs, vectors, judge) == [True] * 4


def test_the_threshold_keeps_the_recall_in_every_source():
    scores = np.array([0.1, 0.2, 0.3, 0.9] + [0.5] * 300 + [0.05] + [0.0] * 10)
    sources = np.array(["a"] * 4 + ["b"] * 301 + ["b"] * 10)
    worthy = np.array([False, True, True, True] + [True] * 300 + [True] + [False] * 10)
    # a: 3 positives (all kept, lowest 0.2); b: 301 (one may go: the 0.05)
    assert choose_threshold(scores, worthy, sources, 0.995) == pytest.approx(0.2)
    keep = scores >= 0.2
    figures = screen_figures(keep, worthy, sources)
    assert (figures["a"].lost, figures["b"].lost, figures["b"].worthy) == (0, 1, 301)
    assert figures["b"].dropped == 11 and figures["a"].dropped == 1


def test_the_screen_loads_without_torch():
    code = ("import sys; from memupdate.judge.meeting import worth_judging; from memupdate.judge.screen import Screen, judge_digest; "
            "Screen.for_judge(type('Judge', (), {'card': {'digest': judge_digest()}})()); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def readings_of(count: int, part: str, seed: int):
    """`count` pairs the judge reads: changes of a value ("lives in Paris" / "lives in Lyon") it applies or
    asks about, two facts of one person ("likes tea" / "owns a cat") it leaves, over two sources."""
    from memupdate.rl.screen_training import Readings

    rng = np.random.default_rng(seed)
    worthy = rng.random(count) < 0.2
    cities, things = ["Paris", "Lyon", "Oslo", "Rome"], ["likes tea", "owns a cat", "plays chess", "sings"]
    texts = [(f"Ana lives in {rng.choice(cities)}", f"Ana lives in {rng.choice(cities)}") if w else
             (f"Ana {rng.choice(things)}", f"Ana {rng.choice(things)} on Sundays") for w in worthy]
    first, second = unit(rng.normal(size=(count, DIMS))), unit(rng.normal(size=(count, DIMS)))
    source = np.asarray(["letta", "beam"])[rng.integers(0, 2, count)]
    return Readings(first, second, np.asarray(texts), worthy.astype(np.int8), source, np.full(count, part),
                    np.full(count, "given"), np.full(count, "g"))


def test_a_trained_screen_keeps_the_recall_on_the_recipe_part_and_its_card_says_what_it_read(tmp_path):
    from memupdate.rl.screen_training import Readings, ScreenTrainConfig, train_screen

    readings = Readings.joined([readings_of(600, "train", 0), readings_of(400, "recipe", 1)])
    screen, figures = train_screen(readings, "abc", ScreenTrainConfig(epochs=5))
    recipe = readings.where(readings.part == "recipe")
    keep = screen.keep(recipe.first, recipe.second, recipe.texts)
    assert keep[recipe.kept_worthy].all()  # fewer than 200 worthy pairs a source: every one kept
    assert all(f["lost"] == 0 for f in figures["sources"].values())
    assert screen.card["recipe_dropped_share"] == pytest.approx(1 - keep.mean(), abs=1e-4)
    assert screen.card["recipe_dropped_share"] > 0.5  # the words tell the two kinds apart; random vectors do not
    assert (screen.card["digest"], screen.card["features"]) == ("abc", FEATURES)
    assert Screen.for_judge(CardJudge("abc"), screen.save(tmp_path / "relation-screen.npz")) is not None
