"""The training card: the Markdown summary `train` writes beside the adapter (TRAINING_CARD.md)
from the same data as training.json. Formatting only; standard library."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def mean_changed_loss(points: list[dict[str, Any]]) -> float | None:
    values = [p["changed_loss"] for p in points if p.get("changed_loss") is not None]
    return round(sum(values) / len(values), 5) if values else None


def training_card(card: dict[str, Any]) -> str:
    config, data = card["config"], card.get("data_manifest") or {}
    curve = card["curve"]
    marks = [curve[i] for i in sorted({0, len(curve) // 4, len(curve) // 2, 3 * len(curve) // 4, len(curve) - 1})] if curve else []
    rows = "\n".join(f"| {p['step']} | {p['tokens']} | {p['seconds'] / 60:.1f} | {p['loss']:.4f} | {loss_text(p.get('changed_loss'))} |"
                     for p in marks)
    return f"""# Training card: {Path(config['out']).name}

LoRA adapter for `{config['base_model']}` that writes copy-as-decode programs ({config.get('prompt', 'zero-shot')} prompt).

- Data: `{config['data']}` ({card['examples']} examples fit {config['max_tokens']} tokens, {card['skipped_too_long']} skipped),
  generator version {data.get('generator_version')}, counts {json.dumps(data.get('counts', {}))}
- LoRA r={config['rank']} alpha={config['alpha']} dropout={config['dropout']} on {', '.join(config['targets'])}; {config.get('attention', 'sdpa')} attention
- Loss weight of the tokens that write the edit: {config.get('changed_weight', 1.0)}
- Times per epoch by kind: {_kind_weights_text(config.get('kind_weights'))}
- lr {config['lr']} (warm-up {config['warmup_steps']}, cosine to 10% at step {config['max_steps']}),
  {config['examples_per_step']} sequences per step, seed {config['seed']}
- Ran {card['steps']} steps ({'finished' if card['finished'] else 'stopped early by ' + str(card.get('stopped_by'))}), {card['examples_seen']} examples,
  {card['tokens_seen']} tokens in {card['wall_seconds'] / 60:.1f} min ({card['tokens_per_second']} tokens/s){_packing_text(card)}
- Machine: {json.dumps(card['machine'])}
- Adapter: {card['adapter_bytes']} bytes (float16 safetensors)

| step | tokens | minutes | loss per program token | loss on the tokens that write the edit |
|---|---|---|---|---|
{rows}
"""


def _packing_text(card: dict[str, Any]) -> str:
    """How much packing saved: the examples' own tokens against the tokens computed (none unpacked)."""
    pack, unpacked = card["config"].get("pack", 1), card.get("example_tokens_seen")
    if pack <= 1 or not unpacked:
        return ""
    seconds = max(card["wall_seconds"], 1e-9)
    return (f";\n  packed up to {pack} edits of a window per prompt: the examples hold {unpacked} tokens "
            f"({unpacked / seconds:.1f} example tokens/s, {unpacked / max(1, card['tokens_seen']):.2f}x the tokens computed)")


def _kind_weights_text(weights: Any) -> str:
    return ", ".join(f"{kind} {times}" for kind, times in weights) + ", others 1" if weights else "1 (every kind once)"


def loss_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
