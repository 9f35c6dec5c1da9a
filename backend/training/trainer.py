"""LoRA training of the embedded model on copy-as-decode programs, on a CPU or a GPU.

    train(TrainConfig(data="var/data/train.jsonl", out="adapters/smollm2-135m-cad"))

- peft LoRA on every linear layer of the base model (measured on this 2-core CPU with bf16 autocast:
  LoRA ~490 tokens/s, full fine-tune ~270, LoRA in fp32 ~185; see ../shared/STACK.md).
- Loss on program tokens only (`examples`); each optimizer step averages over the program tokens
  of `examples_per_step` sequences (batch 1 each: no padding is ever computed). `changed_weight` > 1
  weights the tokens of a gen that write text unlike the lines it replaces (a weighted mean), the
  tokens the shipped model gets wrong when its program changes nothing; the curve also records the
  loss on those tokens alone.
- `kind_weights` (KIND, N): each example of KIND appears N times in an epoch's order (0 leaves the
  kind out; unnamed kinds 1), to spend a short run on the kinds the model gets wrong.
- `prompt`: the prompt layout examples are encoded in (zero-shot, or instruction-first: the
  instruction also before the numbered input); training.json records it and loading the adapter
  uses it.
- `pack` K > 1: up to K examples of one window (same prompt) in one packed forward, the shared
  prompt computed once (packing.py, packed_forward.py; same loss and gradient). `tokens_seen`
  counts the tokens computed, `example_tokens` the same examples unpacked.
- bf16 autocast on a CPU that supports it, CUDA when present; seeded data order and dropout.
- A checkpoint (adapter + optimizer + schedule + data position + loss curve) every
  `checkpoint_every` steps, written to a temporary directory and renamed, so a killed run resumes
  (`resume=True`) from the last complete checkpoint; a checkpoint made with other settings (any but
  where and how long the run goes; the data compared by hash) is refused. `max_minutes` stops
  cleanly with a checkpoint; so does Ctrl-C or SIGTERM (after the step in progress, then the
  adapter and card are written as for a finished run; a second signal aborts at once).
- At the end: the adapter in float16 safetensors (a few MB), `training.json` (config, data manifest
  hash, loss curve, tokens, wall time, machine) and TRAINING_CARD.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backend.training.card import loss_text, mean_changed_loss, training_card
from backend.training.examples import IGNORE, Example, encode_example
from backend.training.packing import gather_by_key, group_runs, pack
from backend.training.stop_request import StopRequest

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class TrainConfig:
    data: str                        # train.jsonl written by make-data
    out: str                         # the adapter directory
    base_model: str = "smollm2-135m"
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0             # LoRA dropout; 0.05 (runs 1-10) spent ~25% of a CPU step drawing its masks
    lr: float = 4e-4
    warmup_steps: int = 15
    max_steps: int = 250             # the learning-rate schedule's horizon and the step limit
    examples_per_step: int = 8
    max_tokens: int = 2048           # longer sequences are skipped (counted in the card)
    checkpoint_every: int = 10
    max_minutes: float | None = None
    seed: int = 0
    threads: int | None = None
    targets: tuple[str, ...] = field(default=LORA_TARGETS)
    init_adapter: str | None = None  # warm start: a saved adapter (same rank and targets) to continue from
    changed_weight: float = 1.0      # loss weight of the tokens that write the edit (Example.changed); 1 = plain mean
    kind_weights: tuple[tuple[str, int], ...] = ()  # (kind, times per epoch); unnamed kinds once
    prompt: str = "zero-shot"        # the prompt style examples are laid out in (runtime.prompt.PROMPT_STYLES)
    attention: str = "eager"         # "eager" or "sdpa": eager trained 1.33x faster on a 2-core CPU (<= 768 tokens)
    pack: int = 1                    # up to this many examples of one window per forward (packing.py); 1 = off


def _file_sha256(path: str | Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def load_records(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def encode_records(tokenizer: Any, records: list[dict[str, Any]], *, eos_id: int, max_tokens: int,
                   style: str = "zero-shot") -> tuple[list[Example], int]:
    """Encoded examples (in prompt `style`) no longer than `max_tokens`, and how many were skipped as too long."""
    examples = [encode_example(tokenizer, record, eos_id=eos_id, style=style) for record in records]
    kept = [e for e in examples if len(e.input_ids) <= max_tokens]
    return kept, len(examples) - len(kept)


def epoch_order(examples: list[Example], kind_weights: tuple[tuple[str, int], ...], seed: int) -> list[int]:
    """Example indices for one epoch, seeded-shuffled: each example as often as its kind's weight.
    Rejects (ValueError) a weighted kind with no example, a negative weight, or an empty epoch."""
    weights = dict(kind_weights)
    check_kind_weights(kind_weights, {e.kind for e in examples})
    order = [index for index, example in enumerate(examples) for _ in range(weights.get(example.kind, 1))]
    if not order:
        raise ValueError("every kind has weight 0: nothing to train on")
    random.Random(f"train:{seed}").shuffle(order)
    return order


def check_kind_weights(kind_weights: tuple[tuple[str, int], ...], present: set[str]) -> None:
    """ValueError for a weighted kind absent from the data (`present` kinds) or a negative weight."""
    for kind, times in kind_weights:
        if kind not in present:
            raise ValueError(f"--kind-weight {kind}: no training example of that kind (kinds: {', '.join(sorted(present))})")
        if times < 0:
            raise ValueError(f"--kind-weight {kind}={times}: a weight is a count of 0 or more")


def learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at `max_steps`."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def lora_model(base: Any, config: TrainConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout,
                      target_modules=list(config.targets), task_type="CAUSAL_LM")
    return get_peft_model(base, lora)


def autocast_context(device: Any) -> Any:
    """bf16 autocast where it pays (CUDA; a CPU with AVX512-bf16/AMX), else a no-op context."""
    import contextlib

    import torch

    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class Run:
    """One training run's mutable state: model, optimizer, data order, position, loss curve."""

    def __init__(self, config: TrainConfig, examples: list[Example], model: Any, device: Any) -> None:
        import torch

        self.config, self.examples, self.model, self.device = config, examples, model, device
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=0.0)
        self.order = self.gathered(epoch_order(examples, config.kind_weights, config.seed))
        self.step = 0
        self.position = 0
        self.curve: list[dict[str, Any]] = []  # step, loss, tokens, seconds, changed_loss (None: no edit tokens)
        self.tokens_seen = 0      # tokens the forwards computed (a packed prefix once)
        self.example_tokens = 0   # the same examples' tokens unpacked
        self.seconds = 0.0
        self.data_sha256 = _file_sha256(config.data)

    def next_batch(self) -> list[Example]:
        batch = []
        for _ in range(self.config.examples_per_step):
            if self.position >= len(self.order):  # a new epoch: reshuffle, seeded by the epoch
                self.position = 0
                random.Random(f"train:{self.config.seed}:{self.step}").shuffle(self.order)
                self.order = self.gathered(self.order)
            batch.append(self.examples[self.order[self.position]])
            self.position += 1
        return batch

    def gathered(self, order: list[int]) -> list[int]:
        """With packing, the examples of one window moved next to each other in the data order."""
        return gather_by_key(order, [e.prefix_key for e in self.examples]) if self.config.pack > 1 else order

    def train_step(self) -> tuple[float, float | None]:
        """One optimizer step over `examples_per_step` sequences; returns the mean program-token loss
        and the mean loss of the changed tokens (None when the batch has none)."""
        import torch

        batch = self.next_batch()
        masks = [self.changed_mask(e) for e in batch]
        weights = [1.0 + (self.config.changed_weight - 1.0) * mask.float() for mask in masks]  # [K] each
        total_weight = sum(w.sum().item() for w in weights)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config, self.step)
        plain_sum, changed_sum, changed_count = 0.0, 0.0, 0
        first = 0
        for group in group_runs(batch, max(1, self.config.pack)):
            losses = self.group_losses(group)
            part = range(first, first + len(group))
            ((sum((losses[i - first] * weights[i]).sum() for i in part)) / max(1e-9, total_weight)).backward()
            for i in part:
                plain_sum += losses[i - first].sum().item()
                changed_sum += losses[i - first][masks[i]].sum().item()
                changed_count += int(masks[i].sum().item())
            self.example_tokens += sum(len(e.input_ids) for e in group)
            first += len(group)
        torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        plain = plain_sum / max(1, sum(e.program_tokens for e in batch))
        return plain, (changed_sum / changed_count if changed_count else None)

    def group_losses(self, group: list[Example]) -> list[Any]:
        """Per example of `group` (one prompt prefix), the [K] losses at its program tokens: one
        packed forward for several that share a prefix (packed_forward.py), else one each."""
        if len(group) > 1:
            packed = pack(group)
            if packed.prefix > 0:
                from backend.training.packed_forward import packed_token_losses

                self.tokens_seen += len(packed.input_ids)
                return packed_token_losses(self.model, packed, self.device, autocast_context(self.device))
        self.tokens_seen += sum(len(e.input_ids) for e in group)
        return [self.token_losses(e) for e in group]

    def token_losses(self, example: Example) -> Any:
        """Cross-entropy [K] at each of the example's program tokens. Logits are computed only at the
        positions that predict a program token (~50 of ~1000): the full [T, 49152] logits and their
        softmax were a large share of a CPU step."""
        import torch

        positions = [i - 1 for i, label in enumerate(example.labels) if label != IGNORE and i > 0]
        ids = torch.tensor([example.input_ids], device=self.device)                      # [1, T]
        targets = torch.tensor([example.labels[i + 1] for i in positions], device=self.device)  # [K]
        with autocast_context(self.device):
            out = self.model(input_ids=ids, logits_to_keep=torch.tensor(positions, device=self.device), use_cache=False)
        return torch.nn.functional.cross_entropy(out.logits[0].float(), targets, reduction="none")  # logits [K, V]

    def changed_mask(self, example: Example) -> Any:
        """[K] bool: which program tokens write the edit (all False for examples encoded without it)."""
        import torch

        flags = [bool(example.changed[i]) if example.changed else False
                 for i, label in enumerate(example.labels) if label != IGNORE and i > 0]
        return torch.tensor(flags, dtype=torch.bool, device=self.device)

    # -- checkpoints ------------------------------------------------------------------------------

    def save_checkpoint(self, folder: Path) -> None:
        import torch

        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(str(tmp))
        torch.save({"optimizer": self.optimizer.state_dict(), "step": self.step, "position": self.position,
                    "order": self.order, "curve": self.curve, "tokens_seen": self.tokens_seen,
                    "example_tokens": self.example_tokens, "seconds": self.seconds, "torch_rng": torch.get_rng_state(),
                    "config": _comparable(self.config), "data_sha256": self.data_sha256}, tmp / "state.pt")
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(tmp, folder)

    def load_checkpoint(self, folder: Path) -> None:
        import torch

        load_adapter_weights(self.model, folder)
        state = torch.load(folder / "state.pt", weights_only=False)
        changed = resume_mismatches(state, self.config, self.data_sha256)
        if changed:
            raise ValueError(f"--resume {folder}: the checkpoint was made with other settings ({'; '.join(changed)}); "
                             "resume with the same ones, or start a new run in another --out")
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.position, self.order = state["step"], state["position"], state["order"]
        self.curve, self.tokens_seen, self.seconds = state["curve"], state["tokens_seen"], state["seconds"]
        self.example_tokens = state.get("example_tokens", self.tokens_seen)  # older checkpoints: never packed
        torch.set_rng_state(state["torch_rng"])


