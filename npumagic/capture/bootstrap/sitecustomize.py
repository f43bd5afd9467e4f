"""npumagic's start-up hook for ``npumagic run``: this folder goes first on the PYTHONPATH of
the command it runs, so every Python interpreter the command starts (torchrun's ranks too)
imports this module at start-up. It runs the sitecustomize it hides, if any; then, where
NPUMAGIC_RUN is set, it waits for the script to import torch's optimizers and only then arms
npumagic's capture (see npumagic.capture.inject): an interpreter that never trains (torchrun's
launcher, a helper) imports nothing more. A capture that cannot be armed is reported once and
the command runs unprofiled: a profiler must never stop the training."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_TRIGGER = "torch.optim.optimizer"


def _chain():
    """Run the sitecustomize this one shadows (a distribution's or a virtualenv's)."""
    path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _arm(module):
    try:
        from npumagic.capture import inject
    except ImportError:
        sys.path.append(os.environ.get("NPUMAGIC_PATH", ""))  # npumagic not installed where the command runs
        from npumagic.capture import inject
    inject.arm_from_environment()


class _ArmAfterOptimizers(importlib.abc.MetaPathFinder):
    """Wraps the loader of torch.optim.optimizer to arm the capture right after it ran."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _TRIGGER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                _arm(module)
            except Exception as exc:  # noqa: BLE001
                print(f"npumagic: the capture could not be armed ({type(exc).__name__}: {exc}); running unprofiled",
                      file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


_chain()
if os.environ.get("NPUMAGIC_RUN"):
    if _TRIGGER in sys.modules:
        _arm(sys.modules[_TRIGGER])
    else:
        sys.meta_path.insert(0, _ArmAfterOptimizers())
