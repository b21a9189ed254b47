"""MemoryAgentBench FactConsolidation: the loader, the benchmark's exact-match rule, the command.

The development file is never part of the project: it lives at
``../shared/data/memoryagentbench/factconsolidation-dev.jsonl`` next to the repository, or wherever
``MEMUPDATE_FACTCONSOLIDATION_FILE`` points; tests needing it skip, saying where they looked. A small
synthetic file written here covers the parsing without it.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memupdate.cli import app
from memupdate.errors import MemupdateError
from memupdate.rl.data.factconsolidation import (
    fact_memories,
    fact_time,
    load_context,
    load_factconsolidation,
    parse_facts,
    select_sources,
)
from memupdate.scoring.categories import MULTI_HOP, SINGLE_HOP
from memupdate.scoring.metrics import normalize_exact, substring_exact_match

ENV_VAR = "MEMUPDATE_FACTCONSOLIDATION_FILE"
DEFAULT_DEV_FILE = Path(__file__).resolve().parents[1].parent / "shared/data/memoryagentbench/factconsolidation-dev.jsonl"
runner = CliRunner()


def dev_path() -> Path:
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value).expanduser() if value else DEFAULT_DEV_FILE


@pytest.fixture(scope="module")
def dev_file() -> Path:
    path = dev_path()
    if not path.is_file():
        pytest.skip(f"FactConsolidation dev file not found at {path}; set {ENV_VAR} to a copy of it to run this")
    return path


def synthetic_rows(tag: str = "") -> list[dict]:
    facts = [f"Ann lives in the city of Paris.{tag}", "The sport of goaltender is ice hockey.",
             "Ann lives in the city of Rome.", "Goaltender is associated with the sport of pesäpallo."]
    context = "Here is a list of facts:\n" + "".join(f"{i}. {fact}\n" for i, fact in enumerate(facts))
    return [
        {"source": "factconsolidation_sh_1k", "n_facts": 4, "context": context,
         "questions": ["Where does Ann live?", "Which sport is goaltender associated with?"],
         "answers": [["Rome", "Roma"], ["pesäpallo"]]},
        {"source": "factconsolidation_mh_1k", "n_facts": 4, "context": context,
         "questions": ["Which sport is the position in Ann's club?"], "answers": [["pesäpallo"]]},
    ]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def test_parses_rows_questions_and_a_shared_context(tmp_path) -> None:
    sh, mh = load_factconsolidation(write_rows(tmp_path / "fc.jsonl", synthetic_rows()))
    assert (sh.name, mh.name, sh.source) == ("sh_1k", "mh_1k", "factconsolidation_sh_1k")
    assert sh.context is mh.context and sh.context.context_id.startswith("c4-")
    assert sh.context.facts[3] == "Goaltender is associated with the sport of pesäpallo."
    assert [q.category for q in sh.qa] == [SINGLE_HOP, SINGLE_HOP] and mh.qa[0].category == MULTI_HOP
    assert sh.qa[0].answer == "Rome" and sh.accepted[0] == ("Rome", "Roma") and sh.qa[1].index == 1
    assert [s.name for s in select_sources([sh, mh], "mh_1k,factconsolidation_sh_1k")] == ["mh_1k", "sh_1k"]
    with pytest.raises(MemupdateError, match="sh_9k: not in the file; it holds sh_1k, mh_1k"):
        select_sources([sh, mh], "sh_9k")


def test_serial_order_is_time_order() -> None:
    memories = fact_memories(load_factconsolidation_rows(synthetic_rows())[0].context)
    assert [m.key for m in memories] == ["s000000", "s000001", "s000002", "s000003"]
    assert [m.metadata["serial"] for m in memories] == [0, 1, 2, 3]
    times = [m.metadata["time"] for m in memories]
    assert times == sorted(times) and times[:2] == ["2000-01-01T00:00:00", "2000-01-01T01:00:00"]
    assert fact_time(18331) > fact_time(18330)  # the 262k context's last serial still sorts after the one before


def load_factconsolidation_rows(rows: list[dict]):
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        return load_factconsolidation(write_rows(Path(folder) / "fc.jsonl", rows))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json\n", "line 1 is not JSON"),
        (json.dumps({"source": "factconsolidation_sh_1k"}) + "\n", "lacks source/context/questions/answers"),
        (json.dumps({"source": "other_1k", "context": "0. a", "questions": [], "answers": []}) + "\n", "is not factconsolidation_sh"),
        (json.dumps({"source": "factconsolidation_sh_1k", "context": "0. a\n2. b", "questions": [], "answers": []}) + "\n",
         "fact line 2 '2. b' is not '1. <fact>'"),
        (json.dumps({"source": "factconsolidation_sh_1k", "n_facts": 3, "context": "0. a", "questions": [], "answers": []}) + "\n",
         "n_facts is 3 but the context numbers 1 facts"),
        ("", "holds no rows"),
    ],
)
def test_a_bad_file_stops_with_one_line_naming_it(tmp_path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(MemupdateError, match=message) as caught:
        load_factconsolidation(path)
    assert "bad.jsonl" in str(caught.value) and "\n" not in str(caught.value) and "JSONL" in str(caught.value)
    with pytest.raises(MemupdateError, match="missing.jsonl"):
        load_factconsolidation(tmp_path / "missing.jsonl")


def test_parse_facts_keeps_each_fact_whole() -> None:
    assert parse_facts("Here is a list of facts:\n0. Pedro worked in Washington, D.C..\n1. 2. is a number") == (
        "Pedro worked in Washington, D.C..", "2. is a number")


def test_substring_exact_match_is_memoryagentbench_s_rule() -> None:
    assert normalize_exact("The Fairly OddParents, and an Owl!") == "fairly oddparents and owl"
    assert substring_exact_match("It is the Pesäpallo.", ["pesäpallo"]) == 1.0
    assert substring_exact_match("Washington, D.C.", "Washington DC") == 1.0
    assert substring_exact_match("ice hockey", ["pesäpallo", "hockey on ice"]) == 0.0
    assert substring_exact_match("Roma", ["Rome", "Roma"]) == 1.0  # any accepted answer
    assert substring_exact_match("Rome", ["Rome, Italy"]) == 0.0  # the answer inside the prediction, not the reverse


def test_dev_file_contexts_nest(dev_file) -> None:
    sets = {s.name: s for s in load_factconsolidation(dev_file)}
    assert {"sh_6k", "mh_6k", "sh_32k", "mh_32k"} <= set(sets)
    small, large = sets["sh_6k"].context, sets["sh_32k"].context
    assert sets["mh_6k"].context is small and sets["mh_32k"].context is large
    assert (len(small.facts), len(large.facts)) == (455, 2310)
    assert set(small.facts) <= set(large.facts)  # all 455 facts of 6k are among the 32k ones
    assert all(len(s.qa) == 100 and all(s.accepted) for s in sets.values())


def test_load_context_writes_each_fact_once_in_order(store) -> None:
    (fc, _) = load_factconsolidation_rows(synthetic_rows(uuid.uuid4().hex[:6]))
    report = load_context(store, fc.context)
    try:
        assert (report.added, report.present) == (4, 0)
        assert load_context(store, fc.context).added == 0  # safe to repeat
        rows = sorted(report.base.snapshot().values(), key=lambda m: m.metadata["serial"])
        assert [m.content for m in rows] == list(fc.context.facts)
        assert [m.metadata["time"] for m in rows] == [fact_time(i) for i in range(4)]
    finally:
        report.base.drop()


def test_command_end_to_end_on_a_slice(dev_file, database_url, tmp_path) -> None:
    """The 6k context's first 60 facts and 5 of each kind's questions, compacted by the rule."""
    rows = [json.loads(line) for line in dev_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    chosen = [row for row in rows if row["source"].endswith(("sh_6k", "mh_6k"))]
    lines = rows[0]["context"].splitlines()[: 1 + 60]
    tag = uuid.uuid4().hex[:6]  # a context of its own, so parallel runs do not share a bank
    sliced = [{**row, "n_facts": 61, "context": "\n".join([*lines, f"60. Slice {tag} is a test."]),
               "questions": row["questions"][:5], "answers": row["answers"][:5]} for row in chosen]
    path, out = write_rows(tmp_path / "slice.jsonl", sliced), tmp_path / "out.json"
    result = runner.invoke(app, ["eval", "factconsolidation", "--file", str(path), "--sources", "sh_6k,mh_6k",
                                 "--policy", "heuristic", "--url", database_url, "--out", str(out)],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report["sources"]) == {"sh_6k", "mh_6k"} and len(report["contexts"]) == 1
    (context,) = report["contexts"].values()
    assert context["facts"] == 61 and context["memories"]["before"] == 61 and context["episodes"] >= 1
    for entry in report["sources"].values():
        assert entry["proxy"]["questions"] == 5 and "low" in entry["proxy"]["change"]
    assert "sh_6k" in result.output and "proxy change" in result.output
    bad = runner.invoke(app, ["eval", "factconsolidation", "--file", str(tmp_path / "none.jsonl"), "--url", database_url])
    assert bad.exit_code == 2 and "none.jsonl" in bad.output


@pytest.mark.slow
def test_reader_exact_match_on_a_slice(dev_file, database_url, tmp_path) -> None:
    """The packaged reader scores the benchmark's rule (`make reader` first)."""
    from memupdate.llm.models import resolve_model

    try:
        resolve_model("qwen2.5-coder-0.5b")
    except MemupdateError as exc:
        pytest.skip(f"the packaged reader is not installed ({exc}); run `make reader`")
    out = tmp_path / "out.json"
    result = runner.invoke(app, ["eval", "factconsolidation", "--file", str(dev_file), "--sources", "sh_6k",
                                 "--policy", "none", "--max-questions", "4", "--answerer", "hf:qwen2.5-coder-0.5b",
                                 "--url", database_url, "--out", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    reader = json.loads(out.read_text())["sources"]["sh_6k"]["reader"]
    assert reader["metric"] == "substring_exact_match" and reader["before"] == reader["after"]
    assert reader["before"] in (0.0, 0.25, 0.5, 0.75, 1.0)
