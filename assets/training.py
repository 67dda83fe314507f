"""Training assets: one checkpoint asset per recipe family, launched through Dagster Pipes.

Families (:data:`FAMILIES`, built by :func:`checkpoint_asset`): ``sft_checkpoint`` (SxS SFT on
``sxs_sft_dataset``) → ``grpo_checkpoint`` (GRPO on ``problems``), and ``tir_sft_checkpoint``
(MOSAIC SFT on ``tir_sft_dataset``) → ``process_grpo_checkpoint`` (process-supervised GRPO on
``step_instances``). Each declares its data and its parent checkpoint as upstream assets, so the
UI shows what trained a checkpoint and marks it stale when that data changes; the metadata says
which dataset spec the run really read (a built-in fallback or another family's recipe is
flagged, with a warning in the run log) and links the evaluation partitions that the models
sensor creates for the registered checkpoint.

Each asset checks its recipe in-process (a bad recipe fails here, naming the field, before any
process or pod starts), then runs ``python -m training.sft|grpo --recipe R key=value ...``
through :class:`TrainerLauncher`: ``PipesSubprocessClient`` locally (``mode="subprocess"``),
``dagster_k8s.PipesK8sClient`` in a GPU pod (``mode="k8s"``; ``accelerate launch`` when
``gpus > 1``), or an sbatch job on a Slurm cluster (``mode="slurm"``: ``assets.slurm_pipes``
with the job script of ``pipelines.slurm.script``; ``srun accelerate launch`` across nodes).
The script streams progress and metrics back and reports the final checkpoint
(path, id, last metrics, a table of logged steps), which becomes this asset's materialization
metadata. A GRPO asset starts from the checkpoint of its parent's latest materialization unless
``from_sft`` is false (the plain RLVR baseline starts from the base model). The rows of
``train_metrics`` and ``checkpoints`` are written by the script itself.

``make demo`` trains ``sft_checkpoint`` → ``grpo_checkpoint`` with its CPU recipes (minutes on a
laptop) as one run of the code location's asset job (``cli.demo``).
"""


import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import lineage, lineage_metadata, now
from assets.partition_defs import eval_suite, model_partitions
from assets.resources import WarehouseResource
from pipelines.settings import PROJECT_ROOT
from warehouse.lineage import model_lineage
from warehouse.runs import record_run

DEFAULT_SFT_RECIPE = "sxs_sft.cpu"
DEFAULT_GRPO_RECIPE = "sxs_grpo.cpu"


