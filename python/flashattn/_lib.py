"""Python API layer: finds and loads libflashattn with ctypes and mirrors its C ABI.

Mirrors include/flashattn/flashattn.h field for field and checks the struct sizes against
the library. Knows nothing of torch; never compiles against anything.
"""

from __future__ import annotations

import ctypes
import glob
import os
import struct
import threading
from pathlib import Path

# fa_status
OK = 0
INVALID_ARGUMENT = 1
NOT_SUPPORTED = 2
DEVICE_ERROR = 3
OUT_OF_MEMORY = 4
INTERNAL_ERROR = 5

# fa_dtype
DTYPE_FP32 = 0
DTYPE_FP16 = 1
DTYPE_BF16 = 2

# fa_backend bits
BACKEND_CPU = 1
BACKEND_CUDA = 2

# fa_algorithm
ALGORITHM_AUTO = 0
ALGORITHM_FLASH = 1
ALGORITHM_REFERENCE = 2

DEVICE_CPU = -1

_i32 = ctypes.c_int32
_i64 = ctypes.c_int64


class FaTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("batch_stride", _i64),
        ("row_stride", _i64),
        ("head_stride", _i64),
        ("dim_stride", _i64),
    ]


class FaFwdParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("device", _i32),
        ("dtype", _i32),
        ("algorithm", _i32),
        ("batch", _i64),
        ("seqlen_q", _i64),
        ("seqlen_k", _i64),
        ("heads_q", _i64),
        ("heads_kv", _i64),
        ("head_dim", _i64),
        ("head_dim_v", _i64),
        ("q", FaTensor),
        ("k", FaTensor),
        ("v", FaTensor),
        ("o", FaTensor),
        ("lse", ctypes.c_void_p),
        ("scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("causal", _i32),
        ("deterministic", _i32),
        ("window_left", _i64),
        ("window_right", _i64),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("total_q", _i64),
        ("total_k", _i64),
        ("num_threads", _i32),
        ("reserved0", _i32),
    ]


class FaBwdParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("fwd", FaFwdParams),
        ("dout", FaTensor),
        ("dq", FaTensor),
        ("dk", FaTensor),
        ("dv", FaTensor),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
    ]


class FlatLayout:
    """A ctypes Structure's leaf fields, nested structs flattened, as one struct.Struct.

    `pack(*values)` returns a new instance with every leaf set, in `names` order, in one call,
    where setting the fields one attribute at a time costs a few microseconds a struct (the
    host time of a short attention call). Derived from `_fields_`, so it cannot drift from the
    mirror above; the offsets are checked against ctypes' own.
    """

    def __init__(self, cls):
        names, codes, fmt = [], [], "@"
        for name, offset, ctype in _leaves(cls, "", 0):
            code = ctype._type_
            at = struct.calcsize(fmt + code) - ctypes.sizeof(ctype)  # where '@' alignment puts it
            if at < offset:
                fmt += f"{offset - at}x"
                at = struct.calcsize(fmt + code) - ctypes.sizeof(ctype)
            if at != offset:
                raise ImportError(f"flashattn: {cls.__name__}.{name} at {offset}, packed at {at}")
            fmt += code
            names.append(name)
            codes.append(code)
        tail = ctypes.sizeof(cls) - struct.calcsize(fmt)
        self.struct = struct.Struct(fmt + (f"{tail}x" if tail > 0 else ""))
        if self.struct.size != ctypes.sizeof(cls):
            raise ImportError(f"flashattn: {cls.__name__} is {ctypes.sizeof(cls)} bytes, packed {self.struct.size}")
        self.names = tuple(names)
        self.codes = tuple(codes)
        self.cls = cls

    def pack(self, *values):
        """A new instance of the Structure with its leaves set to `values` (pointers as ints)."""
        out = self.cls()
        try:
            self.struct.pack_into(out, 0, *values)
        except (struct.error, OverflowError) as e:  # name the field, as a C caller would see it
            for name, code, value in zip(self.names, self.codes, values):
                try:
                    struct.pack("@" + code, value)
                except (struct.error, OverflowError):
                    raise ValueError(f"flashattn: {name} = {value!r} does not fit the library's field: {e}") from None
            raise
        return out


def _leaves(cls, prefix, base):
    for name, ctype in cls._fields_:
        offset = base + getattr(cls, name).offset
        if issubclass(ctype, ctypes.Structure):
            yield from _leaves(ctype, f"{prefix}{name}.", offset)
        else:
            yield f"{prefix}{name}", offset, ctype


FWD_LAYOUT = FlatLayout(FaFwdParams)
BWD_LAYOUT = FlatLayout(FaBwdParams)


class FaDeviceInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("cc_major", _i32),
        ("cc_minor", _i32),
        ("sm_count", _i32),
        ("total_memory", _i64),
        ("smem_per_block", _i64),
        ("name", ctypes.c_char * 256),
    ]


