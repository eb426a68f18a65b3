"""Building models from a config, training, evaluation and the one run path."""
