"""Valid ranges of every numeric profile value, in one place, checked when a profile is loaded.

Types are checked by `loader.build` (from each section's dataclass annotations); this module adds ranges.
Choices:
- One rule per dotted key in `RANGES`; a key not listed gets `DEFAULT` (a finite number >= 0), so a new
  numeric field is range-checked from the day it is added. Tuples of numbers are checked item by item.
- A value out of range raises `ConfigError` naming the key, the value and the valid range, with the fix;
  the CLI prints it as one `error:` line and exits 2, before Prefect or MLflow start.
- A few cross-field rules (`CROSS_RULES`) where two values only make sense together.

    from davinci.config.schema import check_ranges
    check_ranges(profile)          # raises ConfigError on the first value out of range
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from davinci.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """A closed or half-open interval; `None` bounds are unbounded."""

    lo: float | None = 0
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        return not (self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi)))

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"
        return "a finite number"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


DEFAULT = Range(0)
AT_LEAST_1 = Range(1)
POSITIVE = Range(0, lo_open=True)
FRACTION = Range(0, 1)
ANY = Range(None)

RANGES: dict[str, Range] = {
    # data
    "data.decontam_threshold": FRACTION, "data.dedup_threshold": FRACTION, "data.kernelbench_levels": Range(1, 4),
    "data.synthetic_lengths": Range(1, 4),
    # model
    "model.tiny_hidden": AT_LEAST_1, "model.tiny_layers": AT_LEAST_1, "model.tiny_heads": AT_LEAST_1,
    "model.tiny_vocab": Range(256), "model.max_seq_len": Range(16), "model.lora_r": AT_LEAST_1,
    "model.lora_alpha": AT_LEAST_1, "model.lora_dropout": Range(0, 1, hi_open=True), "model.gen_batch_size": DEFAULT,
    "model.openai_timeout_s": POSITIVE, "model.openai_concurrency": AT_LEAST_1,
    "model.vllm_gpu_memory_utilization": Range(0, 1, lo_open=True), "model.vllm_tensor_parallel": AT_LEAST_1,
    # sft
    "sft.batch_size": AT_LEAST_1, "sft.max_len": Range(16), "sft.min_lr_ratio": FRACTION,
    # agents
    "agents.turns": AT_LEAST_1, "agents.group_size": AT_LEAST_1, "agents.max_new_tokens": AT_LEAST_1,
    "agents.temperature": POSITIVE, "agents.top_p": Range(0, 1, lo_open=True),
    "agents.selection_max_new_tokens": AT_LEAST_1, "agents.summary_max_new_tokens": AT_LEAST_1,
    # rl
    "rl.problems_per_epoch": DEFAULT,  # 0 = every training problem each epoch
    "rl.grad_accum": AT_LEAST_1, "rl.max_grad_norm": POSITIVE,
    "rl.clip_ratio": Range(0, 1), "rl.clip_ratio_high": Range(0, 1), "rl.speedup_cap": POSITIVE,
    "rl.gamma": FRACTION, "rl.batch_size": DEFAULT, "rl.update_processes": AT_LEAST_1, "rl.update_passes": AT_LEAST_1,
    "rl.adam_betas": Range(0, 1, hi_open=True), "rl.hack_penalty": ANY,
    "rl.logprob_chunk_rows": AT_LEAST_1, "rl.checkpoint_keep": AT_LEAST_1, "rl.start_state_fraction": FRACTION,
    # skills
    "skills.admission_reruns": AT_LEAST_1, "skills.duplicate_threshold": FRACTION,
    "skills.admission_workers": AT_LEAST_1, "skills.admission_timed_workers": AT_LEAST_1,
    "skills.min_speedup_lower": Range(0),
    # gym
    "gym.compile_timeout_s": POSITIVE, "gym.run_timeout_s": POSITIVE, "gym.correctness_trials": AT_LEAST_1,
    "gym.tol_half": POSITIVE, "gym.timing_ci_rel": POSITIVE, "gym.timing_min_reps": AT_LEAST_1,
    "gym.timing_max_reps": AT_LEAST_1, "gym.timing_max_s": POSITIVE, "gym.cpu_memory_limit_gb": POSITIVE,
    "gym.cpu_threads": AT_LEAST_1, "gym.roofline_margin": POSITIVE, "gym.min_kernel_coverage": FRACTION,
    "gym.build_dir_max_mb": AT_LEAST_1, "gym.build_cache_max_mb": AT_LEAST_1,
    # eval
    "eval.turns": AT_LEAST_1,
    # evolve
    "evolve.population": AT_LEAST_1, "evolve.children_per_generation": AT_LEAST_1, "evolve.crossover_rate": FRACTION,
    "evolve.archive_size": AT_LEAST_1, "evolve.revision_min_gain": Range(1),
    # tracking
    "tracking.trace_sample": FRACTION, "tracking.ui_port": Range(1, 65535),
}

# (description, predicate over the profile, fix)
CROSS_RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("evolve.diversity_slots must be < evolve.archive_size",
     lambda p: p.evolve.diversity_slots < p.evolve.archive_size, "lower evolve.diversity_slots or raise evolve.archive_size"),
    ("gym.timing_min_reps must be <= gym.timing_max_reps",
     lambda p: p.gym.timing_min_reps <= p.gym.timing_max_reps, "lower gym.timing_min_reps or raise gym.timing_max_reps"),
    ("gym.build_dir_max_mb must be <= gym.build_cache_max_mb",
     lambda p: p.gym.build_dir_max_mb <= p.gym.build_cache_max_mb,
     "lower gym.build_dir_max_mb or raise gym.build_cache_max_mb (the cache must hold one build folder)"),
    ("data.eval_source=synthetic_heldout needs data.synthetic_heldout >= 1",
     lambda p: p.data.eval_source != "synthetic_heldout" or p.data.synthetic_heldout >= 1,
     "set data.synthetic_heldout (how many op-chain problems to hold out), e.g. --set data.synthetic_heldout=8"),
)


def numeric_values(obj: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """(dotted key, value) for every int/float in a config, tuple items under their tuple's key."""
    for f in dataclasses.fields(obj):
        key = f"{path}.{f.name}" if path else f.name
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from numeric_values(value, key)
        elif isinstance(value, tuple):
            yield from ((key, v) for v in value if _is_number(v))
        elif _is_number(value):
            yield key, value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_ranges(profile: Any) -> None:
    """Raise `ConfigError` for the first value outside its range (or a broken cross-field rule)."""
    for key, value in numeric_values(profile):
        rule = RANGES.get(key, DEFAULT)
        if not rule.contains(float(value)):
            kind = "an integer" if isinstance(value, int) else "a number"
            raise ConfigError(
                f"{key} = {value!r} is out of range: it must be {rule.describe()}",
                f"set {key} to {kind} {rule.describe()} (in the profile YAML or with --set {key}=...)",
            )
    for description, ok, fix in CROSS_RULES:
        if not ok(profile):
            raise ConfigError(f"invalid profile: {description}", fix)
