"""Training on a Slurm cluster, without Dagster: the batch script and the Slurm commands.

``pipelines.slurm.script`` builds the ``sbatch`` script of a training run (pure functions:
``#SBATCH`` lines named after sbatch's flags, the setup lines, one node running today's
training command, or ``srun accelerate launch`` across nodes with an optional node for TRL's vLLM
server). ``pipelines.slurm.jobs`` wraps ``sbatch``, ``scontrol``, ``squeue``, ``sacct`` and
``scancel``: submit, read a job's state (falling back to accounting once the controller has
forgotten the job), cancel. The Dagster Pipes client that submits a script and turns the job's
end into a materialization or a failure is ``assets.slurm_pipes``; ``docs/slurm.md`` says how
to use it all.
"""
