"""Suite-wide settings.

One torch thread per test process: the suite's tensors are small, and on a 2-core machine
shared with Ray workers or servers started by the tests, 2-thread OpenMP kernels stall for
milliseconds at every barrier."""

import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
torch.set_num_threads(1)
