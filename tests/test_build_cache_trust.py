"""What the build cache refuses to run (instrument/cache.py): entries others could write, files that are not
small regular files, malformed entries with a valid checksum; and the temporary files killed writers leave.

Most tests plant a forged entry: a whole one, with a recomputed checksum (as anyone who can write the file
can make it), whose code returns ``"tampered"``. Loaded, it shows in the result; refused, the rule is
rewritten again and returns 8. The first test shows such a forgery runs when it is a private file of the
user's: the checksum is no defence, who can write the file is.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import CodeType

import pytest
import test_build_cache as base
from test_build_cache import REPOSITORY, RULE, entries, fresh_compile, run_scaled

from instrument import cache, compiler
from instrument.rule import Rule

folder = base.folder
rewrites = base.rewrites

posix = pytest.mark.skipif(os.name == "nt", reason="POSIX owners, modes, links and FIFOs")
as_root = pytest.mark.skipif(os.name == "nt" or os.geteuid() != 0, reason="giving a file away needs root")

#: A rule on the same target with another entry, to make a write happen.
FLOOR = Rule("test.cache-floor", RULE.target, {"math.floor": ("math_floor_0",)})

GOOD = (8, ["math_sqrt_0"])  # run_scaled(..., 16.0) of the real rewrite: floor(sqrt(16) * 2), its site fired
TAMPERED = ("tampered", [])  # ... of the forged code


def forged(body: object) -> bytes:
    """The bytes of an entry holding ``body`` (marshalled), with its checksum recomputed."""
    data = marshal.dumps(body)
    return cache.MAGIC + hashlib.sha256(data).digest() + data


def function_code(source: str, name: str = "scaled") -> CodeType:
    """The code of the function ``name`` defined (at any depth) in ``source``, compiled under the target's file."""
    filename = sys.modules["vlm_cache_target"].__file__
    pending = [compile(source, filename, "exec")]
    while pending:
        code = pending.pop()
        if code.co_name == name:
            return code
        pending.extend(c for c in code.co_consts if isinstance(c, CodeType))
    raise LookupError(name)


def current() -> tuple[Path, tuple, tuple]:
    """The target's entry (the one the rule is stored under): its path, key and payload, as written."""
    target = sys.modules["vlm_cache_target"].scaled
    entry_key = cache.key(target, compiler.selection(RULE))
    entry = cache.entry_path(cache.location(), entry_key)
    stored_key, payload = marshal.loads(entry.read_bytes()[len(cache.MAGIC) + 32 :])
    assert stored_key == entry_key
    return entry, entry_key, payload


def tampered(payload: tuple) -> tuple:
    """``payload`` with its code replaced by a function of the same name and file that returns ``"tampered"``."""
    return (*payload[:4], function_code("def scaled(x, factor=2.0):\n    return 'tampered'\n"))


def plant_forgery() -> tuple[Path, tuple, bytes]:
    """Build the entry, then rewrite it in place with a tampered, checksummed body: its path, key and the bytes."""
    fresh_compile()
    entry, entry_key, payload = current()
    forgery = forged((entry_key, tampered(payload)))
    entry.write_bytes(forgery)
    return entry, entry_key, forgery


def loads(entry: Path, entry_key: tuple) -> bool:
    return cache.load(entry, entry_key, sys.modules["vlm_cache_target"].scaled.__code__) is not None


def rebuilt_and_replaced(rewrites: list, entry: Path, forgery: bytes, before: int = 1) -> None:
    """The next build rewrote the rule (not the forgery), wrote a private entry in its place, and reads that back."""
    assert run_scaled(fresh_compile(), 16.0) == GOOD
    assert len(rewrites) == before + 1
    assert entry.read_bytes() != forgery
    assert entry.lstat().st_mode & 0o777 == 0o600 and entry.stat().st_nlink == 1
    assert run_scaled(fresh_compile(), 16.0) == GOOD
    assert len(rewrites) == before + 1  # served from the new entry


