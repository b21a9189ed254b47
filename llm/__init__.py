"""A local model and its chat format: Hermes tool calls, chat rendering, checkpoints and the packaged models; used by the hf policy, the batcher, training and the reader."""
