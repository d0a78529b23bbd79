"""What the library costs, against transformers and nnsight, on medium random checkpoints: one command, one table.

``python benchmarks/overhead.py [--rounds N] [--traces N] [--out FILE]`` builds
the medium LLaVA and Qwen3-VL checkpoints locally (`medium`) and writes a
Markdown table (to ``benchmarks/RESULTS.md`` and stdout) of:

- per forward, each variant timed round-robin over ``--rounds`` rounds after
  warm-up, under ``torch.no_grad()``: the plain transformers forward, the
  rewritten forward outside a trace, an empty trace (nnsight's model, and
  `StandardizedTransformer`, where the sites fire with no one waiting), a trace reading
  the vision values by standard name, and the same reads through nnsight's
  ``.source``; median, minimum, and the median of per-round ratios to the
  plain forward (paired: each round's variants ran back to back);
- the noise-free counts: interleaver visits per trace, site fires (visits at
  a ``.source`` location), the sites installed against the operations
  ``.source`` instruments in the forwards it is opened on; the standard-name
  reads of a trace, and the availability checks and location computations
  each makes;
- build: compiling the family's rules in a fresh process with an empty build
  cache (cold), with a warm one, and again in the same process;
  ``StandardizedTransformer(...)`` against nnsight's ``TransformersModel(...)``
  (weights loaded, ``dispatch=True``) on the same checkpoint, with a warm
  cache; ``import envoys`` against importing nnsight and transformers'
  processors alone, in fresh processes, what it adds after them in the same
  process, and the modules it imports beyond them (``-X importtime``);
- resident memory growth over ``--traces`` traces, after ten to warm up;
- under ``generate``: time and interleaver visits per decode step, against
  plain nnsight.

A benchmark, not a test: times vary with the machine and its load; the
ratios and counts are what to compare.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path[:0] = [str(REPOSITORY), str(HERE)]

import torch  # noqa: E402
import transformers  # noqa: E402
from medium import build_medium  # noqa: E402
from memory import resident_mib  # noqa: E402
from nnsight import TransformersModel  # noqa: E402
from transformers import AutoModelForImageTextToText, AutoProcessor  # noqa: E402

from envoys import StandardizedTransformer  # noqa: E402
from envoys.testing import chat_prompt, noise_image  # noqa: E402
from instrument import installed  # noqa: E402
from instrument.cache import ENVIRONMENT  # noqa: E402

#: Images per prompt for each medium checkpoint.
IMAGES = {"llava": 1, "qwen3_vl": 2}


# -- timing -----------------------------------------------------------------------------------------


def round_robin(runs: dict[str, Callable[[], object]], rounds: int, warmup: int = 2) -> dict[str, list[float]]:
    """Each run's times over ``rounds`` rounds, the runs back to back in each round, after ``warmup`` rounds."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for index in range(warmup + rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            if index >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def paired(times: dict[str, list[float]], name: str, base: str) -> float:
    """The median over rounds of ``name``'s time over ``base``'s in the same round."""
    return statistics.median(a / b for a, b in zip(times[name], times[base]))


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


# -- the variants -----------------------------------------------------------------------------------


