"""The training stage: the loss, optimisers and schedules, the training log, checkpoints of the training
state, validation, and the training loop itself.
"""
