"""Tandem rollouts (training/tandem/core.py) on the embedded model, CPU, short generations.

Each property is checked against an independent computation: a full no-cache forward of the
final sequence in float64 (lockstep), a plain one-model sampling loop written here from the
documented draw contract (p = 1 / p = 0), a replay of the §3.3 / A.1.2 schedule written here
from the emitted tokens and the seeded coins (handoff positions, stats, reproducibility), and
word splits counted on the real tokenizer's text. The junior is a seeded perturbed copy of the
senior so that the two models really differ.
"""

from __future__ import annotations

import copy
import itertools
import math
import types

import pytest
import torch

from training.tandem import core as T

PROMPTS = ["The capital of France is", "Compute 1234 * 5678 and explain the steps:"]
STEPS = 12


@pytest.fixture(scope="module")
def threads():
    old = torch.get_num_threads()
    torch.set_num_threads(1)   # the shared CPU: see training/config.py torch_threads
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def pair(embedded_model_dir, threads, load_model_pair):
    tok, senior, junior = load_model_pair(embedded_model_dir, seed=0)
    ids = T.boundary_ids(tok)
    mask = T.boundary_mask(ids, senior.config.vocab_size)
    prompts = [tok.encode(p) for p in PROMPTS]
    return tok, senior, junior, ids, mask, prompts


def run(pair, *, seeds, prompts=None, senior_prob=0.5, span_cap=8, steps=STEPS, **kw):
    tok, senior, junior, _, mask, default_prompts = pair
    return T.tandem_generate(
        senior, junior, prompts or default_prompts, seeds=seeds, boundary=mask,
        max_new_tokens=steps, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
        handoff=T.HandoffParams(senior_prob=senior_prob, span_cap=span_cap), **kw)


# --------------------------------------------------------------------------------------------
# boundary set


def test_embedded_boundary_set_is_the_tokens_that_decode_with_a_leading_space(pair):
    tok, _, _, ids, _, _ = pair
    assert T.word_marker(tok) == "Ġ"
    pieces = tok.convert_tokens_to_ids
    for word_initial in ("Ġthe", "Ġword", "Ġmultiplication", "Ġx", "Ġ"):
        assert pieces(word_initial) in ids, word_initial
    for continuation in (",", ".", "1", "^", "the", "ing", tok.eos_token):
        assert pieces(continuation) not in ids, continuation
    # Independent of the marker: byte-level BPE writes a leading space as the marker, so the set
    # is exactly the ids whose decoded text starts with a space.
    spaced = {i for i in range(len(tok)) if tok.decode([i]).startswith(" ")}
    assert spaced == set(ids)


class FakeTokenizer:
    def __init__(self, vocab, splitter):
        self.vocab, self.splitter = vocab, splitter

    def encode(self, text, add_special_tokens=False):
        return [self.vocab[p] for p in self.splitter(text)]

    def convert_ids_to_tokens(self, ids):
        inverse = {i: p for p, i in self.vocab.items()}
        return [inverse[i] for i in ids]

    def get_vocab(self):
        return dict(self.vocab)


def test_sentencepiece_marker_resolved_and_unknown_tokenizer_refused():
    words = T._PROBE.split()
    sp_vocab = {"▁" + w: i for i, w in enumerate(dict.fromkeys(words))}
    sp_vocab.update({"ing": 90, "▁▁": 91, "x": 92})
    sp = FakeTokenizer(sp_vocab, lambda text: ["▁" + w for w in text.split()])
    assert T.word_marker(sp) == "▁"
    assert T.boundary_ids(sp) == {i for p, i in sp_vocab.items() if p[0] == "▁"}
    plain_vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    plain = FakeTokenizer(plain_vocab, lambda text: text.split())
    with pytest.raises(T.TandemError, match="pass boundary ids explicitly"):
        T.word_marker(plain)


