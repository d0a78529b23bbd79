"""The on-disk build cache (instrument/cache.py): hits, misses, staleness, corruption, safety, location.

What the cache refuses to trust (who can write an entry, what is not an entry
file, malformed entries, stale temporaries) is tested in test_build_cache_trust.py.

In-process tests compile a rule for a small module written under ``tmp_path``
(so its source can change) with the in-memory cache emptied; the
cross-process tests run the real rules in fresh interpreters.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
import transformers

import instrument.rewriter
from instrument import cache, compile_rule, compiler, stored
from instrument.rule import Rule

REPOSITORY = Path(__file__).resolve().parent.parent

TARGET = '''\
import math


def scaled(x, factor=2.0):
    root = math.sqrt(x)
    return math.floor(root * factor)
'''

RULE = Rule("test.cache-target", "vlm_cache_target:scaled", {"math.sqrt": ("math_sqrt_0",)})


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An empty cache folder in use, the target module importable, and the in-memory cache empty."""
    cache_folder = tmp_path / "cache"
    monkeypatch.setenv(cache.ENVIRONMENT, str(cache_folder))
    source = tmp_path / "source"
    source.mkdir()
    (source / "vlm_cache_target.py").write_text(TARGET)
    monkeypatch.syspath_prepend(str(source))
    sys.modules.pop("vlm_cache_target", None)
    monkeypatch.setattr(compiler, "_CACHE", {})
    yield cache_folder
    sys.modules.pop("vlm_cache_target", None)


@pytest.fixture
def rewrites(monkeypatch):
    """The number of times the rewriter ran (a miss) since the test began."""
    calls = []
    real = instrument.rewriter.rewrite

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(instrument.rewriter, "rewrite", counting)
    return calls


def fresh_compile(rule: Rule = RULE):
    """Compile as a new process would: nothing in memory."""
    compiler._CACHE.clear()
    return compile_rule(rule)


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.vlmc"))


def run_scaled(instrumented, x: float) -> tuple[int, list[str]]:
    """Call the rewritten function with a recording site helper: its result and the sites it called."""
    fired = []

    def site(label, fn, *args, **kwargs):
        fired.append(label)
        return fn(*args, **kwargs)

    return instrumented.build(site)(x), fired


def same(a, b) -> None:
    """Two compiled rules are the same rewrite and the same code."""
    assert a.rewritten == b.rewritten
    assert a.original_source == b.original_source and a.first_line == b.first_line
    for field in ("co_code", "co_consts", "co_names", "co_varnames", "co_freevars", "co_filename",
                  "co_firstlineno", "co_linetable", "co_qualname"):
        assert getattr(a.code, field) == getattr(b.code, field), field


# -- hits and misses ------------------------------------------------------------------------------


def test_a_miss_writes_a_private_entry_and_a_hit_does_not_rewrite(folder, rewrites):
    built = fresh_compile()
    assert len(rewrites) == 1
    [entry] = entries(folder)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert entry.stat().st_mode & 0o777 == 0o600
    assert entry.name.startswith("scaled-")

    loaded = fresh_compile()
    assert len(rewrites) == 1  # served from disk
    same(loaded, built)
    assert loaded.rewritten.sites[0].served_as == "math_sqrt_0"
    assert run_scaled(loaded, 16.0) == (8, ["math_sqrt_0"])  # floor(sqrt(16) * 2)


def test_the_cached_code_runs_with_the_original_globals_and_defaults(folder):
    fresh_compile()
    loaded = fresh_compile()
    module = sys.modules["vlm_cache_target"]
    function = loaded.build(lambda label, fn, *a, **k: fn(*a, **k))
    assert function.__globals__ is module.__dict__
    assert function.__defaults__ == (2.0,)
    assert function(9.0, factor=3.0) == module.scaled(9.0, factor=3.0) == 9


def test_another_rule_on_the_same_target_is_another_entry(folder, rewrites):
    fresh_compile()
    both = Rule("test.cache-both", RULE.target, {"math.sqrt": ("math_sqrt_0",), "math.floor": ("math_floor_0",)})
    compiled = fresh_compile(both)
    assert len(rewrites) == 2 and len(entries(folder)) == 2
    assert run_scaled(compiled, 16.0) == (8, ["math_sqrt_0", "math_floor_0"])


def test_an_entry_is_stale_when_the_target_source_changes(folder, rewrites, tmp_path):
    fresh_compile()
    (tmp_path / "source" / "vlm_cache_target.py").write_text(TARGET.replace("root * factor", "root * factor + 1"))
    importlib.reload(sys.modules["vlm_cache_target"])
    changed = fresh_compile()
    assert len(rewrites) == 2  # rebuilt: the old entry was not used
    assert "root * factor + 1" in changed.rewritten.source
    assert run_scaled(changed, 16.0) == (9, ["math_sqrt_0"])
    assert len(entries(folder)) == 2


