"""The adapters to verl, the only modules importing it.

- The tools (`tools`) and their config (`tool_config`).
- The agent loop (`agent_loop`: targeted and compaction rows) and its rollout forks (`forks`); a Ray
  worker's database (`worker_db`).
- The reward hook (`compute_score`; a relation row's verdict in `relation_score`).
- The launcher (`launch`) and export to Hugging Face (`export`).

Training with verl: docs/training-verl.md.
"""
