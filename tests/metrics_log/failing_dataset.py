"""A dataset class that fails when verl builds it inside the task runner (after the pre-flight passed and Ray
started): a run that fails inside Ray, for tests/metrics_log/test_e2e_terminal.py."""

from verl.utils.dataset.rl_dataset import RLHFDataset


class FailsToLoad(RLHFDataset):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("the training data could not be read (the test's failing dataset)")
