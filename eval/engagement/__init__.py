"""The Engagement Process (EP) library and the paper's toy environments (Dagster-free, numpy).

- :mod:`.core`: the EP interface of §3.1 and §3.3 (intervention sets and the admissible sets of
  the current state, persistent timed actions, deliberation latency, event sets, per-tick
  utility, discount, horizon), the episode loop and event timelines.
- :mod:`.compose`: subsystems running at different rates on one timeline (§3-4).
- :mod:`.agents`: generic agents that read only the interface (random, first option).
- :mod:`.pager`: a small example environment written only against the interface.
- :mod:`.pomdp`: the synchronized POMDP loop as a special case (§3.2, App. B.4).
- :mod:`.deliberation`: urgency-aware deliberation, EP vs Step timing, Q-learning (§5.1.1).
- :mod:`.patrol`: hierarchical patrol with interruptions, Loop / Patch / PatchPro / EP (§5.1.2).
- :mod:`.tables`: the tables; their cells are ``eval.metrics.CI`` values (percentile bootstrap
  over evaluation episodes, rates as ratios of aggregates, paper App. C).
- :mod:`.assistant`: digital assistant with asynchronous emails, AgentLoop / Poll / EP (§5.2.1).
- :mod:`.kitchen`: embodied scheduling, AgentLoop / Poll / ReflexPatch / EP (§5.2.2).
- :mod:`.llm_policies` (LLM main-task outputs, triage, controller), :mod:`.llm_runs` (one
  comparison as rows), :mod:`.plots`, :mod:`.texts` (built-in tasks, emails, prompts pool).

Command line: ``python -m eval.engagement toy --env deliberation|patrol`` and
``python -m eval.engagement llm --env assistant|kitchen [--scripted]``.
Nothing is imported or run at package import time.
"""
