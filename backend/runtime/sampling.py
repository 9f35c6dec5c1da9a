"""Choosing the next token from logits: greedy at temperature 0, else seeded temperature + top-p.

Shared by every strategy so that the same seed gives the same choices everywhere. Sampling runs
on the CPU (a [V] float32 copy, ~0.6 MB at the 152k Qwen vocabulary) so a seed reproduces the
same draws on CPU and GPU.
"""

from __future__ import annotations

import torch


def make_generator(seed: int | None) -> torch.Generator:
    """A CPU generator seeded with `seed` (None: a fresh nondeterministic seed)."""
    generator = torch.Generator(device="cpu")
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator


def sample_token(
    logits: torch.Tensor, temperature: float = 0.0, top_p: float = 1.0, generator: torch.Generator | None = None
) -> int:
    """The next token id from logits [V]: argmax when temperature == 0; else a draw from
    softmax(logits / temperature) restricted to the smallest set of top tokens whose probability
    reaches top_p. Rejects temperature < 0 and top_p outside (0, 1] (ValueError). Changes no state
    except the generator's."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, not {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], not {top_p}")
    if temperature == 0:
        return int(torch.argmax(logits).item())
    probs = torch.softmax(logits.detach().float().cpu() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        drop = cumulative - sorted_probs >= top_p  # keeps the first token always
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator).item())
