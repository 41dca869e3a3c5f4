"""PRM checkpoints on the Django side: training runs, the training data they read, scoring
solutions with them, and their held-out evaluations and the summary of those."""