def reads(family: str, model, native):
    """The standard-name trace body, the same reads through nnsight's ``.source``, the envoys whose ``.source``
    that opens before the trace, and the functions it drills into (one per drilled call)."""
    if family == "llava":
        tower = native.model.vision_tower.encoder.layers

        def standard() -> None:
            model.vision.image_token_mask.save()
            for i in range(model.vision.num_layers):
                model.vision.layers[i].self_attn.attention_probabilities.save()
                model.vision.layers[i].layer_output.save()
            model.vision.image_features.save()
            model.logits.save()

        def source() -> None:
            native.input.save()
            for layer in tower:
                layer.self_attn.source.attention_interface_1.source.nn_functional_softmax_0.output.save()
                layer.output.save()
            native.model.source.inputs_embeds_masked_scatter_0.input.save()
            native.output.logits.save()

        opened = [native.model] + [layer.self_attn for layer in tower]
        kernel = sys.modules[type(tower[0].self_attn._module).__module__].eager_attention_forward
        return standard, source, opened, [kernel] * len(tower)
    blocks = native.model.visual.blocks

    def standard() -> None:
        model.vision.image_token_mask.save()
        for i in range(model.vision.num_layers):
            model.vision.layers[i].self_attn.attention_head_outputs.save()
            model.vision.layers[i].layer_output.save()
        model.vision.image_features.save()
        model.logits.save()

    def source() -> None:
        native.input.save()
        for block in blocks:
            block.attn.source.torch_cat_0.output.save()
            block.output.save()
        native.model.source.inputs_embeds_masked_scatter_0.input.save()
        native.output.logits.save()

    return standard, source, [native.model] + [block.attn for block in blocks], []


def visits(model, run: Callable[[], None]) -> tuple[int, int]:
    """Interleaver visits in one run, and how many were at a ``.source`` location (site or op fires)."""
    counts = model._interleaver.counts if hasattr(model, "_interleaver") else model.interleaver.counts
    before = dict(counts)
    run()
    new = {key: value - before.get(key, 0) for key, value in counts.items()}
    return sum(new.values()), sum(value for key, value in new.items() if ".source." in key)


def subclasses(cls: type) -> list[type]:
    return [cls] + [c for sub in cls.__subclasses__() for c in subclasses(sub)]


def per_read(run: Callable[[], None]) -> tuple[int, float, float]:
    """Standard-name reads in one run of ``run``, and availability checks and location computations per read.

    Counts the outermost calls only (an override that calls its parent's counts
    once), of every value class of the library, while ``run`` runs.
    """
    from envoys.core.values import EProperty

    counts = {"__get__": 0, "check": 0, "_location": 0}
    depth = dict.fromkeys(counts, 0)
    replaced = []

    def counting(name: str, original: Callable) -> Callable:
        def counted(self, obj, *args, **kwargs):
            outermost = depth[name] == 0 and obj is not None
            counts[name] += outermost
            depth[name] += 1
            try:
                return original(self, obj, *args, **kwargs)
            finally:
                depth[name] -= 1
        return counted

    for cls in subclasses(EProperty):  # the library's own classes, restored below
        for name in counts:
            if name in vars(cls):
                replaced.append((cls, name, vars(cls)[name]))
                setattr(cls, name, counting(name, vars(cls)[name]))
    try:
        run()
    finally:
        for cls, name, original in replaced:
            setattr(cls, name, original)
    reads = counts["__get__"]
    return reads, counts["check"] / reads, counts["_location"] / reads


def operations(function) -> int:
    """The operations nnsight's ``.source`` instruments in a function (a forward, decorators peeled)."""
    from instrument.decorators import peel
    from instrument.naming import source_names

    innermost, _ = peel(function)
    return len(source_names(textwrap.dedent(inspect.getsource(innermost))).order)


def sites_installed(model) -> int:
    def count(instrumented) -> int:
        return len(instrumented.site_names) + sum(count(inner) for inner in instrumented.drills.values())

    return sum(count(i) for module in model._module.modules() for i in installed(module).values())


# -- build and import, in fresh processes ----------------------------------------------------------

BUILD = """
import json, sys, time
sys.path.insert(0, {repository!r})
from instrument import compile_rule, compiler
from instrument.targets import select
rules = select({family!r})
for rule in rules:
    rule.resolve()
start = time.perf_counter(); [compile_rule(rule) for rule in rules]; first = time.perf_counter() - start
start = time.perf_counter(); [compile_rule(rule) for rule in rules]; again = time.perf_counter() - start
print(json.dumps({{"rules": len(rules), "first": first, "again": again, "libcst": "libcst" in sys.modules}}))
"""

