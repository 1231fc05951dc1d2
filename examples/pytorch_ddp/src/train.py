"""A small real DDP training: linear regression on rows [x1, ..., xk, y].

Launched once (a local run), by `flow run --distributed=local` as N processes,
or by Azure ML: all set MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK (or none, for a
single process). Rank 0 writes the model and metrics.json to --model-dir.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def init():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def load(path, rank, world):
    with open(path) as f:
        rows = json.load(f)
    shard = rows[rank::world]                      # each rank trains on its own slice
    data = torch.tensor(shard, dtype=torch.float32)
    return data[:, :-1], data[:, -1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--model-dir", required=True)
    args = ap.parse_args()

    rank, world = init()
    torch.manual_seed(0)                           # same initial weights on every rank
    x, y = load(args.data, rank, world)
    model = torch.nn.Linear(x.shape[1], 1)
    ddp = DDP(model) if world > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    losses = []
    for _ in range(args.epochs):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()                            # DDP averages gradients across ranks here
        opt.step()
        losses.append(loss.item())

    weights = [p.detach().flatten().tolist() for p in model.parameters()]
    print(json.dumps({"rank": rank, "world_size": world, "final_loss": losses[-1],
                      "weights": weights}), flush=True)
    if rank == 0:
        os.makedirs(args.model_dir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(args.model_dir, "model.pt"))
        with open(os.path.join(args.model_dir, "metrics.json"), "w") as f:
            json.dump({"loss": losses, "world_size": world}, f)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
