"""The library functions that may run operators for graded code: glue that computes nothing on its behalf.

Every operator a graded call runs is traced to the Python function that ran it (record.py). When that is
library code (torch's Python modules, einops, einx, any installed package) called from the student's code,
every library function between the student's line and the operator must match `GLUE`; any other holds the
problem for the staff's review, naming the function. A deny-list of library names would trail the library
(torch.distributions' normalised logits, torch._decomp, torch._refs and flex attention's math path each
compute softmax from `amax`, `exp` and `sum`); this list is the other way round, and short.

Patterns are fnmatch patterns over `module.qualified_name` (the module read from the file's place under
its folder of sys.path, the name from the code object: neither can be renamed by the code being graded).
A pattern that starts with `!` takes names back out (checked first). A course adds its own patterns with
`library_glue = [...]` in `[tool.cs-basics]`; this default is versioned with the harness.
"""

from __future__ import annotations

GLUE = (
    # the Tensor's Python operators and methods (1 - x, x ** 2, x.split, iter(x), x.backward), tensor printing
    "torch._tensor.*", "torch._tensor_str.*",
    # torch.functional: Python wrappers that each hand one operator its arguments
    "torch.functional.einsum", "torch.functional.split", "torch.functional.broadcast_tensors",
    "torch.functional.broadcast_shapes", "torch.functional.meshgrid", "torch.functional._meshgrid",
    "torch.functional.tensordot", "torch.functional.atleast_*", "torch.functional.block_diag",
    "torch.functional.cartesian_prod", "torch.functional.chain_matmul", "torch.functional.norm",
    "torch.functional.cdist", "torch.functional.unravel_index", "torch.functional._unravel_index",
    "torch.functional.unique*", "torch.functional._unique_impl", "torch.functional._return_*",
    "torch.functional._consecutive_return_*", "torch._jit_internal.boolean_dispatch.<locals>.fn",
    # torch.nn.functional's shape and elementwise helpers
    "torch.nn.functional.pad", "torch.nn.functional.normalize", "torch.nn.functional.linear",
    "torch.nn.functional.bilinear", "torch.nn.functional.*dropout*", "torch.nn.functional.one_hot",
    "torch.nn.functional.embedding", "torch.nn.functional.unfold", "torch.nn.functional.fold",
    "torch.nn.functional.relu*", "torch.nn.functional.elu*", "torch.nn.functional.selu*",
    "torch.nn.functional.celu*", "torch.nn.functional.leaky_relu*", "torch.nn.functional.gelu",
    "torch.nn.functional.silu", "torch.nn.functional.mish", "torch.nn.functional.hardtanh*",
    "torch.nn.functional.hardswish", "torch.nn.functional.hardsigmoid", "torch.nn.functional.sigmoid",
    "torch.nn.functional.tanh", "torch.nn.functional.logsigmoid", "torch.nn.functional.softplus",
    "torch.nn.functional.softsign", "torch.nn.functional.tanhshrink", "torch.nn.functional.threshold*",
    "torch.nn.functional.glu",
    # modules: calling one (nn.Module.__call__), moving it, its parameters and their initialisation;
    # the linear, dropout, flatten and container layers
    "torch.nn.modules.module.*", "torch.nn.parameter.*", "torch.nn.init.*", "torch.nn.modules.*.__init__",
    "torch.nn.modules.*.reset_parameters", "torch.nn.modules.linear.*", "torch.nn.modules.dropout.*",
    "torch.nn.modules.flatten.*", "torch.nn.modules.container.*",
    # autograd.Function.apply, no_grad and its decorator, the device context
    "torch.autograd.function.*", "torch.autograd.grad_mode.*", "torch.utils._contextlib.*", "torch.utils._device.*",
    # activation checkpointing: it saves, detaches and reruns the code it wraps (the student's), computes nothing
    "torch.utils.checkpoint.*",
    # the wrappers of torch._disable_dynamo (checkpoint's decorator): each calls the function it wraps, judged too
    "torch._compile._disable_dynamo.<locals>.inner", "torch._dynamo.eval_frame.DisableContext.__call__.<locals>._fn",
    # einops; einx but for its softmax (computed from amax, exp and sum); type checkers' wrappers
    "einops.*", "einx.*", "!einx.*softmax*", "jaxtyping.*", "beartype.*",
    "torch.nn.modules.*._reset_parameters",
)  # fmt: skip

# library functions that run code generated for another function, named after that function: einx's API
# wrapper runs the code it compiled for one operation (einx.dot, einx.softmax, ...), which its local
# `construct_graph_with_cache` wraps. One it cannot name is no glue (a later einx fails closed).
WRAPPERS = {
    "einx._src.frontend.api._api_withoutbackend.<locals>.inner": ("construct_graph_with_cache", "einx"),
    "einx._src.frontend.api._api_withbackend.<locals>.inner": ("construct_graph_with_cache", "einx"),
}
