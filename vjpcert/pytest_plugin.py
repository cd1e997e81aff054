"""The vjpcert pytest plugin (entry point ``pytest11``): a ``vjpcert`` fixture in every test suite.

    def test_my_softmax(vjpcert):
        vjpcert.proved("my_ops.py::my_softmax")
        vjpcert.checked("my_ops.py::my_softmax", dps=30)
        vjpcert.matches_spec("softmax", my_softmax_kernel, kind="forward")
        vjpcert.triton_matches("softmax", my_triton_softmax_launcher, kind="forward")
        vjpcert.cuda_kernels_match("my_kernels.py")      # a file assigning KERNELS, with error models

Proofs and checks are kept in a cache folder (by default in pytest's own cache, so ``--cache-clear``
empties it too) and reused while current; ``--vjpcert-cache DIR`` or the ini option ``vjpcert_cache``
names another, ``--vjpcert-no-cache`` derives everything again.
"""
from __future__ import annotations

from pathlib import Path

import pytest

# Without a GPU, Triton kernels can only run in Triton's interpreter, which must be switched on before a
# test module decorates its kernels (a cheap driver probe: neither torch nor triton is imported here).
import vjpcert.triton_kernels  # noqa: F401,E402

_CACHE = pytest.StashKey()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config):
    """vjpcert's own modules are no test code, yet pytest marks every module of a plugin's
    distribution for assertion rewriting: parsing and rewriting the hundred-odd modules a test
    imports cost a second or more in every test process (nothing is cached under
    PYTHONDONTWRITEBYTECODE). Unmark ours; the user's tests and conftests are rewritten as ever.
    Written against pytest's internals: where they differ, rewriting stays as it was."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        from _pytest.config import _iter_rewritable_modules
        marked = early_config.pluginmanager.rewrite_hook._must_rewrite
        ours = set(_iter_rewritable_modules(str(f) for f in distribution("vjpcert").files or ()))
    except (ImportError, AttributeError, PackageNotFoundError):
        return
    marked.difference_update(ours)


def _hide(excinfo) -> bool:
    from vjpcert.testing import _hide_certification_failures
    return _hide_certification_failures(excinfo)


class _Certifier:
    from vjpcert.testing import CertificationError  # noqa: F401  (re-exported for users)

    def __init__(self, cache=None):
        self.cache = cache

    def __repr__(self):          # shown as the fixture's value in a failure's traceback
        return f"<vjpcert fixture; certificates cached in {self.cache.root}>" if self.cache else \
            "<vjpcert fixture; no certificate cache>"

    def proved(self, op, claims=None, dims=None, budget: float = 60.0, general: bool = True):
        __tracebackhide__ = _hide
        from vjpcert.testing import assert_proved
        return assert_proved(op, claims=claims, dims=dims, budget=budget, general=general, cache=self.cache)

    def checked(self, op, claims=None, dims=None, dps: int = 50):
        __tracebackhide__ = _hide
        from vjpcert.testing import assert_checked
        return assert_checked(op, claims=claims, dims=dims, dps=dps, cache=self.cache)

    @staticmethod
    def matches_spec(op, impl, **kwargs):
        __tracebackhide__ = _hide
        from vjpcert.testing import assert_matches_spec
        return assert_matches_spec(op, impl, **kwargs)

    @staticmethod
    def triton_matches(op, launcher, **kwargs):
        __tracebackhide__ = _hide
        from vjpcert.testing import assert_triton_matches
        return assert_triton_matches(op, launcher, **kwargs)

    @staticmethod
    def cuda_kernels_match(path, **kwargs):
        __tracebackhide__ = _hide
        from vjpcert.testing import assert_cuda_kernels_match
        return assert_cuda_kernels_match(path, **kwargs)


def pytest_addoption(parser):
    group = parser.getgroup("vjpcert")
    group.addoption("--vjpcert-cache", metavar="DIR", default=None,
                    help="keep the vjpcert fixture's certificates in DIR and reuse the current ones "
                         "(default: pytest's cache folder, .pytest_cache/d/vjpcert)")
    group.addoption("--vjpcert-no-cache", action="store_true", default=False,
                    help="derive every proof and check again; keep nothing")
    parser.addini("vjpcert_cache", default=None,
                  help="folder (relative to the ini file's) for the vjpcert fixture's certificates")


def _cache_dir(config) -> Path | None:
    """The folder named on the command line (relative to where pytest runs), else in the ini file
    (relative to it), else pytest's own cache; none when switched off, or when pytest's cache is
    (``-p no:cacheprovider``: a read-only checkout gets nothing written into it)."""
    if config.getoption("vjpcert_no_cache"):
        return None
    given = config.getoption("vjpcert_cache")
    if given:
        return Path(config.invocation_params.dir, given).resolve()
    ini = config.getini("vjpcert_cache")
    if ini:
        base = config.inipath.parent if config.inipath else config.rootpath
        return Path(base, ini).resolve()
    cache = getattr(config, "cache", None)
    return Path(cache.mkdir("vjpcert")) if cache is not None else None


def _cache(config):
    """The session's cache (made on first use)."""
    if _CACHE not in config.stash:
        from vjpcert.testing import CertificateCache
        where = _cache_dir(config)
        config.stash[_CACHE] = CertificateCache(where) if where is not None else None
    return config.stash[_CACHE]


@pytest.fixture
def vjpcert(request):
    """Prove, check, and compare implementations against specs, with readable failures."""
    return _Certifier(_cache(request.config))


def pytest_report_header(config):
    from importlib import metadata
    try:
        line = f"vjpcert {metadata.version('vjpcert')} (plugin: fixture `vjpcert`)"
    except metadata.PackageNotFoundError:
        return None
    if config.getoption("verbose") > 0:
        cache = _cache(config)
        line += f"; certificates cached in {cache.root}" if cache is not None else "; no certificate cache"
    return line


def pytest_terminal_summary(terminalreporter, config):
    cache = config.stash.get(_CACHE, None)
    if cache is not None and (cache.reused or cache.derived):
        terminalreporter.write_line(f"vjpcert: reused {cache.reused} current certificates, derived "
                                    f"{cache.derived} (cache: {cache.root})")