def test_the_key_names_what_the_code_depends_on(folder):
    fresh_compile()
    module = sys.modules["vlm_cache_target"]
    key = cache.key(module.scaled, compiler.selection(RULE))
    assert cache.entry_path(folder, key) in entries(folder)  # the key the compile stored its entry under
    recorded = dict(key)
    source_file = Path(module.__file__)
    assert recorded["file"] == str(source_file)
    assert recorded["file sha256"] == hashlib.sha256(source_file.read_bytes()).hexdigest()
    assert recorded["function"].startswith("scaled line 4 ")
    served_elsewhere = replace(RULE, serve_as={"math_sqrt_0": "root_0"})
    assert "math_sqrt_0" in recorded["sites"] and "root_0" not in recorded["sites"]
    assert "root_0" in dict(cache.key(module.scaled, compiler.selection(served_elsewhere)))["sites"]
    assert recorded["python"].startswith(sys.implementation.cache_tag)
    assert recorded["vlm-instrument"] == importlib.metadata.version("vlm-instrument")
    assert recorded["libcst"] == importlib.metadata.version("libcst")
    assert recorded["library"] == "vlm_cache_target (version unknown)"  # the target belongs to no distribution
    assert set(recorded) >= {"format", "compiler source"}


# -- what is never trusted ------------------------------------------------------------------------


def test_an_entry_recorded_for_another_key_is_ignored_and_replaced(folder, rewrites):
    built = fresh_compile()
    [entry] = entries(folder)
    module = sys.modules["vlm_cache_target"]
    right = cache.key(module.scaled, ((("math.sqrt", ("math_sqrt_0",)),), ()))
    wrong = tuple((name, value + " (other)") if name == "library" else (name, value) for name, value in right)
    stored = cache.load(entry, right, module.scaled.__code__)
    cache.store(entry, wrong, stored)  # a whole, valid entry, for another key, at this key's path
    assert cache.load(entry, right, module.scaled.__code__) is None
    rebuilt = fresh_compile()
    assert len(rewrites) == 2
    same(rebuilt, built)
    assert cache.load(entry, right, module.scaled.__code__) is not None  # written again, for this key


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: data[:-40] + bytes(b ^ 1 for b in data[-40:]), id="flipped-bytes"),
        pytest.param(lambda data: os.urandom(len(data)), id="garbage"),
        pytest.param(lambda data: data.replace(cache.MAGIC, b"x" * len(cache.MAGIC)), id="no-magic"),
    ],
)
def test_a_corrupt_entry_is_rebuilt_without_an_error(folder, rewrites, damage):
    built = fresh_compile()
    [entry] = entries(folder)
    entry.write_bytes(damage(entry.read_bytes()))
    rebuilt = fresh_compile()
    assert len(rewrites) == 2
    same(rebuilt, built)
    assert run_scaled(rebuilt, 16.0) == (8, ["math_sqrt_0"])
    fresh_compile()
    assert len(rewrites) == 2  # the entry was written whole again


def test_a_valid_body_under_a_wrong_digest_is_ignored(folder, rewrites):
    fresh_compile()
    [entry] = entries(folder)
    data = entry.read_bytes()
    start = len(cache.MAGIC)
    entry.write_bytes(data[:start] + bytes(32) + data[start + 32 :])
    fresh_compile()
    assert len(rewrites) == 2


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_a_folder_others_can_write_is_not_used(folder, rewrites):
    folder.mkdir(mode=0o700)
    fresh_compile()
    folder.chmod(0o777)
    fresh_compile()
    assert len(rewrites) == 2  # not read
    [entry] = entries(folder)
    entry.unlink()
    fresh_compile()
    assert entries(folder) == []  # nor written


def test_a_folder_that_cannot_be_created_means_no_cache_and_no_error(tmp_path, folder, monkeypatch, rewrites):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(cache.ENVIRONMENT, str(blocker / "cache"))
    compiled = fresh_compile()
    assert run_scaled(compiled, 16.0) == (8, ["math_sqrt_0"])
    fresh_compile()
    assert len(rewrites) == 2 and not (blocker / "cache").exists()


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_read_but_not_written(folder, rewrites):
    fresh_compile()
    folder.chmod(0o500)
    try:
        fresh_compile()
        assert len(rewrites) == 1
        floor = Rule("test.cache-floor", RULE.target, {"math.floor": ("math_floor_0",)})
        assert run_scaled(fresh_compile(floor), 16.0) == (8, ["math_floor_0"])
        assert len(rewrites) == 2 and len(entries(folder)) == 1
    finally:
        folder.chmod(0o700)


