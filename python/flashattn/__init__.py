"""flashattn: exact attention, IO-aware, forward and backward, on CPU and CUDA.

The package loads libflashattn through ctypes (one library serves every torch version) and
registers the torch.library ops flashattn::fwd, bwd, varlen_fwd and varlen_bwd with autograd
and fake kernels. See docs/PYTHON.md.
"""

from . import _lib

# Load the library now, so `import flashattn` fails early and clearly when it is missing.
_lib.lib()

from . import _ops  # noqa: E402,F401  (registers the torch.library ops)
from ._lib import (  # noqa: E402
    FlashAttnError,
    FlashAttnNotSupportedError,
    FlashAttnOutOfMemoryError,
    cpu_features,
    cuda_kernels,
    cuda_device_count,
    device_info,
    has_cuda,
    library_path,
)
from ._ops import bwd_kernel_name, fwd_kernel_name  # noqa: E402
from .interface import (  # noqa: E402
    attention,
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)

__version__ = "0.1.0"


def library_version() -> str:
    """Version of the loaded libflashattn (fa_version())."""
    return _lib.version()


__all__ = [
    "attention",
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "fwd_kernel_name",
    "bwd_kernel_name",
    "library_path",
    "library_version",
    "has_cuda",
    "cuda_device_count",
    "device_info",
    "cpu_features",
    "cuda_kernels",
    "FlashAttnError",
    "FlashAttnNotSupportedError",
    "FlashAttnOutOfMemoryError",
]
