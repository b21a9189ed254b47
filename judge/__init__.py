"""The relation judge: how two memories relate (duplicate, update and which is current, compatible,
events), with a confidence; the one place every reader of that question asks. See `verdict.py`."""

from memupdate.judge.verdict import (
    RELATIONS,
    Pair,
    Relation,
    RelationJudge,
    Statement,
    Verdict,
    judge_memories,
    later,
)

__all__ = ["RELATIONS", "Pair", "Relation", "RelationJudge", "Statement", "Verdict", "judge_memories", "later"]
