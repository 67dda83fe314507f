"""Run by the two-node Slurm test as ``accelerate launch ... -m ddp_probe``: every process joins
the gloo process group through accelerate, sums its rank + 1 across processes and gathers the
node it ran on; rank 0 reports the result through Dagster Pipes (a no-op when run by hand)."""

import os

import torch
import torch.distributed as dist
from accelerate import PartialState
from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes


def main() -> None:
    state = PartialState(cpu=True)  # what TrainingArguments(use_cpu=True) asks of accelerate
    total = torch.tensor([state.process_index + 1.0])
    dist.all_reduce(total)
    nodes: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(nodes, os.environ.get("SLURMD_NODENAME", ""))
    print(f"rank {state.process_index}/{state.num_processes} ({dist.get_world_size()}) on {nodes[state.process_index]}: "
          f"{state.distributed_type}, sum {total.item()}", flush=True)
    if state.is_main_process and PipesEnvVarParamsLoader().is_dagster_pipes_process():
        with open_dagster_pipes() as pipes:
            pipes.report_asset_materialization(metadata={
                "distributed_type": str(state.distributed_type),
                "world_size": state.num_processes, "rank_sum": total.item(), "nodes": nodes})
    state.wait_for_everyone()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
