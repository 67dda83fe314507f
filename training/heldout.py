"""The held-out one-digit arithmetic set the demo and the training claims score models on,
and the sampler that scores them.

``heldout_arith`` draws problems of ``training.data.builtin_arith1`` that no given recipe trains
on (``training_problems`` reads each recipe's dataset spec); ``sample_scores`` gives each
problem's avg@k: ``k`` completions sampled with transformers on the CPU from the boxed-format
prompt GRPO trains on, each graded by the reward's own grader (``training.rewards.is_correct``).

Not guaranteed: that this agrees with an evaluation through a served model (``eval.recorded``):
it samples in process, writes no ``eval_samples`` rows and no ``runs`` row.
"""

from __future__ import annotations

from typing import Any

DEMO_SFT_RECIPE = "demo_sft"  # the demo's SFT recipe: its problems are never held out
HELDOUT_SEED = 1
HELDOUT_TEMPERATURE = 1.0  # the GRPO sampling temperature: the score GRPO's reward estimates
HELDOUT_MAX_TOKENS = 32  # = demo_grpo's max_completion_length


def problem_text(row: dict[str, Any]) -> str:
    """The problem of a training row: its ``problem`` column, or the last user message of its
    ``prompt`` (SFT rows)."""
    if "problem" in row:
        return str(row["problem"])
    from training.data import as_messages

    prompt = as_messages(row["prompt"], "prompt")
    if isinstance(prompt, str):
        return prompt
    return [m["content"] for m in prompt if m["role"] == "user"][-1]


def training_problems(runs: list[tuple[str, list[str]]]) -> set[str]:
    """Every problem text the (recipe, overrides) runs train on (read through their dataset
    specs)."""
    from training.config import load_config
    from training.data import load_dataset

    seen: set[str] = set()
    for recipe, overrides in runs:
        config = load_config(recipe, overrides)
        data = load_dataset(config.dataset, fallback=config.dataset_fallback,
                            limit=config.dataset_limit, seed=config.seed)
        seen.update(problem_text(r) for r in data.rows)
    return seen


def heldout_arith(n: int, seed: int = HELDOUT_SEED, exclude: set[str] | frozenset[str] = frozenset()
                  ) -> list[dict]:
    """``n`` one-digit problems (``training.data.builtin_arith1``, all 207 in the order of
    ``seed``) whose text is not in ``exclude`` (the training problems)."""
    from training.data import ARITH1_SIZE, builtin_arith1

    if n < 2:
        raise ValueError(f"held-out problems: need at least 2 for a paired test, got {n}")
    rows = [r for r in builtin_arith1(ARITH1_SIZE, seed) if r["problem"] not in exclude]
    if len(rows) < n:
        raise ValueError(f"only {len(rows)} one-digit problems are left after excluding the "
                         f"{len(exclude)} training problems; ask for at most {len(rows)}")
    return rows[:n]


def sample_scores(model_path: str, rows: list[dict], *, k: int, temperature: float,
                  max_new_tokens: int, seed: int = 0, batch_size: int = 32,
                  threads: int = 1) -> dict[str, float]:
    """avg@k per problem: ``k`` sampled completions per problem from the model at
    ``model_path`` (transformers, CPU, the boxed-format prompt GRPO trains on), each graded by
    ``training.rewards.is_correct`` (the reward's grader). Deterministic for a given seed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.data import grpo_examples
    from training.rewards import is_correct

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    prompts = [tokenizer.apply_chat_template(e["prompt"], tokenize=False,
                                             add_generation_prompt=True)
               for e in grpo_examples(rows, "boxed")]
    torch.manual_seed(seed)
    scores: dict[str, float] = {}
    for start in range(0, len(rows), batch_size):
        batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True,
                          add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**batch, do_sample=True, temperature=temperature, top_p=1.0,
                                 top_k=0, max_new_tokens=max_new_tokens, num_return_sequences=k,
                                 pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:],
                                       skip_special_tokens=True)
        for i, row in enumerate(rows[start:start + batch_size]):
            right = sum(is_correct(t, row["answer"], "boxed") for t in texts[i * k:(i + 1) * k])
            scores[row["problem_id"]] = right / k
    return scores
