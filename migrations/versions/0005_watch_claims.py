"""watch_claims: what a `memupdate watch` worker holds while it works on it.

One row per bank path (or `import:<source>` for a live store's import), locked with
`SELECT ... FOR UPDATE SKIP LOCKED` by the transaction of the worker that holds it (`bank.claims`):
several watchers against one database share a pass, and a killed worker's lock goes with its connection.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "watch_claims",
        sa.Column("name", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("watch_claims")
