import os

_REAL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "harness")
__path__.append(_REAL)
with open(os.path.join(_REAL, "__init__.py")) as _f:
    exec(compile(_f.read(), os.path.join(_REAL, "__init__.py"), "exec"), globals())
