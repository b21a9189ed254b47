"""A local model and its chat format: Hermes `<tool_call>` blocks, chat rendering as a student reads it
(`chat`), a checkpoint's check and decoding options (`checkpoints`), the packaged models (`models`); used by
the hf policy, the batcher, training and the reader."""
