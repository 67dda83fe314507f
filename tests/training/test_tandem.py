"""Tandem rollouts (training/tandem.py) on the embedded model, CPU, short generations.

Each property is checked against an independent computation: a full no-cache forward of the
final sequence (lockstep), a plain one-model sampling loop written here from the documented draw
contract (p = 1 / p = 0), and a replay of the A.1.2 schedule written here from the emitted tokens
and the seeded coins (handoff positions, stats, reproducibility). The junior is a seeded
perturbed copy of the senior so that the two models really differ.
"""

from __future__ import annotations

import itertools
import math
import types

import pytest
import torch

from training import tandem as T

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


# --------------------------------------------------------------------------------------------
# lockstep


def test_lockstep_incremental_logits_equal_a_full_forward(pair):
    _, senior, junior, _, _, prompts = pair
    out = run(pair, seeds=[3, 4], keep_logits=True)
    assert len(out.logits) == 2
    assert any(0 < s.senior_tokens < s.tokens for s in out.stats), "both models must write"
    for model, kept in zip((senior, junior), out.logits):
        for row, (prompt, completion) in enumerate(zip(prompts, out.completion_ids)):
            seq = torch.tensor([prompt + completion])
            with torch.no_grad():
                full = model(input_ids=seq).logits[0].float()
            start = len(prompt) - 1
            expected = full[start:start + len(completion)]
            assert torch.allclose(kept[row, :len(completion)], expected, atol=2e-3, rtol=1e-4), \
                (row, (kept[row, :len(completion)] - expected).abs().max())


# --------------------------------------------------------------------------------------------
# p = 1 / p = 0 against plain one-model sampling


def plain_sampling(model, prompt, seed, steps, eos):
    """One model, no cache, no batch: token t is the first id whose cumulative probability
    exceeds u_t times the total, u_t = torch.rand(2, steps, seed)[0, t] (the module's contract)."""
    u = torch.rand(2, steps, generator=torch.Generator().manual_seed(seed))[0]
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
def test_extreme_probabilities_equal_solo_rollouts(pair, senior_prob, author):
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
# handoff schedule (A.1.2), replayed from the emitted tokens and the seeded coins


def replay_schedule(tokens, seed, steps, senior_prob, span_cap, boundary):
    coins = torch.rand(2, steps, generator=torch.Generator().manual_seed(seed))[1]
    author = T.SENIOR if coins[0] < senior_prob else T.JUNIOR
    authors, since, boundary_draws, cap_redraws = [], 0, 0, 0
    for t, token in enumerate(tokens):
        authors.append(author)
        if t + 1 == len(tokens):
            break
        if token in boundary:
            since, redraw = 0, True
            boundary_draws += 1
        else:
            since += 1
            redraw = since >= span_cap
            if redraw:
                since = 0
                cap_redraws += 1
        if redraw:
            author = T.SENIOR if coins[t + 1] < senior_prob else T.JUNIOR
    handoffs = sum(a != b for a, b in itertools.pairwise(authors))
    return authors, handoffs, boundary_draws, cap_redraws


def test_handoffs_only_at_word_initial_tokens_or_the_span_cap(pair):
    _, _, _, ids, _, _ = pair
    seeds, cap = [21, 22], 2
    out = run(pair, seeds=seeds, span_cap=cap, steps=16)
    total_handoffs = total_caps = 0
    for row, seed in enumerate(seeds):
        tokens, authors = out.completion_ids[row], out.authorship[row]
        expected, handoffs, b_draws, c_draws = replay_schedule(tokens, seed, 16, 0.5, cap, ids)
        assert authors == expected
        stats = out.stats[row]
        assert (stats.handoffs, stats.boundary_draws, stats.cap_redraws) == \
            (handoffs, b_draws, c_draws)
        assert stats.senior_tokens == sum(authors) and stats.tokens == len(tokens)
        # the direct statement: every author change follows a word-initial token or a full span
        last_draw = -1
        for t in range(1, len(tokens)):
            prev_boundary = tokens[t - 1] in ids
            span = t - 1 - last_draw
            if authors[t] != authors[t - 1]:
                assert prev_boundary or span >= cap, (t, tokens[:t + 1])
            if prev_boundary or span >= cap:
                last_draw = t - 1
        total_handoffs += handoffs
        total_caps += c_draws
    assert total_handoffs > 0 and total_caps > 0, "the run must exercise both kinds of redraw"


def test_same_seed_same_authorship_whatever_the_batch(pair):
    *_, prompts = pair
    both = run(pair, seeds=[31, 32])
    alone = run(pair, seeds=[32], prompts=[prompts[1]])
    assert alone.completion_ids[0] == both.completion_ids[1]
    assert alone.authorship[0] == both.authorship[1]
    other = run(pair, seeds=[33], prompts=[prompts[1]])
    assert (other.authorship[0], other.completion_ids[0]) != \
        (both.authorship[1], both.completion_ids[1])


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
def test_alternating_schedule_flips_at_every_boundary_and_nowhere_else(pair, senior_first):
    # The word-initial set stands in for the step set here: it fires often in a short run,
    # and the alternation rule does not depend on which set it is given.
    tok, senior, junior, ids, mask, prompts = pair
    out = T.tandem_generate(
        senior, junior, prompts, seeds=[41, 42], boundary=mask, max_new_tokens=STEPS,
        eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
        handoff=T.HandoffParams(alternate=True, span_cap=None, senior_first=senior_first))
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
    # boundary ids {1, 2}, EOS 9, cap 2: row 0 ends on EOS, which completes a 2-token span;
    # the row is over, so that is not a redraw. Row 1 keeps the batch going.
    scripts = [[1, 3, 9], [1, 3, 4, 5, 6]]
    boundary = T.boundary_mask([1, 2], 10)
    out = T.tandem_generate(Scripted(scripts), Scripted(scripts), [[0], [0]], seeds=[1, 2],
                            boundary=boundary, max_new_tokens=5, eos_token_ids=[9],
                            pad_token_id=0, handoff=T.HandoffParams(span_cap=2))
    assert out.completion_ids == [[1, 3, 9], [1, 3, 4, 5, 6]]
    first, second = out.stats
    assert (first.boundary_draws, first.cap_redraws) == (1, 0)
    # row 1: draw after 1 (boundary), cap after 3,4, cap after 5,6 is past the end
    assert (second.boundary_draws, second.cap_redraws) == (1, 1)