class TrainerLauncher(dg.ConfigurableResource):
    """Where training scripts run: a local subprocess, a Kubernetes GPU pod or a Slurm job."""

    mode: str = "subprocess"
    python: str = ""  # subprocess: interpreter (default: the one running Dagster); slurm: the
    # interpreter on the shared filesystem (default: the same path)
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
    # Multi-GPU: an accelerate config (ddp, fsdp, zero2, zero3 from training/accelerate/, or a
    # path) for both modes; GPUs kept for the vLLM rollout server (GRPO, TRL server mode):
    # subprocess mode adds them after `processes`, k8s mode takes them out of `gpus`; the server
    # runs as a `process` of the training script or (k8s) a sidecar `container`.
    accelerate_config: str = ""
    vllm_gpus: int = 0
    vllm_server: str = "process"
    vllm_image: str = ""
    # slurm mode (docs/slurm.md): sbatch's flags ('' or 0 leaves one out); WEFT_HOME, `python`
    # and `workdir` (the project root, default this checkout) must be on the shared filesystem.
    # One process per GPU of a node (at least one); `vllm_gpus` keeps GPUs of a one-node job for
    # the server, `vllm_nodes=1` the last node of a multi-node GRPO job.
    partition: str = ""
    account: str = ""
    qos: str = ""
    time_limit: str = ""  # sbatch --time, e.g. "04:00:00" or "1-00:00:00"
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    mem: str = ""  # sbatch --mem, e.g. "200G" ("0": all of a node's memory)
    constraint: str = ""
    sbatch_args: list[str] = []  # extra sbatch flags, e.g. ["--exclusive", "--gres=gpu:a100:8"]
    setup: list[str] = []  # shell lines before training, e.g. ["module load cuda/12.4"]
    container_image: str = ""  # Pyxis: srun --container-image
    container_mounts: list[str] = []  # Pyxis: srun --container-mounts (src:dst items)
    workdir: str = ""
    vllm_nodes: int = 0
    signal_before_s: int = 300  # sbatch --signal=B:USR1@<s>: logged by the job script
    main_process_port: int = 29500  # multi-node rendezvous port on the first node
    poll_interval_s: float = 10.0  # between job state reads
    report_grace_s: float = 60.0  # after the job ends, for its last Pipes messages

    def command(self, kind: str, recipe: str, overrides: list[str]) -> list[str]:
        """The training command (slurm mode: the one a one-node job runs)."""
        from training.launch import pod_command, script_command

        if self.mode == "k8s":
            return pod_command(kind, recipe, overrides, self.pod_settings())
        if self.mode == "slurm":
            return list(self.slurm_launch(kind, recipe, overrides).one_node)
        return script_command(kind, recipe, overrides, processes=self.processes,
                              python=self.python or sys.executable,
                              accelerate_config=self.accelerate_config, vllm_gpus=self.vllm_gpus)

    def pod_settings(self):
        from training.launch import PodSettings

        return PodSettings(
            image=self.image, gpus=self.gpus, gpu_resource=self.gpu_resource, cpu=self.cpu,
            memory=self.memory, shm_size=self.shm_size, weft_home_claim=self.weft_home_claim,
            weft_home_path=self.weft_home_path, service_account=self.service_account,
            image_pull_secrets=tuple(self.image_pull_secrets), node_selector=self.node_selector,
            env=self.env, accelerate_config=self.accelerate_config, vllm_gpus=self.vllm_gpus,
            vllm_server=self.vllm_server, vllm_image=self.vllm_image)

    def slurm_settings(self):
        """The job's :class:`pipelines.slurm.script.SlurmSettings` (ValueError on bad ones)."""
        from pipelines.settings import weft_home
        from pipelines.slurm.script import SlurmSettings

        return SlurmSettings(
            python=self.python or sys.executable, workdir=self.workdir or str(PROJECT_ROOT),
            weft_home=str(weft_home()), partition=self.partition, account=self.account,
            qos=self.qos, time_limit=self.time_limit, nodes=self.nodes,
            gpus_per_node=self.gpus_per_node, cpus_per_task=self.cpus_per_task, mem=self.mem,
            constraint=self.constraint, sbatch_args=tuple(self.sbatch_args),
            setup=tuple(self.setup), env=dict(self.env), container_image=self.container_image,
            container_mounts=tuple(self.container_mounts),
            signal_before_s=self.signal_before_s, main_process_port=self.main_process_port,
            vllm_nodes=self.vllm_nodes)

    def slurm_launch(self, kind: str, recipe: str, overrides: list[str]):
        """What a Slurm job runs (:class:`pipelines.slurm.script.TrainingLaunch`): one process
        per training GPU of a node; the one-node command is the local launch's, with paths
        relative to the project root the job starts in."""
        from pipelines.slurm.script import TrainingLaunch
        from training.launch import (
            accelerate_config_path,
            override_args,
            override_value,
            script_command,
        )

        if self.vllm_nodes and kind != "grpo":
            raise ValueError(f"vllm_nodes only applies to GRPO runs (rollouts), not {kind}")
        if self.vllm_gpus and self.nodes > 1:
            raise ValueError("vllm_gpus keeps GPUs of a one-node job for the vLLM server; on "
                             "several nodes set vllm_nodes=1 (the last node serves)")
        one_node_gpus = self.gpus_per_node - (self.vllm_gpus if self.nodes == 1 else 0)
        if self.gpus_per_node and one_node_gpus < 1:
            raise ValueError(f"vllm_gpus={self.vllm_gpus} leaves no GPU for training out of "
                             f"gpus_per_node={self.gpus_per_node}")
        processes = max(1, one_node_gpus)
        python = self.python or sys.executable
        model = ""
        if self.vllm_nodes:  # the vLLM node serves the model the run starts from
            from training.config_recipes import read_recipe
            from training.model_path import EMBEDDED

            model = override_value(overrides, "model_name_or_path") or str(
                read_recipe(recipe).values.get("model_name_or_path") or "")
            if model == EMBEDDED:
                from pipelines.models import embedded_model_dir

                model = str(embedded_model_dir())
        return TrainingLaunch(
            module=f"training.{kind}",
            args=("--recipe", recipe, *override_args(overrides)),
            one_node=tuple(script_command(
                kind, recipe, overrides, processes=processes, python=python,
                accelerate_config=self.accelerate_config,
                vllm_gpus=self.vllm_gpus if self.nodes == 1 else 0, relative_paths=True)),
            processes_per_node=processes,
            accelerate_config=(accelerate_config_path(self.accelerate_config, relative=True)
                               if self.accelerate_config else ""),
            vllm_model=model)

    def batch_script(self, kind: str, recipe: str, overrides: list[str],
                     env: dict[str, str] | None = None) -> str:
        """The sbatch script of a slurm-mode launch, for review (``env``: variables exported
        after the launcher's, e.g. the Dagster Pipes bootstrap variables at launch time)."""
        from pipelines.slurm.script import batch_script

        return batch_script(self.slurm_settings(), self.slurm_launch(kind, recipe, overrides),
                            env)

    def launch(self, context: dg.AssetExecutionContext, kind: str, recipe: str,
               overrides: list[str], extras: dict[str, Any] | None = None):
        """Run the script under Pipes and return the completed invocation."""
        if self.mode == "slurm":
            return self._launch_slurm(context, kind, recipe, overrides, extras)
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
        raise dg.Failure(f"TrainerLauncher.mode must be 'subprocess', 'k8s' or 'slurm', got "
                         f"{self.mode!r}")

    def _launch_slurm(self, context: dg.AssetExecutionContext, kind: str, recipe: str,
                      overrides: list[str], extras: dict[str, Any] | None):
        from assets.slurm_pipes import PipesSlurmClient
        from pipelines.slurm.script import batch_script

        try:
            settings = self.slurm_settings()
            launch = self.slurm_launch(kind, recipe, overrides)
            batch_script(settings, launch)  # refuse a bad layout before anything is written
        except ValueError as exc:
            raise dg.Failure(description=f"bad Slurm settings of the trainer resource: {exc}") \
                from exc
        layout = f"{settings.nodes} node(s)" + (", the last serving vLLM" if self.vllm_nodes
                                                 else "")
        context.log.info(f"submitting to Slurm ({layout}): python -m {launch.module} "
                         + " ".join(launch.args))
        client = PipesSlurmClient(poll_interval_s=self.poll_interval_s,
                                  report_grace_s=self.report_grace_s, time_limit=self.time_limit)
        return client.run(context=context, extras=extras or {},
                          script=lambda env: batch_script(settings, launch, env))


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
    """The launcher for ``WEFT_ENV``: a local subprocess, or on a cluster
    (``WEFT_TRAINER_MODE``) Kubernetes pods (``k8s``, the default) or Slurm jobs (``slurm``),
    configured from environment variables."""
    if env == "cluster":
        mode = os.environ.get("WEFT_TRAINER_MODE", "k8s")
        if mode == "slurm":
            return slurm_trainer_from_env()
        if mode != "k8s":
            raise ValueError(f"WEFT_TRAINER_MODE must be 'k8s' or 'slurm', got {mode!r}")
        return TrainerLauncher(
            mode="k8s", image=dg.EnvVar("WEFT_TRAINER_IMAGE"),
            namespace=os.environ.get("WEFT_TRAINER_NAMESPACE", ""),
            gpus=int(os.environ.get("WEFT_TRAINER_GPUS", "1")),
            weft_home_claim=os.environ.get("WEFT_HOME_CLAIM", ""))
    return TrainerLauncher()