def test_bad_parameters_are_refused_with_the_field_named():
    with pytest.raises(T.TandemError, match="senior_prob"):
        T.HandoffParams(senior_prob=1.5)
    with pytest.raises(T.TandemError, match="span_cap"):
        T.HandoffParams(span_cap=0)
    with pytest.raises(T.TandemError, match="top_p"):
        T.SamplingParams(top_p=0.0)
    with pytest.raises(T.TandemError, match="boundary ids"):
        T.boundary_mask([5, 70000], 49152)
    with pytest.raises(T.TandemError, match="unit must be one of"):
        T.HandoffParams(unit="sentence")


# --------------------------------------------------------------------------------------------
# lockstep


@pytest.fixture(scope="module")
def pair64(pair):
    """The pair in float64: the batched, left-padded, cached forward and the plain one agree
    to ~1e-12 there, while in float32 they differ by ~1e-4 in the logits, enough to move an
    inverse-CDF pick whose uniform falls within ~1e-6 of a CDF step (seen on the embedded
    model: the reference picked id 267, a float32 tandem run 273)."""
    tok, senior, junior, ids, mask, prompts = pair
    return (tok, copy.deepcopy(senior).double(), copy.deepcopy(junior).double(), ids, mask,
            prompts)


def test_lockstep_incremental_logits_equal_a_full_forward(pair64):
    # float64 models: the cached, batched, left-padded incremental logits must equal a plain
    # full forward up to float64 rounding (float32 would hide a cache slip of ~1e-3 in noise)
    tok, senior, junior, _, mask, prompts = pair64
    out = T.tandem_generate(
        senior, junior, prompts, seeds=[3, 4], boundary=mask, max_new_tokens=STEPS,
        eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id, keep_logits=True)
    assert len(out.logits) == 2 and out.logits[0].dtype == torch.float64
    assert any(0 < s.senior_tokens < s.tokens for s in out.stats), "both models must write"
    for model, kept in zip((senior, junior), out.logits):
        for row, (prompt, completion) in enumerate(zip(prompts, out.completion_ids)):
            seq = torch.tensor([prompt + completion])
            with torch.no_grad():
                full = model(input_ids=seq).logits[0]
            start = len(prompt) - 1
            expected = full[start:start + len(completion)]
            gap = (kept[row, :len(completion)] - expected).abs().max()
            assert gap < 1e-7, (row, gap)


# --------------------------------------------------------------------------------------------
# p = 1 / p = 0 against plain one-model sampling


def plain_sampling(model, prompt, seed, steps, eos):
    """One model, no cache, no batch: token t is the first id whose cumulative probability
    exceeds u_t times the total, u_t = torch.rand(2, steps, seed)[0, t] (the module's contract)."""
    u = torch.rand(3, steps, generator=torch.Generator().manual_seed(seed))[0]
    seq, out = list(prompt), []
    for t in range(steps):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([seq])).logits[0, -1].double()
        cdf = torch.softmax(logits, dim=-1).cumsum(0)
        token = int((cdf > u[t] * cdf[-1]).nonzero()[0])
        out.append(token)
        seq.append(token)
        if token == eos:
            break
    return out


@pytest.mark.parametrize("senior_prob, author", [(1.0, T.SENIOR), (0.0, T.JUNIOR)])
def test_extreme_probabilities_equal_solo_rollouts(pair64, senior_prob, author):
    pair = pair64
    tok, senior, junior, _, _, prompts = pair
    seeds = [11, 12]
    out = run(pair, seeds=seeds, senior_prob=senior_prob)
    solo_model, other = (senior, junior) if author == T.SENIOR else (junior, senior)
    for row, seed in enumerate(seeds):
        expected = plain_sampling(solo_model, prompts[row], seed, STEPS, tok.eos_token_id)
        assert out.completion_ids[row] == expected
        assert out.authorship[row] == [author] * len(expected)
        assert out.stats[row].handoffs == 0
    # the two models really differ, so the check above could tell them apart
    assert any(out.completion_ids[row] != plain_sampling(other, prompts[row], seed, STEPS,
                                                         tok.eos_token_id)
               for row, seed in enumerate(seeds))


# --------------------------------------------------------------------------------------------
# handoff schedule (§3.3, A.1.2), replayed from the emitted tokens and the seeded coins


