"""data_prep: the engine of the pipeline's data stage.

Problem sources (the built-in suite with reference Triton solutions, KernelBench from a local folder or the
Hugging Face dataset, synthesized op chains), decontamination of training problems against the eval
problems, the diversity filter, and role-tagged SFT examples for the three agents. `stage.run_data_stage`
runs it all and writes the stage's files; the Prefect task/flow around it lives in `tasks/` and `flows/`.

Modules: `builtin` (suite + manifest), `kernelbench` (loaders), `source_ast` (static analysis: interface,
operator signature, canonical tokens), `similarity` (fingerprints and scores), `decontam`, `diversity`,
`synthesis` + `synthesis_ops`, `verify` (in-process interpreter checks of trusted code), `sft`, `records`
(drop records), `stage`. Importing this package imports neither torch nor triton (they load on first use).

    from data_prep import builtin_problems, run_data_stage
"""

from data_prep.builtin import builtin_problems, default_heldout_ids
from data_prep.decontam import decontaminate
from data_prep.diversity import DiversityReport, diversity_filter
from data_prep.kernelbench import load_kernelbench, load_kernelbench_hf, problems_from_hf_rows
from data_prep.records import DropRecord
from data_prep.sft import build_sft_examples, load_trajectories
from data_prep.stage import DataStageOutputs, read_problems, run_data_stage
from data_prep.synthesis import SynthesisResult, synthesize, synthesize_with_report

__all__ = [
    "builtin_problems",
    "default_heldout_ids",
    "load_kernelbench",
    "load_kernelbench_hf",
    "problems_from_hf_rows",
    "synthesize",
    "synthesize_with_report",
    "SynthesisResult",
    "decontaminate",
    "diversity_filter",
    "DiversityReport",
    "build_sft_examples",
    "load_trajectories",
    "DropRecord",
    "run_data_stage",
    "DataStageOutputs",
    "read_problems",
]