def slurm_trainer_from_env() -> TrainerLauncher:
    """``TrainerLauncher(mode="slurm")`` from the ``WEFT_SLURM_*`` variables
    (``pipelines.slurm.env``: ``WEFT_SLURM_PARTITION``, ``WEFT_SLURM_GPUS_PER_NODE``, ...,
    ``WEFT_SLURM_SBATCH_ARGS``, ``WEFT_SLURM_SETUP``, ``WEFT_SLURM_CONTAINER_MOUNTS``)."""
    from pipelines.slurm.env import TRAINER_INT, TRAINER_TEXT, read_fields

    return TrainerLauncher(mode="slurm", **read_fields(TRAINER_TEXT, TRAINER_INT))


class SFTCheckpointConfig(dg.Config):
    recipe: str = DEFAULT_SFT_RECIPE
    overrides: list[str] = []  # key=value, YAML values (e.g. "max_steps=20")


class GRPOCheckpointConfig(dg.Config):
    recipe: str = DEFAULT_GRPO_RECIPE
    overrides: list[str] = []
    from_sft: bool = True  # start from the latest parent checkpoint (False: the recipe's model)


class TIRSFTCheckpointConfig(SFTCheckpointConfig):
    recipe: str = "tir_sft_preserved.cpu"


class ChainSFTCheckpointConfig(SFTCheckpointConfig):
    recipe: str = "chain_sft.cpu"


