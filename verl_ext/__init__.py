"""verl-ext: extensions for verl 0.9.1."""
