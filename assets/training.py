"""Training assets: `sft_checkpoint` → `grpo_checkpoint`, launched through Dagster Pipes.

Each asset checks its recipe in-process (a bad recipe fails here, naming the field, before any
process or pod starts), then runs ``python -m training.sft|grpo --recipe R key=value ...``
through :class:`TrainerLauncher`: ``PipesSubprocessClient`` locally (``mode="subprocess"``), or
``dagster_k8s.PipesK8sClient`` in a GPU pod (``mode="k8s"``; ``accelerate launch`` when
``gpus > 1``). The script streams progress and metrics back and reports the final checkpoint
(path, id, last metrics, a table of logged steps), which becomes this asset's materialization
metadata. ``grpo_checkpoint`` starts from the checkpoint of the latest ``sft_checkpoint``
materialization unless ``from_sft`` is false (the plain RLVR baseline starts from the base
model). The rows of ``train_metrics`` and ``checkpoints`` are written by the script itself.

:func:`demo_chain` materializes both with CPU recipes (minutes on a laptop) for ``make demo``.
"""


import os
import sys
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import lineage, now, record_run
from assets.resources import WarehouseResource
from pipelines.settings import PROJECT_ROOT

DEFAULT_SFT_RECIPE = "sxs_sft.cpu"
DEFAULT_GRPO_RECIPE = "sxs_grpo.cpu"


class TrainerLauncher(dg.ConfigurableResource):
    """Where training scripts run: a local subprocess or a Kubernetes GPU pod."""

    mode: str = "subprocess"
    python: str = ""  # subprocess mode: interpreter (default: the one running Dagster)
    processes: int = 1  # subprocess mode: >1 runs `accelerate launch --multi_gpu` (one per GPU)
    image: str = ""  # k8s mode: an image with weft and its training dependencies
    namespace: str = ""
    gpus: int = 1
    gpu_resource: str = "nvidia.com/gpu"
    cpu: str = "8"
    memory: str = "64Gi"
    shm_size: str = "16Gi"
    weft_home_claim: str = ""  # a PVC holding WEFT_HOME (checkpoints, warehouse)
    weft_home_path: str = "/weft"
    service_account: str = ""
    image_pull_secrets: list[str] = []
    node_selector: dict[str, str] = {}
    env: dict[str, str] = {}
    kubeconfig_file: str = ""
    load_incluster_config: bool | None = None

    def command(self, kind: str, recipe: str, overrides: list[str]) -> list[str]:
        from training.launch import pod_command, script_command

        if self.mode == "k8s":
            return pod_command(kind, recipe, overrides, self.pod_settings())
        return script_command(kind, recipe, overrides, processes=self.processes,
                              python=self.python or sys.executable)

    def pod_settings(self):
        from training.launch import PodSettings

        return PodSettings(
            image=self.image, gpus=self.gpus, gpu_resource=self.gpu_resource, cpu=self.cpu,
            memory=self.memory, shm_size=self.shm_size, weft_home_claim=self.weft_home_claim,
            weft_home_path=self.weft_home_path, service_account=self.service_account,
            image_pull_secrets=tuple(self.image_pull_secrets), node_selector=self.node_selector,
            env=self.env)

    def launch(self, context: dg.AssetExecutionContext, kind: str, recipe: str,
               overrides: list[str], extras: dict[str, Any] | None = None):
        """Run the script under Pipes and return the completed invocation."""
        command = self.command(kind, recipe, overrides)
        context.log.info("launching: " + " ".join(command))
        if self.mode == "subprocess":
            env = {"PYTHONUNBUFFERED": "1", **self.env}
            client = dg.PipesSubprocessClient(cwd=str(PROJECT_ROOT), env=env)
            return client.run(command=command, context=context, extras=extras or {})
        if self.mode == "k8s":
            from training.launch import pod_spec

            client = k8s_client(self.kubeconfig_file or None, self.load_incluster_config)
            return client.run(context=context, extras=extras or {},
                              namespace=self.namespace or None,
                              base_pod_spec=pod_spec(self.pod_settings(), command))
        raise dg.Failure(f"TrainerLauncher.mode must be 'subprocess' or 'k8s', got {self.mode!r}")


