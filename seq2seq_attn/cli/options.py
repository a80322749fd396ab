"""Options that several verbs share, declared once: the trained model, the device, eval-section defaults."""

from __future__ import annotations

from typing import Any

import typer

from ..config import EvalConfig, TrainConfig, choices_enum

Device = choices_enum(TrainConfig, "device")


MODEL_HELP = "Run directory (its best checkpoint) or a checkpoint file in a run's checkpoints/ folder."


def model_option() -> Any:
    """`--model/-m RUN`: a trained run (its best checkpoint) or one of its checkpoint files."""
    return typer.Option(..., "--model", "-m", help=MODEL_HELP, show_default=False)


def models_option() -> Any:
    """`--model/-m RUN`, repeatable: several runs make an ensemble (ensemble.py)."""
    help = (
        f"{MODEL_HELP} Repeat it to translate with the ensemble of several runs: the mean of their "
        "log-probabilities, the first run's decode settings (the runs must share the target vocabulary)."
    )
    return typer.Option(..., "--model", "-m", help=help, show_default=False)


def device_option() -> Any:
    return typer.Option(Device.auto, "--device", help="auto uses CUDA when available.")


def run_default_option(key: str, flag: str, help: str, **kwargs: Any) -> Any:
    """A typer option for `eval` key `key` with no default of its own: when it is left out, the `eval`
    section of the --model run's config applies (the schema's default without a run), as its help says."""
    default = getattr(EvalConfig(), key)
    shown = ",".join(map(str, default)) if isinstance(default, list) else default
    help = f"{help} Default: the --model run's eval.{key}, else {shown}."
    return typer.Option(None, flag, help=help, show_default=False, **kwargs)