CONSTRUCT = """
import json, sys, time
sys.path.insert(0, {repository!r})
from nnsight import TransformersModel
from envoys import StandardizedTransformer
from transformers import AutoProcessor
path = {path!r}
processor = AutoProcessor.from_pretrained(path)
def native(): TransformersModel(path, task="image-text-to-text", processor=processor, dispatch=True, attn_implementation="eager")
def standard(): StandardizedTransformer(path, task="image-text-to-text", processor=processor, attn_implementation="eager", dispatch=True)
start = time.perf_counter(); {first}(); first = time.perf_counter() - start
times = {{"native": [], "standard": []}}
native()
for _ in range({rounds}):
    for name, run in (("native", native), ("standard", standard)):
        start = time.perf_counter(); run(); times[name].append(time.perf_counter() - start)
print(json.dumps({{"first": first, **times}}))
"""

#: Times ``statement`` in a fresh process, and the full (generation 2) collections of Python's cyclic garbage collector
#: that ran during it: how many, and their time. A full collection walks every object the process holds (torch's
#: millions), so whether one more runs during an import is a threshold's chance that dwarfs the import's own cost.
IMPORT = """
import gc, json, time
full = {{"count": 0, "seconds": 0.0, "began": 0.0}}
def timed(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            full["began"] = time.perf_counter()
        else:
            full["count"] += 1
            full["seconds"] += time.perf_counter() - full["began"]
gc.callbacks.append(timed)
start = time.perf_counter()
{statement}
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "full collections": full["count"], "in them": full["seconds"]}}))
"""

#: What a user of nnsight imports anyway: nnsight, and transformers' processors and auto classes.
BASELINE = (
    "import nnsight; from transformers import AutoProcessor, AutoModelForImageTextToText; "
    "import transformers.image_processing_utils"
)

#: The library's own top-level packages.
OURS = ("envoys", "instrument", "rewrites")