class FlashAttnError(RuntimeError):
    """A library call failed with a status other than invalid argument; `status` holds it."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class FlashAttnNotSupportedError(FlashAttnError, NotImplementedError):
    """The call is valid but this build or device cannot run it (FA_STATUS_NOT_SUPPORTED)."""


class FlashAttnOutOfMemoryError(FlashAttnError, MemoryError):
    """The library ran out of host or device memory (FA_STATUS_OUT_OF_MEMORY)."""


_LIB_NAMES = ("libflashattn.so", "libflashattn.dylib", "flashattn.dll")


def _candidates() -> list[Path]:
    """Where the library is looked for, in order (see docs/PYTHON.md)."""
    out: list[Path] = []
    pkg = Path(__file__).resolve().parent
    for sub in ("lib", "lib64", "."):
        for name in _LIB_NAMES:
            out.append(pkg / sub / name)
    repo = pkg.parent.parent  # python/flashattn -> repo root
    builds = []
    for name in _LIB_NAMES:
        for p in glob.glob(str(repo / "build*" / "src" / name)):
            # Sanitizer builds cannot be loaded into a Python process that was not started
            # with their runtime; skip folders named for them (build-asan, build-ubsan...).
            if "san" not in Path(p).parent.parent.name[len("build"):]:
                builds.append(p)
    # build/ first, then the most recently built, so a fresh CMake build wins over a stale one.
    builds.sort(key=lambda p: (Path(p).parent.parent.name != "build", -os.path.getmtime(p)))
    out += [Path(p) for p in builds]
    return out


def _find() -> Path:
    env = os.environ.get("FLASHATTN_LIBRARY")
    if env:
        p = Path(env)
        if not p.is_file():
            raise ImportError(f"flashattn: FLASHATTN_LIBRARY={env!r} is not a file")
        return p
    cands = _candidates()
    for p in cands:
        if p.is_file():
            return p
    tried = "\n  ".join(str(p) for p in cands[:3] + [Path("<repo>/build*/src/libflashattn.so")])
    raise ImportError(
        "flashattn: libflashattn not found. Set FLASHATTN_LIBRARY to its path, install the package "
        "with `pip install .`, or build it with CMake into <repo>/build. Looked in:\n  " + tried
    )


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    sig = {
        "fa_version": (c.c_char_p, []),
        "fa_last_error": (c.c_char_p, []),
        "fa_status_string": (c.c_char_p, [c.c_int]),
        "fa_compiled_backends": (c.c_uint32, []),
        "fa_cuda_device_count": (c.c_int32, []),
        "fa_get_device_info": (c.c_int, [c.c_int32, c.POINTER(FaDeviceInfo)]),
        "fa_cpu_features": (c.c_char_p, []),
        "fa_cuda_kernels": (c.c_char_p, []),
        "fa_sizeof_fwd_params": (c.c_size_t, []),
        "fa_sizeof_bwd_params": (c.c_size_t, []),
        "fa_can_implement_fwd": (c.c_int, [c.POINTER(FaFwdParams)]),
        "fa_can_implement_bwd": (c.c_int, [c.POINTER(FaBwdParams)]),
        "fa_fwd_kernel_name": (c.c_char_p, [c.POINTER(FaFwdParams)]),
        "fa_bwd_kernel_name": (c.c_char_p, [c.POINTER(FaBwdParams)]),
        "fa_fwd": (c.c_int, [c.POINTER(FaFwdParams), c.c_void_p]),
        "fa_bwd_workspace_size": (c.c_int, [c.POINTER(FaBwdParams), c.POINTER(c.c_size_t)]),
        "fa_bwd": (c.c_int, [c.POINTER(FaBwdParams), c.c_void_p]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_path: Path | None = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded on first use; ImportError when it cannot be found)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = _find()
            try:
                handle = ctypes.CDLL(str(path))
            except OSError as e:
                raise ImportError(f"flashattn: cannot load {path}: {e}") from e
            _declare(handle)
            for fn, cls in (("fa_sizeof_fwd_params", FaFwdParams), ("fa_sizeof_bwd_params", FaBwdParams)):
                got, want = getattr(handle, fn)(), ctypes.sizeof(cls)
                if got != want:
                    raise ImportError(
                        f"flashattn: {path} has {fn}() = {got} but the Python binding's struct is "
                        f"{want} bytes: the library and the package come from different versions"
                    )
            _path = path
            _lib = handle
    return _lib


def library_path() -> str:
    """Path of the loaded libflashattn."""
    lib()
    return str(_path)


def last_error() -> str:
    return (lib().fa_last_error() or b"").decode("utf-8", "replace")


def check(status: int, what: str = "") -> None:
    """Raises the Python exception for a fa_status, with the library's message."""
    if status == OK:
        return
    msg = last_error() or f"{what}: " + (lib().fa_status_string(status) or b"").decode()
    msg = f"flashattn: {msg}"
    if status == INVALID_ARGUMENT:
        raise ValueError(msg)
    if status == NOT_SUPPORTED:
        raise FlashAttnNotSupportedError(msg, status)
    if status == OUT_OF_MEMORY:
        raise FlashAttnOutOfMemoryError(msg, status)
    raise FlashAttnError(msg, status)


def version() -> str:
    return lib().fa_version().decode()


def compiled_backends() -> int:
    return int(lib().fa_compiled_backends())


def has_cuda() -> bool:
    return bool(compiled_backends() & BACKEND_CUDA)


def cuda_device_count() -> int:
    return int(lib().fa_cuda_device_count())


def cpu_features() -> str:
    return (lib().fa_cpu_features() or b"").decode()


def cuda_kernels() -> str:
    """The compiled CUDA kernels, one line each ("" without the CUDA backend)."""
    return (lib().fa_cuda_kernels() or b"").decode()


def device_info(device: int) -> dict:
    info = FaDeviceInfo()
    info.struct_size = ctypes.sizeof(FaDeviceInfo)
    check(lib().fa_get_device_info(device, ctypes.byref(info)), "device_info")
    return {
        "name": info.name.decode(),
        "cc": (info.cc_major, info.cc_minor),
        "sm_count": info.sm_count,
        "total_memory": info.total_memory,
        "smem_per_block": info.smem_per_block,
    }