# What a resumed run may change: where and how long it runs, not what it learns from or how.
RESUMABLE_CHANGES = frozenset({"out", "data", "max_steps", "max_minutes", "checkpoint_every", "threads"})


def _comparable(config: TrainConfig) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(config)))  # tuples as lists, as a reloaded config has them


def resume_mismatches(state: dict[str, Any], config: TrainConfig, data_sha256: str | None) -> list[str]:
    """The settings a checkpoint's `state` was saved with that differ from `config` (the data by its
    hash, so a moved file still resumes); empty for a checkpoint older than this check."""
    saved = state.get("config") or {}
    now = _comparable(config)
    changed = [f"{key} {saved[key]!r} -> {value!r}" for key, value in now.items()
               if key not in RESUMABLE_CHANGES and key in saved and saved[key] != value]
    if state.get("data_sha256") and data_sha256 and state["data_sha256"] != data_sha256:
        changed.append(f"training data {config.data} is not the file the checkpoint trained on (sha256 differs)")
    return changed


def load_adapter_weights(model: Any, folder: Path) -> None:
    """Copy a saved adapter's weights into `model`'s LoRA layers (a warm start; rank and targets must match)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        raise ValueError(f"--init-adapter {folder}: no adapter_model.safetensors there")
    result = set_peft_model_state_dict(model, load_file(str(weights)))
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"--init-adapter {folder}: its layers do not match this LoRA configuration")


def save_adapter(model: Any, out: Path) -> int:
    """The adapter in float16 safetensors plus its peft config; returns the weights file's size."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in get_peft_model_state_dict(model).items()}
    save_file(state, str(out / "adapter_model.safetensors"))
    model.peft_config["default"].save_pretrained(str(out))
    return (out / "adapter_model.safetensors").stat().st_size


