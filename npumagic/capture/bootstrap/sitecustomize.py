"""npumagic's start-up hook for ``npumagic run``: this folder goes first on the PYTHONPATH of
the command it runs, so every Python interpreter the command starts (torchrun's ranks too)
imports this module at start-up. It runs the sitecustomize it hides, if any; then, where
NPUMAGIC_RUN is set, it registers a global optimizer step hook once the script imports
torch.optim, and arms npumagic's capture (see npumagic.capture.inject) at the first
optimizer.step(), or as soon as the script imports npumagic itself: an interpreter that never
steps (torchrun's launcher, a DataLoader worker) never imports npumagic. A capture that cannot
be armed is reported once and the command runs unprofiled: a profiler must never stop the
training."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import weakref

_here = os.path.dirname(os.path.abspath(__file__))
_injected = None  # the armed capture
_failed = False
_arming = False  # importing npumagic to arm fires the hook on "npumagic" below: one capture, not two
_loaders = []  # weak references to the DataLoaders iterated before arming


def _chain():
    """Run the sitecustomize this one shadows (a distribution's or a virtualenv's)."""
    path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _arm():
    global _injected, _failed, _arming
    if _injected is not None or _failed or _arming:
        return _injected
    _arming = True
    try:
        try:
            from npumagic.capture import inject
        except ImportError:
            sys.path.append(os.environ.get("NPUMAGIC_PATH", ""))  # npumagic not installed where the command runs
            from npumagic.capture import inject
        _injected = inject.arm_from_environment(hook=False, seen_loaders=[r() for r in _loaders if r() is not None])
    except Exception as exc:  # noqa: BLE001
        _failed = True
        print(f"npumagic: the capture could not be armed ({type(exc).__name__}: {exc}); running unprofiled",
              file=sys.stderr)
    finally:
        _arming = False
    return _injected


def _step_hook(optimizer, args, kwargs):
    injected = _arm()
    if injected is not None:
        injected.optimizer_step()


def _after_optimizers(module):
    module.register_optimizer_step_post_hook(_step_hook)
    loaders = sys.modules.get("torch.utils.data.dataloader")
    if loaders is not None and hasattr(loaders, "DataLoader"):
        original = loaders.DataLoader.__iter__

        def __iter__(self):
            if _injected is None:  # once armed, npumagic watches the loaders itself
                _loaders.append(weakref.ref(self))
            return original(self)

        loaders.DataLoader.__iter__ = __iter__


def _find_spec_past(finder, fullname, path, target):
    """The spec the finders after ``finder`` give: a package installed in editable mode is
    found by setuptools' own finder, not by sys.path."""
    for other in sys.meta_path[:]:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of each module in ``then`` to call ``then[name](module)`` right after it ran."""

    def __init__(self, then):
        self.then = then

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.then:
            return None
        then = self.then.pop(fullname)
        if not self.then:
            sys.meta_path.remove(self)
        spec = _find_spec_past(self, fullname, path, target)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                then(module)
            except Exception as exc:  # noqa: BLE001
                print(f"npumagic: the capture could not be armed ({type(exc).__name__}: {exc}); running unprofiled",
                      file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


_chain()
if os.environ.get("NPUMAGIC_RUN"):
    sys.meta_path.insert(0, _AfterImport({"torch.optim.optimizer": _after_optimizers,
                                          "npumagic": lambda module: _arm()}))
