"""The student's package for the training utilities: cross-entropy, gradient clipping, AdamW, its learning-rate
schedule, and the batch sampler."""
