"""Mini-YAIE: an SGLang/vLLM-style inference engine you build chapter by chapter.

Importing `miniyaie` installs the implementation switch (see `_switch.py`):
`miniyaie.<chapter package>` comes from the reference tree (`solutions/`), the
student tree (`chapters/`) or a mix, as `MINIYAIE_IMPL` says.
"""

from miniyaie._switch import install as _install

__version__ = "0.1.0"

_install()
