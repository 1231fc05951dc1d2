"""Linear regression by full-batch gradient descent: the tiny training job
of examples/sweep.  Reads rows [x1, x2, y] as JSON, trains for --epochs at
--lr, writes the model (JSON) and the metrics flow reads: the validation
and training loss of each epoch, as series."""
import argparse
import json
import sys


def mse(w, rows):
    return sum((w[0] * x1 + w[1] * x2 + w[2] - y) ** 2 for x1, x2, y in rows) / len(rows)


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--train", "--test", "--model", "--metrics"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--epochs", type=int, required=True)
    a = ap.parse_args()
    if a.lr <= 0:
        sys.exit(f"train.py: --lr must be positive, got {a.lr}")
    train, test = json.load(open(a.train)), json.load(open(a.test))
    w, losses, val = [0.0, 0.0, 0.0], [], []
    for _ in range(a.epochs):
        g = [0.0, 0.0, 0.0]
        for x1, x2, y in train:
            err = w[0] * x1 + w[1] * x2 + w[2] - y
            g[0] += 2 * err * x1 / len(train)
            g[1] += 2 * err * x2 / len(train)
            g[2] += 2 * err / len(train)
        w = [wi - a.lr * gi for wi, gi in zip(w, g)]
        losses.append(mse(w, train))
        val.append(mse(w, test))
    json.dump({"w": w}, open(a.model, "w"))
    # a list is a series (one value per epoch); its last value is the metric
    json.dump({"val_loss": val, "train_loss": losses}, open(a.metrics, "w"))


if __name__ == "__main__":
    main()
