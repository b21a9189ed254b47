#!/usr/bin/env bash
# Train on a Ray cluster: `memupdate rl train` checks the database and data on the head node, then runs
# verl's trainer, which joins the cluster at $RAY_ADDRESS.
#
# Once per node (same venv and the same checkout path on every node, MEMUPDATE_* set alike):
#   head:    ray start --head --port 6379 --num-gpus "$GPUS_PER_NODE"
#   workers: ray start --address "$HEAD_HOST:6379" --num-gpus "$GPUS_PER_NODE"
# Then on the head node:
#   MEMUPDATE_DATABASE_URL=postgresql://user:pass@db-host:5432/memupdate \
#   RAY_ADDRESS=127.0.0.1:6379 NNODES=2 GPUS_PER_NODE=8 MODEL_PATH=Qwen/Qwen2.5-3B-Instruct \
#     scripts/train_cluster.sh [--dry-run] [--config locomo_memory_dapo] [HYDRA OVERRIDES...]
#
# Every rollout and reward worker connects to MEMUPDATE_DATABASE_URL (at most 4 connections per
# worker process), so the server must be reachable from every node: the embedded server is not.
set -euo pipefail

: "${MEMUPDATE_DATABASE_URL:?set MEMUPDATE_DATABASE_URL to a PostgreSQL server (with pgvector) every node reaches}"
: "${RAY_ADDRESS:?set RAY_ADDRESS to the Ray head, e.g. 127.0.0.1:6379 on the head node (ray start --head first)}"
NNODES="${NNODES:-1}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
MODEL_PATH="${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}"
DATA_DIR="${DATA_DIR:-data/locomo}"
MEMUPDATE="${MEMUPDATE:-memupdate}"
export RAY_ADDRESS

exec "$MEMUPDATE" rl train "$@" \
    trainer.nnodes="$NNODES" \
    trainer.n_gpus_per_node="$GPUS_PER_NODE" \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet"
