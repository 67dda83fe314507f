"""``handoff``: Tandem RL §4.3 handoff robustness (run by ``eval.handoff_team``, format ``boxed``).

The evaluated model (senior) and a partner model (``handoff_partner``, the junior) take turns
at every ``"\\n\\n"`` reasoning step of one shared answer, strictly alternating or by a seeded
draw per step (``handoff_schedule``: ``alternate`` | ``bernoulli`` with ``handoff_p``, App.
B.3), with the senior or the junior writing the first step (``handoff_starts``). The client
passed to the runner is an ``eval.handoff_team.HandoffTeam`` of the two clients. Before any job,
``prepare`` checks that each HTTP endpoint keeps the step's stop string in the text (vLLM's
continuation fields; ``eval.handoff_team.HandoffTeam.check_endpoints``) and refuses the run with
``eval.handoff_team.HandoffServerError`` otherwise. Rows add the authorship columns of
``eval.handoff_team.handoff_generate`` and ``partner``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from eval.handoff_team import HandoffTeam, check_handoff_settings, handoff_generate
from eval.modes.base import Job, Mode, Run, register_mode
from pipelines.formats import BOXED


@register_mode
@dataclass(frozen=True)
class HandoffMode(Mode):
    """The senior and ``handoff_partner`` write one answer step by step."""

    name: ClassVar[str] = "handoff"
    answer_format: ClassVar[str] = BOXED

    handoff_partner: str = ""  # the partner's label (default: the junior client's model)
    handoff_starts: str = "senior"  # senior | junior
    handoff_schedule: str = "alternate"  # alternate (§4.3) | bernoulli (App. B.3)
    handoff_p: float = 0.5  # bernoulli: the senior's probability at each step

    def __post_init__(self) -> None:
        check_handoff_settings(self.handoff_schedule, self.handoff_starts, self.handoff_p)

    async def prepare(self, run: Run, jobs: list[Job]) -> None:
        if not isinstance(run.client, HandoffTeam):
            raise TypeError("handoff mode needs a HandoffTeam(senior=client, junior=client) as "
                            f"the client (eval.handoff_team), got {type(run.client).__name__}")
        await run.client.check_endpoints(tag=f"{run.tag}/endpoint-check")

    async def generate(self, run: Run, job: Job, messages: list[dict[str, Any]],
                       params: Any) -> dict[str, Any]:
        out = await handoff_generate(run.client, messages, params,
                                     schedule=self.handoff_schedule, starts=self.handoff_starts,
                                     p=self.handoff_p, tag=run.tag, sample_index=job.variant)
        out["partner"] = self.handoff_partner or getattr(run.client.junior, "model", None)
        return out
