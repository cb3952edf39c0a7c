import os

_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
__path__.append(os.path.join(_PACKAGE, "harness", "rule"))