def test_a_folder_that_refuses_writes_is_read_but_not_written(folder, monkeypatch, rewrites):
    """What a folder the user cannot write gives (EACCES on creating a file), for root too, who writes anywhere."""
    fresh_compile()

    real_open = os.open

    def refused(path, flags, *args, **kwargs):  # what creating a file there gives
        if flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(cache.os, "open", refused)
    fresh_compile()
    assert len(rewrites) == 1  # the entry there is read
    floor = Rule("test.cache-floor", RULE.target, {"math.floor": ("math_floor_0",)})
    assert run_scaled(fresh_compile(floor), 16.0) == (8, ["math_floor_0"])  # built in memory, no error
    assert len(rewrites) == 2 and len(entries(folder)) == 1 and len(list(folder.iterdir())) == 1


def test_a_failed_write_leaves_no_entry_and_no_temporary_file(folder, monkeypatch, rewrites):
    def interrupted(source, destination, **dir_fds):
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", interrupted)
    compiled = fresh_compile()
    assert run_scaled(compiled, 16.0) == (8, ["math_sqrt_0"])
    assert list(folder.iterdir()) == []


def test_the_cache_can_be_turned_off(folder, monkeypatch, rewrites):
    for value in ("off", "0", "False", "no"):
        monkeypatch.setenv(cache.ENVIRONMENT, value)
        assert cache.location() is None
        fresh_compile()
    assert not folder.exists() and len(rewrites) == 4
    assert not Path("off").exists() and not Path("0").exists()


# -- where it lives -------------------------------------------------------------------------------