def fresh(code: str, cache: str, bytecode: bool = False, flags: tuple[str, ...] = (), stderr: bool = False) -> str:
    """The last line ``code`` prints in a fresh interpreter (its whole stderr instead when ``stderr``).

    ``bytecode``: let Python write and read the library's compiled modules, as
    an installed package has them (an environment may set
    PYTHONDONTWRITEBYTECODE, which recompiles the library's sources in every process).
    """
    environment = {**os.environ, ENVIRONMENT: cache}
    if bytecode:
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, *flags, "-c", code], cwd=REPOSITORY, env=environment,
                          capture_output=True, text=True, timeout=1200)
    if done.returncode:
        raise RuntimeError(done.stderr)
    if stderr:
        return done.stderr
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def build_times(family: str, path: Path, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        cache = str(Path(folder) / "cache")
        code = BUILD.format(repository=str(REPOSITORY), family=family)
        cold = json.loads(fresh(code, cache))
        warm = [json.loads(fresh(code, cache)) for _ in range(3)]
        construct = json.loads(fresh(CONSTRUCT.format(repository=str(REPOSITORY), path=str(path), rounds=rounds,
                                                      first="standard"), cache))
        native_first = json.loads(fresh(CONSTRUCT.format(repository=str(REPOSITORY), path=str(path), rounds=0,
                                                         first="native"), cache))["first"]
    return {"cold": cold, "warm": warm, "construct": construct, "native first": native_first}


def imported(report: str) -> list[str]:
    """The modules ``python -X importtime`` reports importing, in its order."""
    fields = (line.removeprefix("import time:").split("|") for line in report.splitlines())
    return [f[2].strip() for f in fields if len(f) == 3 and f[0].strip().isdigit()]


def import_times(repeats: int = 5) -> dict[str, float | int | str]:
    """Import times in fresh processes, each the median of ``repeats`` runs interleaved (after one run that writes
    the library's compiled modules), the same net of the garbage collector's full collections, and what ``import
    envoys`` imports beyond the baseline, by ``-X importtime``."""
    statements = {
        "`import envoys`": IMPORT.format(statement="import envoys"),
        "nnsight and transformers' processors alone": IMPORT.format(statement=BASELINE),
        "`import envoys` after those, in the same process": (
            f"import json, time; {BASELINE}; start = time.perf_counter(); import envoys; "
            "print(json.dumps({'seconds': time.perf_counter() - start}))"
        ),
    }
    fresh("import envoys", "off", bytecode=True)  # writes the library's compiled modules
    runs: dict[str, list[dict]] = {name: [] for name in statements}
    for _ in range(repeats):
        for name, code in statements.items():
            runs[name].append(json.loads(fresh(code, "off", bytecode=True)))
    result: dict[str, float | int | str] = {
        name: statistics.median(run["seconds"] for run in values) for name, values in runs.items()
    }
    ours, base = runs["`import envoys`"], runs["nnsight and transformers' processors alone"]
    result["`import envoys` − those alone, paired per round (median)"] = statistics.median(
        a["seconds"] - b["seconds"] for a, b in zip(ours, base)
    )
    result["the same, net of the garbage collector's full collections"] = statistics.median(
        (a["seconds"] - a["in them"]) - (b["seconds"] - b["in them"]) for a, b in zip(ours, base)
    )
    result["full collections during `import envoys` / those alone (median)"] = (
        f"{statistics.median(a['full collections'] for a in ours):g} / {statistics.median(b['full collections'] for b in base):g}"
    )
    imports = imported(fresh("import envoys", "off", bytecode=True, flags=("-X", "importtime"), stderr=True))
    baseline = set(imported(fresh(BASELINE, "off", bytecode=True, flags=("-X", "importtime"), stderr=True)))
    beyond = [name for name in imports if name not in baseline]
    others = [name for name in beyond if name.partition(".")[0] not in OURS]
    result["modules `import envoys` imports beyond those (`-X importtime`)"] = len(beyond)
    result["of which not the library's own"] = f"{len(others)}: {', '.join(f'`{name}`' for name in others)}"
    return result


# -- one family -------------------------------------------------------------------------------------


def measure(family: str, folder: Path, rounds: int, traces: int, steps: int) -> dict:
    path = build_medium(family, folder / family)
    processor = AutoProcessor.from_pretrained(path)
    images = [noise_image(224, 224, seed=i) for i in range(IMAGES[family])]
    prompt = chat_prompt(processor, len(images), "What is in this picture?")
    inputs = processor(text=[prompt], images=images, return_tensors="pt")
    plain = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
    model = StandardizedTransformer(path, task="image-text-to-text", processor=processor, attn_implementation="eager", dispatch=True)
    native = TransformersModel(path, task="image-text-to-text", processor=processor, dispatch=True,
                               attn_implementation="eager")
    bare = TransformersModel(path, task="image-text-to-text", processor=processor, dispatch=True,
                             attn_implementation="eager")  # no .source opened: the empty trace
    standard_body, source_body, opened, kernels = reads(family, model, native)
    for envoy in opened:  # instrument before the first trace, as nnsight needs (drills open inside it)
        _ = envoy.source

    def plain_forward() -> None:
        with torch.no_grad():
            plain(**inputs)

    def rewritten_forward() -> None:
        with torch.no_grad():
            model._module(**inputs)

    def empty_trace() -> None:
        with torch.no_grad(), bare.trace(prompt, images=images):
            pass

    def empty_standard_trace() -> None:
        with torch.no_grad(), model.trace(prompt, images=images):
            pass

    def standard_trace() -> None:
        with torch.no_grad(), model.trace(prompt, images=images):
            standard_body()

    def source_trace() -> None:
        with torch.no_grad(), native.trace(prompt, images=images):
            source_body()

    variants = {
        "plain forward": plain_forward,
        "rewritten forward, no trace": rewritten_forward,
        "empty trace": empty_trace,
        "empty trace, StandardizedTransformer": empty_standard_trace,
        "trace, standard names": standard_trace,
        "trace, nnsight .source": source_trace,
    }
    times = round_robin(variants, rounds)
    counts = {
        "empty trace": visits(bare, empty_trace),
        "empty trace, StandardizedTransformer": visits(model, empty_standard_trace),
        "trace, standard names": visits(model, standard_trace),
        "trace, nnsight .source": visits(native, source_trace),
    }
    read_counts = per_read(standard_trace)
    instrumented_ops = sum(operations(type(e._module).forward) for e in opened) + sum(map(operations, kernels))

    memory = {}
    for name, run in (("trace, standard names", standard_trace), ("trace, nnsight .source", source_trace)):
        for _ in range(10):  # warm-up: caches and the allocator's pools fill first
            run()
        gc.collect()
        before = resident_mib()
        for _ in range(traces):
            run()
        gc.collect()
        memory[name] = resident_mib() - before

    def generate(which, new_tokens: int) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad(), which.generate(prompt, images=images, max_new_tokens=new_tokens,
                                                 do_sample=False, min_new_tokens=new_tokens):
                pass
        return run

    generators = (("standard", model), ("nnsight", bare))  # plain nnsight: no .source opened
    generation = round_robin(
        {f"{name} {n}": generate(which, n) for name, which in generators for n in (1, 1 + steps)},
        max(5, rounds // 2),
        warmup=1,
    )
    per_step = {}
    for name, which in generators:
        short, long = generation[f"{name} 1"], generation[f"{name} {1 + steps}"]
        seconds = statistics.median(b - a for a, b in zip(short, long)) / steps
        step_visits = (visits(which, generate(which, 1 + steps))[0] - visits(which, generate(which, 1))[0]) / steps
        per_step[name] = (seconds, step_visits)
    return {
        "times": times,
        "counts": counts,
        "sites": sites_installed(model),
        "operations": instrumented_ops,
        "reads": read_counts,
        "memory": memory,
        "per_step": per_step,
        "build": build_times(family, path, max(5, rounds // 2)),
    }


# -- the table --------------------------------------------------------------------------------------


def table(results: dict[str, dict], imports: dict[str, float | int | str], imports_repeats: int, rounds: int, traces: int,
          steps: int) -> str:
    out = [
        f"Medium random checkpoints, transformers {transformers.__version__}, CPU (`torch.get_num_threads()` = "
        f"{torch.get_num_threads()}), "
        f"{rounds} rounds round-robin after warm-up, `torch.no_grad()`; times in ms.\n",
        "| checkpoint | variant | median | min | × plain forward (paired) | interleaver visits "
        "| site or `.source` op fires |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for family, r in results.items():
        for name, values in r["times"].items():
            visit, fires = r["counts"].get(name, ("", ""))
            out.append(
                f"| {family} | {name} | {ms(statistics.median(values))} | {ms(min(values))} "
                f"| {paired(r['times'], name, 'plain forward'):.3f} | {visit} | {fires} |"
            )
        out.append(
            f"| {family} | standard names / `.source` (paired) | | "
            f"| {paired(r['times'], 'trace, standard names', 'trace, nnsight .source'):.3f} | | |"
        )
        out.append(
            f"| {family} | standard names / empty trace (paired) | | "
            f"| {paired(r['times'], 'trace, standard names', 'empty trace'):.3f} | | |"
        )
        out.append(
            f"| {family} | empty trace, StandardizedTransformer / nnsight's (paired) | | "
            f"| {paired(r['times'], 'empty trace, StandardizedTransformer', 'empty trace'):.3f} | | |"
        )
    out += [
        "",
        "| checkpoint | sites installed | operations `.source` instruments (same reads) "
        "| standard-name reads per trace | availability checks per read | locations computed per read |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {family} | {r['sites']} | {r['operations']} | {r['reads'][0]} | {r['reads'][1]:.2f} | {r['reads'][2]:.2f} |"
        for family, r in results.items()
    ]
    out += [
        "",
        "| checkpoint | rules | compile, cold (fresh process, empty cache) | warm cache (fresh process, median of 3) "
        "| again in-process | libcst imported warm | `StandardizedTransformer`, first in process (warm cache) "
        "| `TransformersModel`, first in process | ratio | `StandardizedTransformer` (median) "
        "| `TransformersModel` (median) | ratio |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for family, r in results.items():
        b = r["build"]
        warm = statistics.median(w["first"] for w in b["warm"])
        standard, native = statistics.median(b["construct"]["standard"]), statistics.median(b["construct"]["native"])
        out.append(
            f"| {family} | {b['cold']['rules']} | {ms(b['cold']['first'])} | {ms(warm)} | {ms(b['cold']['again'])} "
            f"| {any(w['libcst'] for w in b['warm'])} | {ms(b['construct']['first'])} | {ms(b['native first'])} "
            f"| {b['construct']['first'] / b['native first']:.2f} | {ms(standard)} | {ms(native)} | {standard / native:.2f} |"
        )
    out += [
        "",
        f"| import (fresh processes, median of {imports_repeats} interleaved, compiled modules as installed) | |",
        "|---|---:|",
    ]
    out += [
        f"| {name} | {ms(value)} ms |" if isinstance(value, float) else f"| {name} | {value} |"
        for name, value in imports.items()
    ]
    out += [
        "",
        f"| checkpoint | RSS growth over {traces} traces, standard names (MB) | same, `.source` (MB) "
        f"| per decode step, standard (ms) | per decode step, plain nnsight (ms) | ratio "
        f"| visits per step, standard | visits per step, plain nnsight |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for family, r in results.items():
        (s_time, s_visits), (n_time, n_visits) = r["per_step"]["standard"], r["per_step"]["nnsight"]
        out.append(
            f"| {family} | {r['memory']['trace, standard names']:.1f} | {r['memory']['trace, nnsight .source']:.1f} "
            f"| {ms(s_time)} | {ms(n_time)} | {s_time / n_time:.2f} | {s_visits:.0f} | {n_visits:.0f} |"
        )
    out.append(f"\nPer decode step: (time of a generate with {1 + steps} new tokens − with 1) / {steps}, nothing read.")
    return "\n".join(out) + "\n"


def write_section(path: Path, begin: str, end: str, text: str) -> None:
    """Put ``text`` (which starts with ``begin`` and ends with ``end``, a benchmark's markers) into ``path`` in place of
    the section between those markers, or after the rest where there is none yet."""
    current = path.read_text()
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    path.write_text(pattern.sub(lambda _: text, current) if pattern.search(current) else f"{current.rstrip()}\n\n{text}\n")


def kept_sections(path: Path) -> str:
    """The sections other benchmarks wrote into ``path`` between their markers (``<!-- name -->`` to
    ``<!-- /name -->``, as `invokes` writes its table), to keep when this table is rewritten."""
    if not path.exists():
        return ""
    sections = re.finditer(r"<!-- (\S+): .*? -->.*?<!-- /\1 -->", path.read_text(), re.DOTALL)
    return "".join(f"\n\n{section.group(0)}\n" for section in sections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per variant, after 2 warm-up rounds")
    parser.add_argument("--traces", type=int, default=100, help="traces for the resident-memory check")
    parser.add_argument("--steps", type=int, default=8, help="decode steps for the per-step cost under generate")
    parser.add_argument("--families", nargs="+", default=list(IMAGES), choices=list(IMAGES))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: least disturbed by other load)")
    parser.add_argument("--imports", type=int, default=11, help="fresh processes per import measured")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        results = {family: measure(family, Path(folder), args.rounds, args.traces, args.steps) for family in args.families}
    text = table(results, import_times(args.imports), args.imports, args.rounds, args.traces, args.steps)
    args.out.write_text(text + kept_sections(args.out))
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