# -- who can write it -----------------------------------------------------------------------------


def test_the_checksum_is_no_defence_a_private_entry_forged_with_one_is_run(folder, rewrites):
    """The other side of the trust model, and the proof the forgery below is a valid entry."""
    entry, entry_key, _ = plant_forgery()
    assert loads(entry, entry_key)
    assert run_scaled(fresh_compile(), 16.0) == TAMPERED
    assert len(rewrites) == 1


@posix
@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602], ids=oct)
def test_an_entry_others_can_write_is_not_run_and_is_replaced(folder, rewrites, mode):
    """In a 0755 folder (umask 022): the entry chmodded, then rewritten through that mode by someone else."""
    fresh_compile()
    folder.chmod(0o755)
    entry, entry_key, payload = current()
    entry.chmod(mode)
    forgery = forged((entry_key, tampered(payload)))
    entry.write_bytes(forgery)  # same file, same mode, a valid checksum
    assert entry.stat().st_mode & 0o777 == mode
    assert not loads(entry, entry_key)
    rebuilt_and_replaced(rewrites, entry, forgery)


@posix
def test_a_folder_others_can_read_is_used(folder, rewrites):
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)  # whatever the umask
    fresh_compile()
    fresh_compile()
    assert len(rewrites) == 1
    [entry] = entries(folder)
    assert entry.stat().st_mode & 0o777 == 0o600


@posix
def test_an_entry_with_another_hard_link_is_not_read(folder, rewrites, tmp_path):
    entry, entry_key, forgery = plant_forgery()
    elsewhere = tmp_path / "elsewhere.vlmc"
    os.link(entry, elsewhere)
    assert not loads(entry, entry_key)
    rebuilt_and_replaced(rewrites, entry, forgery)
    assert elsewhere.read_bytes() == forgery  # the other name still holds the old file, no longer the entry


@posix
def test_a_symlink_entry_is_not_followed_and_is_replaced_by_a_file(folder, rewrites, tmp_path):
    entry, entry_key, forgery = plant_forgery()
    planted = tmp_path / "planted.vlmc"
    entry.rename(planted)  # a private, valid file: only the link is wrong
    entry.symlink_to(planted)
    assert loads(planted, entry_key) and not loads(entry, entry_key)
    rebuilt_and_replaced(rewrites, entry, forgery)
    assert not entry.is_symlink()
    assert planted.read_bytes() == forgery  # not written through the link


@posix
def test_a_symlink_where_the_folder_should_be_is_refused(folder, rewrites, tmp_path, monkeypatch):
    """Refused, not resolved (see the module's docstring): neither read nor written through."""
    entry, entry_key, forgery = plant_forgery()
    link = tmp_path / "link"
    link.symlink_to(folder, target_is_directory=True)
    monkeypatch.setenv(cache.ENVIRONMENT, str(link))
    held = sorted(os.listdir(folder))
    assert run_scaled(fresh_compile(), 16.0) == GOOD
    assert run_scaled(fresh_compile(FLOOR), 16.0) == (8, ["math_floor_0"])
    assert len(rewrites) == 3  # nothing read
    assert sorted(os.listdir(folder)) == held and entry.read_bytes() == forgery  # nothing written
    monkeypatch.setenv(cache.ENVIRONMENT, str(folder))
    assert run_scaled(fresh_compile(), 16.0) == TAMPERED  # the folder itself would have been read


@posix
def test_a_write_goes_to_the_folder_checked_when_its_path_is_swapped_for_a_symlink(folder, rewrites, tmp_path, monkeypatch):
    fresh_compile()
    moved, elsewhere = tmp_path / "moved", tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    check_done = cache._remove_stale_temporaries  # runs once the folder is open and checked

    def swap(opened):
        folder.rename(moved)
        folder.symlink_to(elsewhere, target_is_directory=True)
        check_done(opened)

    monkeypatch.setattr(cache, "_remove_stale_temporaries", swap)
    fresh_compile(FLOOR)
    assert len(rewrites) == 2
    assert list(elsewhere.iterdir()) == []
    assert [p.name.partition("-")[0] for p in entries(moved)] == ["scaled", "scaled"]  # the new entry is there


