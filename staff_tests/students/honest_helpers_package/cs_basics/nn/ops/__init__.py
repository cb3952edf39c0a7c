from .attention import attention
from .softmax import stable_softmax

__all__ = ["attention", "stable_softmax"]