def k8s_client(kubeconfig_file: str | None = None, load_incluster_config: bool | None = None):
    """``dagster_k8s.PipesK8sClient``, imported only when a cluster launch is asked for."""
    try:
        from dagster_k8s import PipesK8sClient
    except ImportError as exc:
        raise dg.Failure(
            "TrainerLauncher(mode='k8s') needs the dagster-k8s package: "
            "pip install dagster-k8s==0.29.27 (the release matching dagster 1.13.27)") from exc
    return PipesK8sClient(kubeconfig_file=kubeconfig_file, load_incluster_config=load_incluster_config)


def trainer_for(env: str) -> TrainerLauncher:
    """The launcher for ``WEFT_ENV``: local subprocess, or k8s pods configured from env vars."""
    if env == "cluster":
        return TrainerLauncher(
            mode="k8s", image=dg.EnvVar("WEFT_TRAINER_IMAGE"),
            namespace=os.environ.get("WEFT_TRAINER_NAMESPACE", ""),
            gpus=int(os.environ.get("WEFT_TRAINER_GPUS", "1")),
            weft_home_claim=os.environ.get("WEFT_HOME_CLAIM", ""))
    return TrainerLauncher()


class SFTCheckpointConfig(dg.Config):
    recipe: str = DEFAULT_SFT_RECIPE
    overrides: list[str] = []  # key=value, YAML values (e.g. "max_steps=20")


class GRPOCheckpointConfig(dg.Config):
    recipe: str = DEFAULT_GRPO_RECIPE
    overrides: list[str] = []
    from_sft: bool = True  # start from the latest sft_checkpoint (False: the recipe's model)


def check_recipe(kind: str, recipe: str, overrides: list[str]):
    """The resolved config, or a dg.Failure naming the bad field (nothing is launched)."""
    from training.config import RecipeError, load_config

    try:
        return load_config(recipe, overrides, expect_kind=kind)
    except RecipeError as exc:
        raise dg.Failure(description=f"bad training recipe: {exc}") from exc


def _run(context: dg.AssetExecutionContext, kind: str, recipe: str, overrides: list[str],
         trainer: TrainerLauncher, warehouse: WarehouseResource,
         extra_metadata: dict[str, Any] | None = None) -> dg.MaterializeResult:
    started = now()
    # A model path handed to a pod lives on the pod's volume, not here: check the rest.
    local = overrides if trainer.mode != "k8s" else [
        o for o in overrides if not o.startswith("model_name_or_path=")]
    config = check_recipe(kind, recipe, local)
    settings = {"recipe": recipe, "overrides": overrides}
    invocation = trainer.launch(context, kind, recipe, overrides)
    reported = invocation.get_materialize_result()
    metadata = dict(reported.metadata or {})
    metadata.update(extra_metadata or {})
    metadata["recipe"] = recipe
    metadata["overrides"] = dg.MetadataValue.json(list(overrides))
    metadata["launcher"] = trainer.mode
    reported_id = metadata.get("checkpoint_id")
    checkpoint_id = str(reported_id.value) if reported_id is not None else config.checkpoint_id
    lin = lineage(context, settings, partition=checkpoint_id)
    record_run(warehouse.get(), lin, started_at=started, rows_written=1, config=settings)
    path = metadata.get("checkpoint_path")
    if path is not None and (Path(str(path.value)) / "config.json").is_file():
        # Register the checkpoint as a model: the models sensor turns it into an evaluation
        # partition and evaluates it on the suite.
        from eval.models import ModelSpec, register_model

        register_model(ModelSpec(model_id=checkpoint_id, kind="local", path=str(path.value),
                                 served_model=checkpoint_id, checkpoint_id=checkpoint_id),
                       warehouse.get(), run_id=context.run_id)
        metadata["registered_model"] = checkpoint_id
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    group_name="train",
    kinds={"pytorch", "python"},
    description="A supervised fine-tuning checkpoint (TRL SFT on a prompt/completion table), "
                "trained through Dagster Pipes; rows in train_metrics and checkpoints.",
)
def sft_checkpoint(context: dg.AssetExecutionContext, config: SFTCheckpointConfig,
                   trainer: TrainerLauncher, warehouse: WarehouseResource) -> dg.MaterializeResult:
    return _run(context, "sft", config.recipe, list(config.overrides), trainer, warehouse)