def replay_schedule(tokens, seed, steps, senior_prob, span_cap, word_initial):
    """§3.3 / A.1.2 transcribed: the first token's author is the coin of position 0; a token
    that begins a word gets the coin of its own position; after `span_cap` non-word-initial
    tokens since the last draw, the next token gets its coin; any other token keeps the author
    of the token before it. `word_initial(token)` says whether a token begins a word."""
    coins = torch.rand(3, steps, generator=torch.Generator().manual_seed(seed))[1]
    authors, since, boundary_draws, cap_redraws = [], 0, 0, 0
    for t, token in enumerate(tokens):
        drawn = True
        if t == 0:
            pass
        elif span_cap is not None and since >= span_cap:
            cap_redraws += 1
        elif word_initial(token):
            boundary_draws += 1
        else:
            drawn = False
        if drawn:
            authors.append(T.SENIOR if coins[t] < senior_prob else T.JUNIOR)
            since = 0
        else:
            authors.append(authors[-1])
            since += 1
    handoffs = sum(a != b for a, b in itertools.pairwise(authors))
    return authors, handoffs, boundary_draws, cap_redraws


def test_handoffs_only_at_word_initial_tokens_or_the_span_cap(pair):
    _, _, _, ids, _, _ = pair
    seeds, cap = [21, 22], 2
    out = run(pair, seeds=seeds, span_cap=cap, steps=16)
    total_handoffs = total_caps = 0
    for row, seed in enumerate(seeds):
        tokens, authors = out.completion_ids[row], out.authorship[row]
        expected, handoffs, b_draws, c_draws = replay_schedule(
            tokens, seed, 16, 0.5, cap, lambda token: token in ids)
        assert authors == expected
        stats = out.stats[row]
        assert (stats.handoffs, stats.boundary_draws, stats.cap_redraws) == \
            (handoffs, b_draws, c_draws)
        assert stats.senior_tokens == sum(authors) and stats.tokens == len(tokens)
        total_handoffs += handoffs
        total_caps += c_draws
    assert total_handoffs > 0 and total_caps > 0, "the run must exercise both kinds of redraw"


SPLIT_PROMPTS = [
    "Factorize x^2 - 5x + 6 and simplify \\frac{x^2 - 4}{x - 2}. Show the factorization:",
    "Explain the decomposition of the polynomial into irreducible factors, with LaTeX:",
    "Parametrization and differentiation of \\sqrt{1 + \\tan^2\\theta}:",
]


def test_no_word_is_split_between_authors_on_real_tokenizer_output(pair):
    """§3.3: a handoff happens only where a new orthographic word begins, so the incoming model
    always writes a word-initial token and no word ( factor|ization,  \\|frac) is split.
    Counted on the decoded text of the real tokenizer, independently of the boundary set."""
    tok = pair[0]
    prompts = [tok.encode(p) for p in SPLIT_PROMPTS]
    seeds, steps = [51, 52, 53], 24
    out = run(pair, seeds=seeds, prompts=prompts, span_cap=None, steps=steps,
              sampling=T.SamplingParams(temperature=1.0))
    handoffs = non_initial = split = multi_piece_words = 0
    for row, seed in enumerate(seeds):
        tokens, authors = out.completion_ids[row], out.authorship[row]
        pieces = [tok.decode([t]) for t in tokens]
        expected, *_ = replay_schedule(tokens, seed, steps, 0.5, None,
                                       lambda token: tok.decode([token]).startswith(" "))
        assert authors == expected
        for t in range(1, len(tokens)):
            glued = not pieces[t][:1].isspace() and pieces[t][:1] not in ("", ".", ",")
            multi_piece_words += glued and pieces[t - 1][-1:].isalnum()
            if authors[t] != authors[t - 1]:
                handoffs += 1
                non_initial += not pieces[t].startswith(" ")
                split += glued and (pieces[t - 1][-1:].isalnum() or pieces[t - 1][-1:] == "\\")
    assert handoffs >= 5 and multi_piece_words >= 3, (handoffs, multi_piece_words)
    assert non_initial == 0 and split == 0, (non_initial, split, handoffs)


