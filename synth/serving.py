"""Serving captures (vLLM-Ascend): the forwards a scheduler runs.

A serving capture has no profiler steps; each of its "steps" is one forward (execute_model) whose batch
the scheduler composed: whole prompts (prefill), one token per running request (decode), or prompt
chunks beside decodes (mixed, chunked prefill). ``vllm_schedule`` runs vLLM v1's chunked-prefill policy
over a fixed list of requests: every running request's decode token first, then waiting prompts (or
the rest of a chunked one) up to the token budget; each forward runs as FULL_AND_PIECEWISE runs it.
What the kernels of a forward look like is ``serving_kernels.py``'s. (No numpy here: the CLI's help
lists the scenarios.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from npuprof.synth.planting import Fault, Forward, Scenario

MAX_CAPTURE_TOKENS = 1024  # the largest batch a piecewise graph was captured for: bigger ones run eager
# the decode batches full graphs were captured for: vLLM's default capture list up to 256 (1, 2, 4, then
# every 8)
FULL_GRAPH_SIZES = (1, 2, 4, *range(8, 257, 8))


@dataclass(frozen=True)
class Request:
    """A request the scheduler serves: the forward it arrives before, its prompt and output tokens."""

    arrives: int
    prompt: int
    output: int


# a decode-heavy stretch: four prompts at once, then arrivals one by one, one prompt longer than the budget
REQUESTS = (
    Request(0, 600, 12),
    Request(0, 900, 20),
    Request(0, 400, 30),
    Request(0, 148, 16),
    Request(6, 1500, 14),
    Request(13, 700, 18),
    Request(20, 3000, 10),
    Request(27, 256, 9),
)
TOKEN_BUDGET = 2048  # max_num_batched_tokens
# a busier stretch: a dozen requests, then 30 and 50 more arrive at once, so the decode batch grows to 92
# and shrinks back as they finish
BURST_REQUESTS = (
    *[Request(0, 48, 45)] * 12,
    *[Request(8, 40, 25)] * 30,
    *[Request(16, 32, 20)] * 50,
)


def _graph(phase: str, tokens: int) -> str:
    """How FULL_AND_PIECEWISE runs a forward: a uniform decode as one full graph, a batch up to
    MAX_CAPTURE_TOKENS as graph pieces, a bigger one eager."""
    return "full" if phase == "decode" else "piecewise" if tokens <= MAX_CAPTURE_TOKENS else "eager"


def vllm_schedule(
    forwards: int = 40, requests: tuple[Request, ...] = REQUESTS, graphs: bool = True
) -> tuple[Forward, ...]:
    """The first ``forwards`` forwards vLLM v1's chunked-prefill scheduler runs for ``requests``: each
    running request's decode token first, then waiting prompts in arrival order up to TOKEN_BUDGET (a
    prompt that does not fit runs in chunks). A forward with decodes or a prompt's later chunk reads
    the KV cache (``decode`` / ``mixed``); one of whole prompts only is a ``prefill``. With ``graphs``,
    each runs as FULL_AND_PIECEWISE runs it (``_graph``); else every forward eager."""
    prefilled = [0] * len(requests)  # prompt tokens computed so far
    generated = [0] * len(requests)  # output tokens sampled so far
    schedule = []
    for forward in range(forwards):
        decodes = [i for i, r in enumerate(requests) if prefilled[i] == r.prompt and 0 < generated[i] < r.output]
        budget, chunks = TOKEN_BUDGET - len(decodes), []
        for i, r in enumerate(requests):
            if r.arrives <= forward and prefilled[i] < r.prompt and budget > 0:
                chunk = min(r.prompt - prefilled[i], budget)
                chunks.append((i, chunk, prefilled[i] > 0))
                budget -= chunk
        if not decodes and not chunks:
            break
        whole = not decodes and not any(continued or chunk < requests[i].prompt for i, chunk, continued in chunks)
        phase = "decode" if not chunks else "prefill" if whole else "mixed"
        tokens = len(decodes) + sum(chunk for _, chunk, _ in chunks)
        graph = _graph(phase, tokens) if graphs else "eager"
        # a full graph replays at the captured size next above the batch: the rest is padding
        padded = min(size for size in FULL_GRAPH_SIZES if size >= tokens) if graph == "full" else 0
        schedule.append(Forward(phase, tokens, len(decodes) + len(chunks), graph, graph_tokens=padded))
        for i in decodes:
            generated[i] += 1
        for i, chunk, _ in chunks:
            prefilled[i] += chunk
            generated[i] += prefilled[i] == requests[i].prompt  # the prompt's last chunk samples a token
    return tuple(schedule)


def captured_size(tokens: int, factor: float) -> int:
    """The batch size a full graph replays ``tokens`` at when graphs were captured only for the powers of
    ``factor`` (1, factor, factor², …): the smallest at or above ``tokens``; ``tokens`` itself for a factor
    of 1 (a graph for every batch size)."""
    size = 1
    while factor > 1.0 and size < tokens:
        size = max(round(size * factor), size + 1)
    return max(size, tokens)


def dp_schedule(forwards: int = 24, idle_until: int = 10) -> tuple[Forward, ...]:
    """Two data-parallel ranks of a MoE model: rank 0 serves ``vllm_schedule``'s forwards; rank 1 has no
    request for the first ``idle_until`` of them and runs a dummy forward of as many tokens in each (its
    expert exchanges must meet rank 0's), then serves the same batches."""
    return tuple(
        replace(forward, dummy_ranks=(1,)) if index < idle_until else forward
        for index, forward in enumerate(vllm_schedule(forwards))
    )


def tp_serving(
    name: str,
    description: str,
    faults: tuple[Fault, ...] = (),
    requests: tuple[Request, ...] = REQUESTS,
    layers: int = 4,
) -> Scenario:
    """A serving capture of the dense model of ``layers`` decoder layers on 2 tensor-parallel ranks:
    ``vllm_schedule``'s forwards of ``requests``, written without profiler steps as vLLM-Ascend's
    /start_profile leaves it; ``faults`` planted."""
    forwards = vllm_schedule(60, requests)
    return Scenario(
        name,
        description,
        training=False,
        phase="decode",
        ranks=2,
        layers=layers,
        micro_batches=1,
        forwards=forwards,
        steps=len(forwards),
        step_marks=False,
        faults=faults,
    )