def test_the_environment_variable_moves_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENVIRONMENT, str(tmp_path / "elsewhere"))
    assert cache.location() == tmp_path / "elsewhere"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(cache.ENVIRONMENT, "relative")
    assert cache.location() == tmp_path / "relative"


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG layout")
def test_by_default_the_cache_is_in_the_user_cache_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(cache.ENVIRONMENT, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.location() == tmp_path / "xdg" / "vlm-instrument"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.location() == tmp_path / "home" / ".cache" / "vlm-instrument"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    assert cache.location() == tmp_path / "home" / ".cache" / "vlm-instrument"


def test_on_macos_and_windows_the_cache_is_in_their_user_cache_folders(tmp_path, monkeypatch):
    monkeypatch.delenv(cache.ENVIRONMENT, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "platform", "darwin")
    assert cache.default_folder() == tmp_path / "home" / "Library" / "Caches" / "vlm-instrument"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert cache.default_folder() == tmp_path / "local" / "vlm-instrument" / "Cache"
    monkeypatch.delenv("LOCALAPPDATA")
    assert cache.default_folder() == tmp_path / "home" / "AppData" / "Local" / "vlm-instrument" / "Cache"


def test_the_default_folder_is_never_inside_the_installed_packages(monkeypatch):
    monkeypatch.delenv(cache.ENVIRONMENT, raising=False)
    default = cache.location().resolve()
    for name in ("purelib", "platlib"):
        assert not default.is_relative_to(Path(sysconfig.get_paths()[name]).resolve())
    assert not default.is_relative_to(Path(cache.__file__).resolve().parent.parent)


# -- across processes -----------------------------------------------------------------------------

#: Compiles every rule of the families given, after a start signal, and prints what it got. It reads no snapshot
#: store, so that a build the cache does not serve is a rewrite with libcst, and what the cache saves shows.
WORKER = textwrap.dedent(
    """
    import hashlib, json, os, pathlib, sys, time
    from instrument import cache, compile_rule, stored
    stored.STORE = pathlib.Path(os.devnull)  # no store: no manifest under it
    from instrument.compiler import selection
    from instrument.listing import snapshot
    from instrument.targets import select
    rules = [rule for family in sys.argv[2:] for rule in select(family)]
    for rule in rules:
        rule.resolve()
    start = sys.argv[1]
    if start != "-":
        open(f"{start}.{os.getpid()}.ready", "w").close()
        while not os.path.exists(start):
            time.sleep(0.001)
    began = time.perf_counter()
    compiled = [compile_rule(rule) for rule in rules]
    seconds = time.perf_counter() - began
    def canonical(c):  # nested code objects by value (their repr carries an address)
        consts = tuple(canonical(k) if isinstance(k, type(c)) else k for k in c.co_consts)
        return (c.co_code, consts, c.co_names, c.co_varnames, c.co_freevars, c.co_linetable, c.co_filename)
    code = lambda c: hashlib.sha256(repr(canonical(c)).encode()).hexdigest()
    def entry_names(c):  # the cache entries this compiled rule and its drills were read from or written to
        own = cache.entry_path(cache.location(), cache.key(c.innermost, selection(c.rule))).name
        return {own}.union(*(entry_names(inner) for inner in c.drills.values()))
    print(json.dumps({
        "libcst": "libcst" in sys.modules,
        "seconds": seconds,
        "snapshots": [snapshot(c) for c in compiled],
        "code": [code(c.code) for c in compiled],
        "entries": sorted(set().union(*(entry_names(c) for c in compiled))),
    }))
    """
)


def recorded_here() -> bool:
    """Whether the snapshot store records the installed transformers: then it holds every rule's rewrite."""
    return f"transformers-{transformers.__version__}" in stored.recorded(stored.STORE).releases


def worker(cache_folder: Path, families: tuple[str, ...], start: str = "-") -> subprocess.Popen:
    environment = {**os.environ, cache.ENVIRONMENT: str(cache_folder)}
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, start, *families],
        cwd=REPOSITORY, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def result(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return json.loads(out)


def test_a_later_process_builds_from_the_cache_without_libcst(tmp_path):
    families = ("llava", "qwen3_vl")
    cold = result(worker(tmp_path / "cache", families))
    warm = result(worker(tmp_path / "cache", families))
    assert cold["libcst"] and not warm["libcst"]
    assert warm["snapshots"] == cold["snapshots"]
    assert warm["code"] == cold["code"]


def test_two_processes_building_at_once(tmp_path):
    start = tmp_path / "start"
    families = ("llava", "qwen3_vl")
    processes = [worker(tmp_path / "cache", families, str(start)) for _ in range(2)]
    deadline = time.monotonic() + 300
    while len(list(tmp_path.glob("start.*.ready"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # until both are past their imports, waiting for the signal
    start.touch()
    first, second = (result(p) for p in processes)
    assert first["libcst"] and second["libcst"]  # both built
    assert first["snapshots"] == second["snapshots"] and first["code"] == second["code"]
    files = list((tmp_path / "cache").iterdir())
    assert sorted(f.name for f in files) == first["entries"]
    for entry in files:  # whole entries, no temporary file left behind
        data = entry.read_bytes()
        assert entry.suffix == ".vlmc" and data.startswith(cache.MAGIC)
        assert hashlib.sha256(data[len(cache.MAGIC) + 32 :]).digest() == data[len(cache.MAGIC) : len(cache.MAGIC) + 32]


def test_show_works_from_the_cache_and_without_it_and_imports_no_libcst_on_a_recorded_release(tmp_path):
    def show(cache_value: str) -> tuple[str, bool]:
        code = (
            "import runpy, sys\n"
            "sys.argv = ['show', 'LlavaModel', '--diff']\n"
            "try:\n    runpy.run_module('instrument.show', run_name='__main__')\n"
            "except SystemExit as exit:\n    assert not exit.code, exit.code\n"
            "print('libcst' in sys.modules)\n"
        )
        environment = {**os.environ, cache.ENVIRONMENT: cache_value}
        done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, env=environment,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        text, _, flag = done.stdout.rstrip("\n").rpartition("\n")
        return text, flag == "True"

    without, libcst_without = show("off")
    cold, libcst_cold = show(str(tmp_path / "cache"))
    warm, libcst_warm = show(str(tmp_path / "cache"))
    assert without == cold == warm and "__vlm_site__" in warm
    if recorded_here():  # the snapshot store's rewrites, else the cache's
        assert not (libcst_without or libcst_cold or libcst_warm)


def test_importing_envoys_does_not_import_libcst_nor_the_compiler():
    code = (
        "import sys, envoys, instrument\n"
        "print([m for m in ('libcst', 'instrument.compiler') if m in sys.modules])\n"
        "instrument.compile_rule\n"  # loaded on first use
        "print('instrument.compiler' in sys.modules, 'libcst' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True False"]


def test_a_model_builds_without_libcst_from_the_store_then_from_the_cache(tmp_path, tiny_checkpoint):
    path = tiny_checkpoint("llava-siglip")
    code = (
        "import sys\n"
        "from envoys import StandardizedTransformer\n"
        f"model = StandardizedTransformer({str(path)!r}, task='image-text-to-text', attn_implementation='eager')\n"
        "print('libcst' in sys.modules)\n"
    )
    environment = {**os.environ, cache.ENVIRONMENT: str(tmp_path / "cache")}

    def build() -> str:
        done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, env=environment,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[-1]

    cold = build()
    assert list((tmp_path / "cache").iterdir())
    assert build() == "False"  # warm: read back
    if recorded_here():
        assert cold == "False"  # the snapshot store's rewrites