class FixedDistribution(torch.nn.Module):
    """The same next-token log-probabilities at every position (a (V,) tensor)."""

    def __init__(self, logprobs):
        super().__init__()
        self.logprobs = torch.tensor(logprobs, dtype=torch.float32)
        self.head = torch.nn.Linear(1, len(logprobs), bias=False)

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, **_):
        b, n = input_ids.shape
        return types.SimpleNamespace(logits=self.logprobs.expand(b, n, -1).clone())


def test_the_incoming_author_writes_the_word_initial_token_from_its_own_distribution():
    # vocabulary 0..4, word-initial ids {1, 2}. The senior only ever writes word-initial 1; the
    # junior writes 3 (not word-initial) with probability 0.9 and word-initial 2 with 0.1. So a
    # handoff senior -> junior hands the junior a word-initial token, which it must draw from
    # its own distribution restricted to word-initial tokens: always 2, never 3 and never the
    # senior's 1. (Under a rule that switched after the word-initial token, the junior's first
    # token would be its unrestricted 3 nine times out of ten.)
    inf = math.inf
    senior = FixedDistribution([-inf, 0.0, -inf, -inf, -inf])
    junior = FixedDistribution([-inf, -inf, math.log(0.1), math.log(0.9), -inf])
    seeds = list(range(20))
    out = T.tandem_generate(senior, junior, [[0]] * len(seeds), seeds=seeds,
                            boundary=T.boundary_mask([1, 2], 5), max_new_tokens=12,
                            eos_token_ids=[4], pad_token_id=0,
                            handoff=T.HandoffParams(span_cap=None))
    to_junior = to_senior = 0
    for row, seed in enumerate(seeds):
        tokens, authors = out.completion_ids[row], out.authorship[row]
        expected, *_ = replay_schedule(tokens, seed, 12, 0.5, None, lambda t: t in (1, 2))
        assert authors == expected
        for t, (token, author) in enumerate(zip(tokens, authors)):
            if author == T.SENIOR:
                assert token == 1
            else:
                assert token in (2, 3)
            if t and authors[t - 1] == T.SENIOR and author == T.JUNIOR:
                assert token == 2, (seed, t, tokens, authors)
                to_junior += 1
            if t and authors[t - 1] == T.JUNIOR and author == T.SENIOR:
                to_senior += 1
    assert to_junior >= 10 and to_senior >= 3, (to_junior, to_senior)


def test_rollout_seeds_differ_between_steps_calls_processes_and_rows():
    seen = {}
    for step in range(6):
        for call in range(3):
            for process in range(3):
                seeds = T.rollout_seeds(7, step, call, process, 8)
                assert len(seeds) == 8
                for row, seed in enumerate(seeds):
                    assert seed not in seen, (seen.get(seed), (step, call, process, row))
                    seen[seed] = (step, call, process, row)
    # reproducible from the run's seed; another run seed gives other seeds
    assert T.rollout_seeds(7, 3, 1, 2, 8) == T.rollout_seeds(7, 3, 1, 2, 8)
    assert not set(T.rollout_seeds(8, 0, 0, 0, 8)) & set(seen)
    # different seeds give different draws (token uniforms and coins)
    a, b = T.rollout_seeds(7, 0, 0, 0, 1)[0], T.rollout_seeds(7, 1, 0, 0, 1)[0]
    assert not torch.equal(T.rollout_draws(a, 16), T.rollout_draws(b, 16))
    with pytest.raises(T.TandemError, match="call must be in"):
        T.rollout_seeds(7, 0, 64, 0, 8)
    with pytest.raises(T.TandemError, match="process must be in"):
        T.rollout_seeds(7, 0, 0, 256, 8)