@as_root
def test_an_entry_owned_by_another_user_is_not_run_and_is_replaced(folder, rewrites):
    entry, entry_key, forgery = plant_forgery()
    os.chown(entry, 1, 1)
    assert not loads(entry, entry_key)
    rebuilt_and_replaced(rewrites, entry, forgery)
    assert entry.stat().st_uid == os.getuid()


@as_root
def test_a_folder_owned_by_another_user_is_not_used(folder, rewrites):
    entry, _, forgery = plant_forgery()
    os.chown(folder, 1, 1)
    assert run_scaled(fresh_compile(), 16.0) == GOOD
    assert run_scaled(fresh_compile(FLOOR), 16.0) == (8, ["math_floor_0"])
    assert len(rewrites) == 3 and entries(folder) == [entry] and entry.read_bytes() == forgery


# -- what is not a small regular file -------------------------------------------------------------

#: Plants something that is not an entry at the entry's path, then compiles under a memory limit:
#: prints how long the load took, what it returned, and what the compile found and left.
PROBE = textwrap.dedent(
    """
    import json, os, resource, sys, time
    import instrument.rewriter
    from instrument import cache, compile_rule, compiler
    from instrument.rule import Rule
    import libcst  # the miss imports it: before the limit
    import vlm_cache_target
    kind, cap = sys.argv[1], int(sys.argv[2])
    rule = Rule("test.cache-target", "vlm_cache_target:scaled", {"math.sqrt": ("math_sqrt_0",)})
    entry_key = cache.key(vlm_cache_target.scaled, compiler.selection(rule))
    path = cache.entry_path(cache.location(), entry_key)
    os.makedirs(path.parent, mode=0o700)
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.truncate(path, 3 * 2**30)  # sparse: no block written
    rewrites = []
    real = instrument.rewriter.rewrite
    instrument.rewriter.rewrite = lambda *a, **k: rewrites.append(a) or real(*a, **k)
    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (in_use + cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    began = time.monotonic()
    found = cache.load(path, entry_key, vlm_cache_target.scaled.__code__)
    seconds = time.monotonic() - began
    result = compile_rule(rule).build(lambda label, fn, *a, **k: fn(*a, **k))(16.0)
    print(json.dumps({
        "seconds": seconds, "found": found is not None, "rewrites": len(rewrites), "result": result,
        "replaced": os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) < 2**20,
        "reads back": cache.load(path, entry_key, vlm_cache_target.scaled.__code__) is not None,
    }))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the memory limit is set from /proc/self/statm")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse-3-GiB"])
def test_what_is_not_a_small_regular_file_is_ignored_at_once(folder, kind):
    """A FIFO would block the read forever, /dev/zero and a 3 GiB file exhaust memory: in a child with 512 MiB
    of address space to spare and a timeout, so a regression fails here instead of hanging or OOMing the machine.
    The child plants the file itself, at the path its own key names."""
    source = str(folder.parent / "source")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, kind, str(512 * 2**20)],
        cwd=REPOSITORY, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))},
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome["seconds"] < 5 and not outcome["found"]
    assert outcome["rewrites"] == 1 and outcome["result"] == 8  # compiled in memory
    assert outcome["replaced"] and outcome["reads back"]  # and a real entry written in its place


# -- malformed, with a valid checksum -------------------------------------------------------------


def _site_line(line):
    return lambda key, payload: (key, (payload[0], tuple((n, c, line, k) for n, c, _, k in payload[1]), *payload[2:]))


STRANGER = """
def outer():
    stranger = 1
    def scaled(x, factor=2.0):
        return stranger
    return scaled
"""

MALFORMED = {
    "site line inf": _site_line(float("inf")),
    "site line a string": _site_line("3"),
    "site line a bool": _site_line(True),
    "site line a float": _site_line(3.0),
    "site of three fields": lambda key, payload: (key, (payload[0], tuple(s[:3] for s in payload[1]), *payload[2:])),
    "payload of four fields": lambda key, payload: (key, payload[:4]),
    "payload of six fields": lambda key, payload: (key, (*payload, None)),
    "a string where the code belongs": lambda key, payload: (key, (*payload[:4], "print('hi')")),
    "sites a list": lambda key, payload: (key, (payload[0], list(payload[1]), *payload[2:])),
    "code of another name": lambda key, payload: (key, (*payload[:4], function_code("def other(x):\n    return x\n", "other"))),
    "code closing over a stranger": lambda key, payload: (key, (*payload[:4], function_code(STRANGER))),
    "body not a pair": lambda key, payload: (key, payload, None),
    "body a number": lambda key, payload: 42,
}


@pytest.mark.parametrize("malform", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_entry_with_a_valid_checksum_is_ignored_and_replaced(folder, rewrites, malform):
    fresh_compile()
    entry, entry_key, payload = current()
    forgery = forged(malform(entry_key, payload))
    entry.write_bytes(forgery)
    assert not loads(entry, entry_key)
    rebuilt_and_replaced(rewrites, entry, forgery)


# -- what killed writers leave --------------------------------------------------------------------


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def test_a_write_removes_the_stale_temporaries_of_this_library_and_nothing_else(folder, rewrites):
    fresh_compile()
    [entry] = entries(folder)
    other_entry = "Other.forward-" + "0" * 32 + ".vlmc"
    stale = [folder / f".{entry.name}.k3j2_h1g.tmp", folder / f".{other_entry}.0123456789abcdef.tmp"]
    fresh = folder / f".{entry.name}.fedcba9876543210.tmp"  # a writer at work
    kept_files = [
        folder / "notes.txt",
        folder / ".notes.tmp",
        folder / f"{entry.name}.0123.tmp",  # no leading dot
        folder / f".{entry.name}.0123.tmp.bak",
        folder / f".{entry.name}.0123.TMP",
        folder / ".scaled-nothex.vlmc.0123.tmp",
    ]
    for path in [*stale, fresh, *kept_files]:
        path.write_bytes(b"partial")
    not_files = [folder / f".{entry.name}.directory.tmp", folder / f".{entry.name}.symlink.tmp"]
    not_files[0].mkdir()
    not_files[1].symlink_to(folder / "notes.txt")
    for path in [*stale, *kept_files, *not_files]:
        _age(path, cache.STALE_TEMPORARY_SECONDS + 60)
    _age(fresh, cache.STALE_TEMPORARY_SECONDS - 60)

    fresh_compile()
    assert len(rewrites) == 1 and all(path.exists() for path in stale)  # a read removes nothing
    fresh_compile(FLOOR)  # a write
    assert len(rewrites) == 2
    assert not any(os.path.lexists(path) for path in stale)
    assert fresh.exists() and all(path.read_bytes() == b"partial" for path in kept_files)
    assert not_files[0].is_dir() and not_files[1].is_symlink()
    assert len(entries(folder)) == 2


@as_root
def test_a_stale_temporary_of_another_user_is_kept(folder, rewrites):
    fresh_compile()
    [entry] = entries(folder)
    theirs = folder / f".{entry.name}.0123456789abcdef.tmp"
    theirs.write_bytes(b"partial")
    os.chown(theirs, 1, 1)
    _age(theirs, cache.STALE_TEMPORARY_SECONDS + 60)
    fresh_compile(FLOOR)
    assert len(rewrites) == 2 and theirs.read_bytes() == b"partial"
