"""Evaluates a digits job's final checkpoint on the test split, apart from
the worker that trained it (TestRealDemo):

    /usr/bin/python3 evaluate_digits.py LIBDIR CHECKPOINT_DIR JOB MODEL

prints the test accuracy of the checkpoint's model. LIBDIR is where
worker.Install put the library and train_digits.py (for the model classes
and the test split)."""

import sys

lib, ckpt_dir, job, model_name = sys.argv[1:5]
sys.path.insert(0, lib)

import torch  # noqa: E402

import train_digits  # noqa: E402
from pollux_worker import checkpoint  # noqa: E402

payload = checkpoint.load(ckpt_dir, job)
model = train_digits.MODELS[model_name]()
model.load_state_dict(payload["model"])
model.eval()
_, (x_test, y_test) = train_digits.digits(0)
with torch.no_grad():
    predicted = model(x_test).argmax(1)
print("%.6f" % (predicted == y_test).float().mean().item())