def test_seeder_gives_fresh_seeds_at_every_training_step_and_call():
    # what TandemGRPOTrainer._rollout_seeds asks for: one call per step, sometimes two
    seeder = T.RolloutSeeder(seed=5, process=1)
    calls = [(step, seeder.seeds(step, 4)) for step in (0, 0, 1, 2, 2, 2)]
    flat = [s for _, seeds in calls for s in seeds]
    assert len(set(flat)) == len(flat), "a seed repeated across steps or calls"
    # numbered per step (0, 1 at step 0; 0, 1, 2 at step 2): the formula, written out here
    def first(step, call):
        return (((5 * 1_000_003 + step) * 64 + call) * 256 + 1) * 65_536

    assert [seeds[0] for _, seeds in calls] == [first(0, 0), first(0, 1), first(1, 0),
                                                first(2, 0), first(2, 1), first(2, 2)]
    assert T.RolloutSeeder(seed=5, process=1).seeds(0, 4) == calls[0][1]   # reproducible


# --------------------------------------------------------------------------------------------
# the evaluation schedule of §4.3: alternate at every reasoning-step boundary


def test_step_boundary_ids_are_the_tokens_holding_a_blank_line(pair):
    tok = pair[0]
    ids = T.step_boundary_ids(tok)
    for piece in ("ĊĊ", "ĠĊĊ", "ĊĊĊ"):
        assert tok.convert_tokens_to_ids(piece) in ids, piece
    for piece in ("Ċ", "Ġthe", ".", "ĊĠ"):
        assert tok.convert_tokens_to_ids(piece) not in ids, piece


@pytest.mark.parametrize("senior_first", [True, False])
def test_alternating_step_schedule_flips_after_every_boundary_and_nowhere_else(pair,
                                                                               senior_first):
    # The word-initial set stands in for the step set here: it fires often in a short run,
    # and the alternation rule does not depend on which set it is given. Step unit: the
    # author of a step writes its closing token; the other model starts the next step.
    tok, senior, junior, ids, mask, prompts = pair
    out = T.tandem_generate(
        senior, junior, prompts, seeds=[41, 42], boundary=mask, max_new_tokens=STEPS,
        eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
        handoff=T.HandoffParams(unit="step", alternate=True, span_cap=None,
                                senior_first=senior_first))
    flips = 0
    for tokens, authors in zip(out.completion_ids, out.authorship):
        expected, author = [], T.SENIOR if senior_first else T.JUNIOR
        for token in tokens:
            expected.append(author)
            if token in ids:
                author = T.JUNIOR if author == T.SENIOR else T.SENIOR
        assert authors == expected
        flips += sum(a != b for a, b in itertools.pairwise(authors))
    assert flips > 0


# --------------------------------------------------------------------------------------------
# scripted models: exact control of the emitted tokens


class Scripted(torch.nn.Module):
    """Emits row r's script[r][t] at step t with certainty (logit 0 there, -inf elsewhere)."""

    def __init__(self, scripts, vocab=10):
        super().__init__()
        self.scripts, self.vocab = scripts, vocab
        self.head = torch.nn.Linear(1, vocab, bias=False)
        self.calls = 0

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, **_):
        step, self.calls = self.calls, self.calls + 1
        logits = torch.full((input_ids.size(0), input_ids.size(1), self.vocab), -math.inf)
        for row, script in enumerate(self.scripts):
            logits[row, -1, script[min(step, len(script) - 1)]] = 0.0
        return types.SimpleNamespace(logits=logits)


def test_a_finished_row_takes_no_further_draws():
    # word-initial ids {1, 2}, EOS 9, cap 2: row 0 draws at its word-initial 1, then 4 and the
    # EOS complete a 2-token span; the row is over, so there is no cap draw after it. Row 1
    # keeps the batch going: a draw at 1, 4 and 5 fill the span, 6 is drawn by the cap.
    scripts = [[3, 1, 4, 9], [3, 1, 4, 5, 6, 7]]
    boundary = T.boundary_mask([1, 2], 10)
    out = T.tandem_generate(Scripted(scripts), Scripted(scripts), [[0], [0]], seeds=[1, 2],
                            boundary=boundary, max_new_tokens=6, eos_token_ids=[9],
                            pad_token_id=0, handoff=T.HandoffParams(span_cap=2))
    assert out.completion_ids == [[3, 1, 4, 9], [3, 1, 4, 5, 6, 7]]
    first, second = out.stats
    assert (first.boundary_draws, first.cap_redraws) == (1, 0)
    assert (second.boundary_draws, second.cap_redraws) == (1, 1)