class ProcessGRPOCheckpointConfig(GRPOCheckpointConfig):
    recipe: str = "process_grpo.cpu"


@dataclass(frozen=True)
class CheckpointFamily:
    """One recipe family's checkpoint asset: what it trains on and what it starts from.

    ``data`` are the assets that produce what the family's recipes read (:func:`dataset_asset`:
    ``<table>`` for ``dataset: warehouse:<table>``, the ingest asset ``<source>_problems`` for
    ``problems:<source>``); they become the asset's upstream edges, so the UI shows what
    trained a checkpoint and marks it stale when that data changes, and only then: a benchmark
    added elsewhere changes ``problems`` (every source merged) but not the one source the
    recipes read. ``parent`` is the checkpoint asset a GRPO stage starts from (``from_sft``)."""

    name: str
    kind: str  # "sft" or "grpo"
    default_recipe: str
    data: tuple[str, ...]
    recipes: tuple[str, ...]  # the recipe names of this family (documentation and checks)
    parent: str | None = None
    description: str = ""
    config: type[dg.Config] = SFTCheckpointConfig


FAMILIES = (
    CheckpointFamily(
        "sft_checkpoint", "sft", DEFAULT_SFT_RECIPE, ("sxs_sft_dataset",), ("sxs_sft",),
        description="SxS supervised fine-tuning (think/speak streams of sxs_sft_dataset)"),
    CheckpointFamily(
        "grpo_checkpoint", "grpo", DEFAULT_GRPO_RECIPE, ("math_train_problems",),
        ("sxs_grpo", "sxs_grpo_shaped", "rlvr_grpo", "budget_grpo", "duet_grpo"),
        parent="sft_checkpoint",
        description="GRPO with verifiable rewards on problems with gold answers, started from "
                    "the SxS SFT checkpoint (from_sft: false = the plain RLVR baseline)",
        config=GRPOCheckpointConfig),
    CheckpointFamily(
        "tir_sft_checkpoint", "sft", "tir_sft_preserved.cpu", ("tir_sft_dataset",),
        ("tir_sft_preserved", "tir_sft_discarded"),
        description="MOSAIC tool-integrated SFT (state_preserved or state_discarded renderings "
                    "of tir_sft_dataset)", config=TIRSFTCheckpointConfig),
    CheckpointFamily(
        "chain_sft_checkpoint", "sft", "chain_sft.cpu", (), ("chain_sft",),
        description="SFT on multi-step arithmetic chains (builtin:chain_sft, generated: no "
                    "upstream data), the start of claims that need answers several steps long",
        config=ChainSFTCheckpointConfig),
    CheckpointFamily(
        "process_grpo_checkpoint", "grpo", "process_grpo.cpu", ("step_instances",),
        ("process_grpo",), parent="tir_sft_checkpoint",
        description="process-supervised GRPO on MOSAIC step_instances, started from the TIR "
                    "SFT checkpoint", config=ProcessGRPOCheckpointConfig),
)


def host_check_overrides(mode: str, overrides: list[str]) -> list[str]:
    """The overrides the Dagster host checks a recipe with before launching it. A model path
    handed to a pod lives on the pod's volume, not here, so k8s mode leaves it out; a job that
    runs elsewhere (k8s, slurm) has its GPU there, so the host checks everything but the
    device (``bf16`` needs a CUDA GPU where the check runs)."""
    local = overrides if mode != "k8s" else [
        o for o in overrides if not o.startswith("model_name_or_path=")]
    return [*local, "bf16=false"] if mode in ("k8s", "slurm") else list(local)


def check_recipe(kind: str, recipe: str, overrides: list[str]):
    """The resolved config, or a dg.Failure naming the bad field (nothing is launched)."""
    from training.config import load_config
    from training.config_recipes import RecipeError

    try:
        return load_config(recipe, overrides, expect_kind=kind)
    except RecipeError as exc:
        raise dg.Failure(description=f"bad training recipe: {exc}") from exc


