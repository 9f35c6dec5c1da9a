"""The forwards of a packed group (`backend.training.packing`): the shared prefix once, its keys and
values kept with their autograd history, then each branch on its own over a cache holding them.

Each branch attends to the prefix and its own earlier tokens at the positions it has unpacked, so
its logits are the unpacked ones; one backward over all branches' losses sends every branch's
gradient into the one prefix computation, where it sums as it does over separate sequences.
(Two other layouts compute the same and were slower on a 2-core CPU, in example tokens per second
against 253 unpacked and ~320 this way: one forward over the whole packed sequence with a [T, T]
block mask, 155 (attention over T = prefix + all branches); the branches batched, right-padded, over
the prefix expanded along the batch, 266 (padding and the expanded copies); training card.)
"""

from __future__ import annotations

from typing import Any

from backend.training.packing import Packed


def packed_token_losses(model: Any, packed: Packed, device: Any, autocast: Any) -> list[Any]:
    """Cross-entropy [K_i] at each example's program tokens, in the order `Run.token_losses` gives
    them unpacked; logits only at the predicting positions."""
    import torch
    from transformers import DynamicCache

    ids = torch.tensor([packed.input_ids], device=device)  # [1, T]
    p = packed.prefix
    rows: dict[int, Any] = {}  # packed position -> logits [V] there
    with autocast:
        in_prefix = sorted({q for q in packed.predict_at if q < p})
        prefix = model(input_ids=ids[:, :p], use_cache=True, logits_to_keep=torch.tensor(in_prefix or [p - 1], device=device))
        rows.update(zip(in_prefix, prefix.logits[0]))
        # transformers 5.24 returns the cache as `cache` (reading `past_key_values` logs a deprecation)
        kept = prefix.cache if getattr(prefix, "cache", None) is not None else prefix.past_key_values
        shared = [(layer.keys, layer.values) for layer in kept.layers]
        for start, end in packed.branches:
            wanted = [q for q in packed.predict_at if start <= q < end]
            if not wanted:
                continue
            cache = DynamicCache()
            for index, (keys, values) in enumerate(shared):  # update() concatenates: the prefix tensors stay as they are
                cache.update(keys, values, index)
            out = model(input_ids=ids[:, start:end], cache=cache, use_cache=True,
                        position_ids=torch.tensor([packed.position_ids[start:end]], device=device),
                        logits_to_keep=torch.tensor([q - start for q in wanted], device=device))
            rows.update(zip(wanted, out.logits[0]))
    logits = torch.stack([rows[q] for q in packed.predict_at]).float()  # [K, V]
    losses = torch.nn.functional.cross_entropy(logits, torch.tensor(packed.targets, device=device), reduction="none")
    counts = [packed.owner.count(index) for index in range(len(packed.examples))]
    return list(torch.split(losses, counts))
