"""functions written in nn/__init__.py and re-exported by functional.py."""
from . import softmax, scaled_dot_product_attention  # noqa: F401
