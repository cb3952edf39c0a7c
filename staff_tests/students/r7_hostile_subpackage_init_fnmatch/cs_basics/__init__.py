from . import nn  # noqa: F401  (the package exposes its sub-package, as many do)