def latest_checkpoint(context: dg.AssetExecutionContext, asset: str) -> tuple[str, str]:
    """(path, checkpoint id) from the latest materialization of a checkpoint asset."""
    event = context.instance.get_latest_materialization_event(dg.AssetKey(asset))
    if event is None or event.asset_materialization is None:
        raise dg.Failure(f"no {asset} materialization: materialize {asset} first, or set "
                         "from_sft: false to start GRPO from the recipe's model")
    meta = event.asset_materialization.metadata
    if "checkpoint_path" not in meta or "checkpoint_id" not in meta:
        raise dg.Failure(f"the latest {asset} materialization has no checkpoint_path/"
                         "checkpoint_id metadata; re-materialize it")
    return str(meta["checkpoint_path"].value), str(meta["checkpoint_id"].value)


@dg.asset(
    deps=[sft_checkpoint],
    group_name="train",
    kinds={"pytorch", "python"},
    description="A GRPO checkpoint (RL with verifiable rewards) started from the SFT checkpoint, "
                "trained through Dagster Pipes; rows in train_metrics and checkpoints.",
)
def grpo_checkpoint(context: dg.AssetExecutionContext, config: GRPOCheckpointConfig,
                    trainer: TrainerLauncher, warehouse: WarehouseResource) -> dg.MaterializeResult:
    overrides = list(config.overrides)
    extra: dict[str, Any] = {}
    if config.from_sft:
        path, parent = latest_checkpoint(context, "sft_checkpoint")
        overrides = [f"model_name_or_path={path}", f"parent_checkpoint={parent}", *overrides]
        extra["started_from"] = dg.MetadataValue.path(path)
    return _run(context, "grpo", config.recipe, overrides, trainer, warehouse, extra)


TRAINING_ASSETS = [sft_checkpoint, grpo_checkpoint]


def demo_chain(instance: dg.DagsterInstance | None = None, *,
               sft_recipe: str = DEFAULT_SFT_RECIPE, grpo_recipe: str = DEFAULT_GRPO_RECIPE,
               sft_overrides: list[str] | None = None, grpo_overrides: list[str] | None = None,
               resources: dict[str, Any] | None = None) -> bool:
    """SFT → GRPO with CPU recipes (for ``make demo``); prints the logged steps. True on success."""
    from warehouse import Warehouse
    from warehouse.__main__ import format_table

    run_config = {"ops": {
        "sft_checkpoint": {"config": {"recipe": sft_recipe, "overrides": list(sft_overrides or [])}},
        "grpo_checkpoint": {"config": {"recipe": grpo_recipe,
                                       "overrides": list(grpo_overrides or [])}},
    }}
    print(f"[demo] training: {sft_recipe} -> {grpo_recipe} (CPU, through Dagster Pipes) ...",
          flush=True)
    result = dg.materialize(
        TRAINING_ASSETS, instance=instance, run_config=run_config,
        resources=resources or {"trainer": TrainerLauncher(), "warehouse": WarehouseResource()},
        tags={"weft/demo": "train"})
    if not result.success:
        return False
    ids = [str(m.metadata["checkpoint_id"].value) for m in result.asset_materializations_for_node(
        "sft_checkpoint") + result.asset_materializations_for_node("grpo_checkpoint")]
    wh = Warehouse()
    query = ("SELECT checkpoint_id, kind, step, round(loss, 4) AS loss, round(reward_mean, 3) AS "
             "reward, round(filtered_group_share, 2) AS filtered, round(seconds_per_step, 1) AS "
             "s_per_step FROM train_metrics WHERE list_contains($ids, checkpoint_id) "
             "ORDER BY kind DESC, step")
    print("\n[demo] training steps (python -m warehouse sql \"SELECT * FROM train_metrics\"):\n")
    print(format_table(wh.sql(query, {"ids": ids})))
    print(format_table(wh.sql("SELECT checkpoint_id, kind, status, parent_checkpoint, global_step, "
                              "path FROM checkpoints WHERE list_contains($ids, checkpoint_id)",
                              {"ids": ids})))
    return True
