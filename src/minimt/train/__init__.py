"""Training: the loop, one step, evaluation, progress and checkpoints, processes and signals."""