def dataset_asset(spec: str) -> str | None:
    """The asset that produces what a dataset spec reads: ``warehouse:T[/partition][?…]`` → T;
    ``problems:S[?…]`` → ``S_problems``, the ingest asset of source S (training loads the
    source with the same ``pipelines.ingest.load_source``, not through the merged
    ``problems`` table); None for data that no asset produces (``builtin:…``, files, the
    hub)."""
    scheme, _, rest = spec.partition(":")
    target = rest.split("?", 1)[0]
    if scheme == "warehouse" and target:
        return target.split("/", 1)[0]
    if scheme == "problems" and target:
        return f"{target}_problems"
    return None


def launch_arm(context: dg.AssetExecutionContext, trainer: TrainerLauncher, wh: Any, label: str,
               recipe: str, overrides: list[str], kind: str = "grpo"
               ) -> tuple[str, str, list[dict[str, Any]]]:
    """One arm of a comparison (GRPO arms of the DUET sweep and the Engagement budget table,
    SFT arms of the SxS and MOSAIC claims: ``kind``) through the trainer launcher:
    (checkpoint id, checkpoint path, its ``train_metrics`` rows)."""
    invocation = trainer.launch(context, kind, recipe, overrides)
    meta = invocation.get_materialize_result().metadata or {}
    if "checkpoint_id" not in meta or "checkpoint_path" not in meta:
        raise dg.Failure(f"arm {label}: the training script reported no checkpoint")
    checkpoint_id = str(meta["checkpoint_id"].value)
    rows = wh.read("train_metrics", partition=checkpoint_id).to_pylist()
    return checkpoint_id, str(meta["checkpoint_path"].value), rows


def data_lineage(family: CheckpointFamily, config: Any) -> dict[str, Any]:
    """Metadata saying which data the run really trained on, and whether it is one of the
    asset's upstream assets (a recipe of another family, or a built-in fallback, is not)."""
    spec = str(getattr(config, "dataset", "") or "")
    fallback = str(getattr(config, "dataset_fallback", "") or "")
    source = dataset_asset(spec)
    meta: dict[str, Any] = {
        "dataset": spec,
        "upstream_data": dg.MetadataValue.json(list(family.data)),
        "dataset_is_upstream": source in family.data,
    }
    if fallback:
        meta["dataset_fallback"] = fallback
    return meta





def evaluation_links(checkpoint_id: str, instance: dg.DagsterInstance | None = None
                     ) -> dict[str, Any]:
    """Links to the evaluation partitions of a registered checkpoint (one per suite benchmark),
    shown on the checkpoint's asset page. With ``instance``, the checkpoint's ``models``
    partition is added there first, so every link opens a partition that exists (without it,
    Dagster would fall back to another model's page). The text is written once, when the
    checkpoint is materialized, so it states no evaluation state that a later run changes."""
    from urllib.parse import quote

    if instance is not None and not instance.has_dynamic_partition(model_partitions.name,
                                                                   checkpoint_id):
        instance.add_dynamic_partitions(model_partitions.name, [checkpoint_id])
    keys = [f"{bench}|{checkpoint_id}" for bench in eval_suite()]
    links = [f"[{key}](/assets/eval_samples?view=partitions&partition={quote(key, safe='')})"
             for key in keys]
    return {"evaluation_partitions": dg.MetadataValue.md(
                "Evaluation partitions of this checkpoint, one per suite benchmark (each "
                "partition's page says whether and when it was evaluated; `models_sensor`, "
                "`nightly_eval` or a run started by hand evaluates them): " + ", ".join(links)),
            "evaluation_asset": dg.MetadataValue.asset(dg.AssetKey("eval_samples"))}


