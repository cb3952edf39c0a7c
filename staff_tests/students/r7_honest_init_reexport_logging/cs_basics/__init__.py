"""cs_basics: my implementations for the attention assignment."""

from cs_basics.nn.functional import scaled_dot_product_attention, softmax

__all__ = ["scaled_dot_product_attention", "softmax"]
__version__ = "0.1.0"
