"""The maintainer's tools: what checks the library against transformers releases, beside the library, not in it.

- `snapshot` (``python -m maintain.snapshot``): every rewritten forward
  checked against the snapshot store, and the installed release recorded
  there (``--update``); `store` writes the store, whose manifest the library
  reads at build time (`instrument.store`, `instrument.checked`).
- `releases` (``python -m maintain.releases X.Y.Z``): the same check, and the
  suite, on other transformers releases, each in a throwaway virtualenv.
- `hf_tests` (``--hf-tests``), with `hf_source`, `hf_compare` and the two
  pytest plugins `hf_record` and `hf_plugin`: transformers' own model tests
  run without and with the rewrites.
- `commands`: a subprocess run into a log, a table.

They sit above the three packages of the library and may import all of them
(`instrument`, the compiler; `rewrites`, the rules; `envoys`, the user
layer and its catalogue of rules); none of those imports them. The command
that prints the rewritten forwards, ``python -m instrument.show``, is the
library's own and stays in `instrument`. The tools run from a checkout: they
read and write its ``snapshots/`` and its ``pyproject.toml``.
"""
