"""A short real training run (2 ranks under antdt-run, ANTDT_POLICY=antdt-dd with a
micro-batch cap so gradient accumulation runs, the DDP hook and the DDS sampler): 300 steps
of B = 64 on the first 19 200 Fashion-MNIST images must reach 70% test accuracy (all
10 000 test images), with identical replicas and every sample committed once.

  train_short.py <antdt-run> <tools/train_fashion_mnist.py> <out dir>
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import job  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
SAMPLES, BATCH, MIN_ACCURACY = 19200, 64, 0.70  # a run reached 76.4 %; chance is 10 %


def main():
    job.require_torch()
    antdt_run, trainer, out = sys.argv[1:4]
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print(f"SKIP: {DATA} is missing (apt-get install dataset-fashion-mnist)")
        return job.SKIP
    rc = job.run_ranks(antdt_run, 2, [trainer, "--mode", "antdt", "--epochs", "1", "--train-samples", str(SAMPLES),
                                      "--global-batch", str(BATCH), "--lr", "0.05", "--label", "short",
                                      "--min-accuracy", str(MIN_ACCURACY), "--out", out],
                       env={"ANTDT_POLICY": "antdt-dd", "ANTDT_POLICY_CONFIG": '{"micro_batch_cap":24}'},
                       timeout=140)
    if rc != 0:
        print(f"FAIL: the training job exited with {rc}")
        return 1
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    errors = []
    if s["steps"] < SAMPLES // BATCH:
        errors.append(f"{s['steps']} steps, fewer than the {SAMPLES // BATCH} the data needs")
    if s["committed"] != SAMPLES:
        errors.append(f"{s['committed']} samples committed, expected each of the {SAMPLES} once")
    if not s["replicas_identical"]:
        errors.append("the replicas differ")
    for e in errors:
        print("FAIL:", e)
    print(f"train_short: {s['steps']} steps, test accuracy {100 * s['final_accuracy']:.2f}% "
          f"(required {100 * MIN_ACCURACY:.0f}%), {s['wall_s']:.1f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
