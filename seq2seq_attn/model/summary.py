"""Parameter counts per module, so model sizes can be compared with the paper and with other toolkits."""

from __future__ import annotations

from torch import nn

from ..config import ModelConfig


def count_parameters(module: nn.Module) -> int:
    """Distinct parameters (a tied weight counts once)."""
    return sum(p.numel() for p in module.parameters())


def parameter_table(model: nn.Module) -> list[tuple[str, int, bool]]:
    """(module path, parameters, shares a weight counted above) for each part of the encoder and decoder.

    A tied weight is counted once, under the first module that holds it, so the rows add up to the total.
    """
    seen: set[int] = set()
    rows = []
    for part_name, part in model.named_children():
        for name, child in part.named_children():
            params = list(child.parameters())
            if not params:
                continue
            new = [p for p in params if id(p) not in seen]
            seen.update(id(p) for p in new)
            rows.append((f"{part_name}.{name}", sum(p.numel() for p in new), len(new) < len(params)))
    return rows


def describe(model: nn.Module, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> str:
    """A one-line summary, the module tree, and the parameter table with its total."""
    direction = "bidirectional " if cfg.bidirectional else ""
    encoder = f"{cfg.encoder_layers} x {direction}{cfg.cell} {cfg.hidden_size}"
    headline = (
        f"{cfg.decoder} decoder ({cfg.decoder_layers} x {cfg.cell} {cfg.decoder_hidden_size}), attention "
        f"{cfg.attention}, encoder {encoder}; vocabulary {src_vocab_size} -> {tgt_vocab_size}"
    )
    rows = parameter_table(model)
    width = max(len(name) for name, _, _ in rows) + 2
    lines = [headline, "", repr(model), "", f"{'module':<{width}}{'parameters':>14}"]
    for name, count, shared in rows:
        lines.append(f"{name:<{width}}{count:>14,}" + ("  (+ tied weight counted above)" if shared else ""))
    lines.append(f"{'total':<{width}}{count_parameters(model):>14,}")
    return "\n".join(lines)