def progress_line(run: Run, loss: float, started_tokens: int, started: float) -> str:
    rate = (run.tokens_seen - started_tokens) / max(1e-9, time.perf_counter() - started)
    remaining = (run.config.max_steps - run.step) * run.config.examples_per_step * (run.tokens_seen / max(1, run.step * run.config.examples_per_step)) / max(rate, 1e-9)
    changed = run.curve[-1].get("changed_loss") if run.curve else None
    return (f"step {run.step}/{run.config.max_steps}  loss {loss:.4f}  edit-token loss {loss_text(changed)}  "
            f"lr {learning_rate(run.config, run.step - 1):.2e}  "
            f"{rate:.0f} tok/s  {run.example_tokens / max(1e-9, run.seconds):.0f} example tok/s  tokens {run.tokens_seen}  elapsed {run.seconds / 60:.1f} min  eta {remaining / 60:.1f} min")


def train(config: TrainConfig, *, resume: bool = False, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train (or resume) and write the adapter and its card to `config.out`; returns the card's data."""
    import torch

    from backend.measure.machine import machine_info
    from backend.runtime.models import load_model

    records = load_records(config.data)
    # a mistyped --kind-weight is caught before the model loads and the data is encoded (a minute)
    check_kind_weights(config.kind_weights, {str(r.get("kind", "")) for r in records})
    torch.manual_seed(config.seed)
    loaded = load_model(config.base_model, threads=config.threads)
    examples, skipped = encode_records(loaded.tokenizer, records, eos_id=loaded.eos_ids[0] if loaded.eos_ids else 2,
                                       max_tokens=config.max_tokens, style=config.prompt)
    if not examples:
        raise ValueError(f"{config.data}: no example fits in {config.max_tokens} tokens")
    # the same attention either way (test_training_run); only its speed differs
    loaded.model.set_attn_implementation(config.attention)
    model = lora_model(loaded.model, config)
    if config.init_adapter and not resume:
        load_adapter_weights(model, Path(config.init_adapter))
    model.train()
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(config, examples, model, loaded.device)
    checkpoint = out / CHECKPOINT
    if resume and (checkpoint / "state.pt").is_file():
        run.load_checkpoint(checkpoint)
        print(f"resumed at step {run.step} ({run.tokens_seen} tokens)", file=sys.stderr, flush=True)
    started, started_tokens = time.perf_counter(), run.tokens_seen
    base_seconds = run.seconds
    stopped_by = None
    with StopRequest() as stop:
        while run.step < config.max_steps:
            loss, changed_loss = run.train_step()
            run.seconds = base_seconds + time.perf_counter() - started
            run.curve.append({"step": run.step, "loss": round(loss, 5), "tokens": run.tokens_seen, "seconds": round(run.seconds, 1),
                              "changed_loss": None if changed_loss is None else round(changed_loss, 5)})
            print(progress_line(run, loss, started_tokens, started), file=sys.stderr, flush=True)
            out_of_time = config.max_minutes is not None and (time.perf_counter() - started) / 60 >= config.max_minutes
            stopped_by = stop.signal_name or ("max_minutes" if out_of_time else None)
            if run.step % config.checkpoint_every == 0 or stopped_by or run.step == config.max_steps:
                run.save_checkpoint(checkpoint)
            if stopped_by:
                break
    size = save_adapter(model, out)
    card = {
        "config": asdict(config), "examples": len(examples), "skipped_too_long": skipped,
        "steps": run.step, "finished": run.step >= config.max_steps, "stopped_by": stopped_by, "tokens_seen": run.tokens_seen,
        "example_tokens_seen": run.example_tokens, "examples_seen": run.step * config.examples_per_step, "wall_seconds": round(run.seconds, 1),
        "tokens_per_second": round(run.tokens_seen / max(run.seconds, 1e-9), 1), "adapter_bytes": size,
        "loss_first": run.curve[0]["loss"] if run.curve else None,
        "loss_last_10": round(sum(p["loss"] for p in run.curve[-10:]) / max(1, len(run.curve[-10:])), 5) if run.curve else None,
        "changed_loss_last_10": mean_changed_loss(run.curve[-10:]),
        "curve": run.curve, "machine": machine_info(loaded.device), "data_manifest": manifest or {},
    }
    (out / "training.json").write_text(json.dumps(card, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (out / "TRAINING_CARD.md").write_text(training_card(card), encoding="utf-8")
    return card
