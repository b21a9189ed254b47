"""`python -m memupdate.cli ...`: the `memupdate` command, for a venv whose scripts point elsewhere.

    python -m memupdate.cli compact imported/memories/alice --review review.html
"""

from memupdate.cli import app

app(prog_name="memupdate")