def _run(context: dg.AssetExecutionContext, kind: str, recipe: str, overrides: list[str],
         trainer: TrainerLauncher, warehouse: WarehouseResource,
         extra_metadata: dict[str, Any] | None = None,
         family: CheckpointFamily | None = None) -> dg.MaterializeResult:
    started = now()
    config = check_recipe(kind, recipe, host_check_overrides(trainer.mode, overrides))
    lineage_meta: dict[str, Any] = {}
    if family is not None:
        lineage_meta = data_lineage(family, config)
        if str(lineage_meta["dataset"]).startswith("builtin:"):
            # generated by training/data.py, not read from any asset: nothing for lineage to miss
            context.log.info(f"{family.name} trains on the built-in dataset "
                             f"{lineage_meta['dataset']!r} (generated, no upstream asset)")
        elif not lineage_meta["dataset_is_upstream"]:
            context.log.warning(
                f"{family.name} trains on {lineage_meta['dataset']!r}, which is not one of its "
                f"upstream assets {list(family.data)}; the graph's lineage does not cover this "
                f"run (recipes of this family: {', '.join(family.recipes)})")
    settings = {"recipe": recipe, "overrides": overrides}
    invocation = trainer.launch(context, kind, recipe, overrides)
    reported = invocation.get_materialize_result()
    metadata = dict(reported.metadata or {})
    metadata.update(extra_metadata or {})
    metadata.update(lineage_meta)
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
        metadata.update(evaluation_links(checkpoint_id, context.instance))
    metadata.update(lineage_metadata(model_lineage(warehouse.get(), checkpoint_id)))
    return dg.MaterializeResult(metadata=metadata)


def start_from_overrides(context: dg.AssetExecutionContext, start_from: str,
                         overrides: list[str]) -> list[str]:
    """``overrides`` plus ``model_name_or_path=<path>`` of the latest materialization of the
    checkpoint asset ``start_from`` (e.g. ``sft_checkpoint``), so every arm of a comparison
    starts from that one checkpoint; ``overrides`` unchanged when ``start_from`` is empty."""
    if not start_from:
        return list(overrides)
    if context.instance.get_latest_materialization_event(dg.AssetKey(start_from)) is None:
        raise dg.Failure(f"start_from={start_from!r}: it has no materialization yet; "
                         f"materialize {start_from} first (`make demo` trains the SFT "
                         "checkpoint), or set start_from to '' to start from the recipe's model")
    start, _ = latest_checkpoint(context, start_from)
    context.log.info(f"every arm starts from {start_from}: {start}")
    return [*overrides, f"model_name_or_path={start}"]


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


def checkpoint_asset(family: CheckpointFamily) -> dg.AssetsDefinition:
    """The Dagster asset of one recipe family: upstream edges from its data (and its parent
    checkpoint), the family's default recipe, and the shared Pipes launch of :func:`_run`."""
    deps = [dg.AssetKey(name) for name in family.data]
    if family.parent:
        deps.append(dg.AssetKey(family.parent))
    trained = ("TRL SFT on a prompt/completion table" if family.kind == "sft"
               else "RL with verifiable or process rewards")
    description = (f"A checkpoint of {family.description} ({trained}); recipes "
                   f"{', '.join(family.recipes)}; trained through Dagster Pipes; rows in "
                   "train_metrics and checkpoints; registered as a model for evaluation.")
    config_cls = family.config
    if config_cls.model_fields["recipe"].default != family.default_recipe:
        raise ValueError(f"{family.name}: its config's default recipe differs from "
                         f"{family.default_recipe!r}")

    @dg.asset(name=family.name, deps=deps, group_name="train", kinds={"pytorch", "python"},
              description=description)
    def _checkpoint(context: dg.AssetExecutionContext, config: config_cls,  # type: ignore[valid-type]
                    trainer: TrainerLauncher, warehouse: WarehouseResource) -> dg.MaterializeResult:
        recipe = config.recipe
        overrides = list(config.overrides)
        extra: dict[str, Any] = {}
        if family.kind == "grpo" and family.parent and config.from_sft:
            path, parent = latest_checkpoint(context, family.parent)
            overrides = [f"model_name_or_path={path}", f"parent_checkpoint={parent}", *overrides]
            extra["started_from"] = dg.MetadataValue.path(path)
        return _run(context, family.kind, recipe, overrides, trainer, warehouse, extra, family)

    return _checkpoint


CHECKPOINT_ASSETS = {family.name: checkpoint_asset(family) for family in FAMILIES}
sft_checkpoint = CHECKPOINT_ASSETS["sft_checkpoint"]
grpo_checkpoint = CHECKPOINT_ASSETS["grpo_checkpoint"]
tir_sft_checkpoint = CHECKPOINT_ASSETS["tir_sft_checkpoint"]
process_grpo_checkpoint = CHECKPOINT_ASSETS["process_grpo_checkpoint"]
TRAINING_ASSETS = list(CHECKPOINT_ASSETS.values())
