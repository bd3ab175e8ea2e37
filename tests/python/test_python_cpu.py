"""The Python package on a machine with no GPU: imports, version and build info, the ctypes structs,
constants and AOTK_..._INIT initializers against include/aotk.h, errors from the C side as AotkError
(decoding, its appending fields and merge included), a library too old refused at load, the argument
checks of the torch front ends (with torch) or their ImportError (without), the fake implementations
of the custom ops, aotk::decode's declared cache mutation (its schema, and what torch.export's
functional graph makes of it), the front ends run on fake CUDA tensors (with torch: appending goes to
the library through aotk::decode, nothing else writes the caches), and an install with pip. Passes with
and without torch installed.

    python3 tests/python/test_python_cpu.py --package-dir build/python --include-dir include [--cc cc]

--package-dir is the tree `make` assembles (build/python: the package and a copy of libaotk.so). Ends
with "N passed, M failed, K skipped"; exits 1 on a failure, 77 when nothing could run.
"""
import argparse
import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback


class Skip(Exception):
    pass


ARGS = None
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_raises(exc_type, words, fn, *args, **kwargs):
    """fn(*args, **kwargs) must raise exc_type with every one of `words` in its message."""
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        message = str(e)
        missing = [w for w in words if w not in message]
        expect(not missing, f"{type(e).__name__} message lacks {missing}: {message!r}")
        return e
    except Exception as e:  # noqa: BLE001: the wrong exception is a failure, shown whole
        raise AssertionError(f"expected {exc_type.__name__} naming {words}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {exc_type.__name__} naming {words}, nothing was raised")


def run_python(code, env_changes=None, cwd=None):
    """Runs `code` in a fresh interpreter with the package dir on sys.path; returns (rc, output)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ARGS.package_dir
    env.pop("AOTK_LIBRARY", None)
    env.update(env_changes or {})
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd or tempfile.gettempdir(),
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def header_version():
    text = open(os.path.join(ARGS.include_dir, "aotk.h")).read()
    parts = [re.search(rf"#define AOTK_VERSION_{p} (\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def torch_or_skip():
    if importlib.util.find_spec("torch") is None:
        raise Skip("torch is not installed (the no-torch path is test_no_torch_error)")
    import torch
    return torch


# ---------------------------------------------------------------------------------------------------

@test
def test_import_from_build_tree():
    import aotk
    expect(os.path.realpath(aotk.__file__).startswith(os.path.realpath(ARGS.package_dir) + os.sep),
           f"aotk was imported from {aotk.__file__}, not from {ARGS.package_dir}")
    expected = os.path.join(ARGS.package_dir, "aotk", "libaotk.so")
    expect(os.path.realpath(aotk.library_path()) == os.path.realpath(expected),
           f"library_path() = {aotk.library_path()}, expected the copy beside the package, {expected}")
    # `import aotk` alone must not import torch (nor need it).
    rc, out = run_python("import sys, aotk; aotk.version(); print('torch' in sys.modules)")
    expect(rc == 0 and out.strip() == "False", f"import aotk imported torch or failed (rc {rc}): {out}")


@test
def test_version():
    import aotk
    expected = header_version()
    expect(aotk.version() == expected, f"aotk.version() = {aotk.version()}, include/aotk.h says {expected}")
    expect(aotk.__version__ == expected, f"aotk.__version__ = {aotk.__version__}, include/aotk.h says {expected}")
    major, minor, patch = (int(x) for x in expected.split("."))
    expect(aotk.version_number() == major * 10000 + minor * 100 + patch, f"version_number() = {aotk.version_number()}")
    pyproject = open(os.path.join(ARGS.package_dir, "pyproject.toml")).read()
    m = re.search(r'^version = "([^"]+)"', pyproject, re.M)
    expect(m and m.group(1) == expected, f"pyproject.toml's version is {m and m.group(1)}, the library's {expected}")


@test
def test_build_info():
    import aotk
    info = aotk.build_info()
    print(f"    {info}")
    expect(re.fullmatch(r"\d+\.\d+\.\d+", info["triton_version"]), f"triton_version {info['triton_version']!r}")
    expect(info["ptxas_version"], "ptxas_version is empty")
    expect(info["kernels_sm80"] > 0 and info["kernels_sm90"] > 0, "no kernels in the build")
    expect(info["catalog_kernels"] >= max(info["kernels_sm80"], info["kernels_sm90"]), "catalog smaller than the build")
    expect(info["image_bytes_sm80"] > 0 and info["image_bytes_sm90"] > 0, "no image bytes")


@test
def test_struct_layouts():
    """Every ctypes struct against the header's offsetof and sizeof, compiled by the C compiler."""
    from aotk import _capi
    cc = ARGS.cc or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Skip("no C compiler")
    src = ["#include <stdio.h>", "#include <stddef.h>", '#include "aotk.h"', "int main(void) {"]
    for cname, cls in _capi.STRUCTS:
        src.append(f'  printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        src += [f'  printf("{cname} {f} %zu\\n", offsetof({cname}, {f}));' for f, _ in cls._fields_]
    src.append("  return 0;\n}")
    with tempfile.TemporaryDirectory() as tmp:
        c_path, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(c_path, "w") as f:
            f.write("\n".join(src) + "\n")
        r = subprocess.run([cc, "-std=c11", "-I", ARGS.include_dir, c_path, "-o", exe], capture_output=True, text=True)
        expect(r.returncode == 0, f"the probe did not compile (a field the header lacks?):\n{r.stderr}")
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    c_values = {}
    for line in out.splitlines():
        cname, field, value = line.split()
        c_values[(cname, field)] = int(value)
    problems = []
    for cname, cls in _capi.STRUCTS:
        if c_values[(cname, "sizeof")] != ctypes.sizeof(cls):
            problems.append(f"sizeof({cname}) = {c_values[(cname, 'sizeof')]}, ctypes {ctypes.sizeof(cls)}")
        for f, _ in cls._fields_:
            if c_values[(cname, f)] != getattr(cls, f).offset:
                problems.append(f"offsetof({cname}, {f}) = {c_values[(cname, f)]}, ctypes {getattr(cls, f).offset}")
    # A field missing at the end would pass the offsets; the size catches it, unless it fit in padding:
    # compare the header's field names too.
    header = open(os.path.join(ARGS.include_dir, "aotk.h")).read()
    for cname, cls in _capi.STRUCTS:
        body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (cname, cname), header, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        c_fields = re.findall(r"(\w+)(?:\[[^\]]*\])?;", body)
        py_fields = [f for f, _ in cls._fields_]
        if c_fields != py_fields:
            problems.append(f"{cname}: header fields {c_fields}, ctypes {py_fields}")
    expect(not problems, "; ".join(problems))
    print(f"    {len(_capi.STRUCTS)} structs, {sum(len(c._fields_) for _, c in _capi.STRUCTS)} fields match")


@test
def test_feature_names():
    """_capi.FEATURE_NAMES names every AOTK_FEATURE_* bit of the header, in bit order (the bit's macro
    is AOTK_FEATURE_ and the name upper-cased)."""
    from aotk import _capi
    header = open(os.path.join(ARGS.include_dir, "aotk.h")).read()
    bits = {int(b): name for name, b in re.findall(r"#define AOTK_FEATURE_(\w+) \(1u << (\d+)\)", header)}
    expected = [bits[i] for i in range(len(bits))]
    got = [n.upper() for n in _capi.FEATURE_NAMES]
    expect(got == expected, f"FEATURE_NAMES {got}, the header's bits {expected}")
    print(f"    {len(got)} feature bits")


@test
def test_constants():
    """Every integer constant _capi mirrors (AOTK_OP_*, AOTK_DTYPE_*, AOTK_DECODE_MAX_*, statuses, ...) has
    the header's value: #define AOTK_NAME N, enumerators AOTK_NAME = N, and the status list's X(AOTK_NAME, N, ...)."""
    from aotk import _capi
    header = open(os.path.join(ARGS.include_dir, "aotk.h")).read()
    values = {name: int(v) for name, v in re.findall(r"#define (AOTK_\w+) (\d+)\s*$", header, re.M)}
    values.update({name: int(v) for name, v in re.findall(r"^\s*(AOTK_\w+) = (\d+),", header, re.M)})
    values.update({name: int(v) for name, v in re.findall(r"X\((AOTK_\w+), (\d+),", header)})  # the status list
    mirrored = [n for n in dir(_capi) if n.startswith("AOTK_") and isinstance(getattr(_capi, n), int)]
    problems = [f"{n} = {getattr(_capi, n)}, the header's {values.get(n)}" for n in mirrored
                if getattr(_capi, n) != values.get(n)]
    for needed in ("AOTK_OP_DECODE", "AOTK_OP_MERGE", "AOTK_DECODE_MAX_SPLITS", "AOTK_DECODE_MAX_SEQLEN_Q"):
        expect(needed in mirrored, f"_capi lacks {needed}")
    expect(not problems, "; ".join(problems))
    print(f"    {len(mirrored)} constants match")


@test
def test_init_macros():
    """_capi's initializers (attn_params(), decode_params(), ...) make the bytes that the header's
    AOTK_..._INIT macros make, compiled into static (so zero-padded) structs by the C compiler."""
    from aotk import _capi
    cc = ARGS.cc or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Skip("no C compiler")
    cases = (("aotk_attn_params", "AOTK_ATTN_PARAMS_INIT", _capi.attn_params),
             ("aotk_sel_params", "AOTK_SEL_PARAMS_INIT", _capi.sel_params),
             ("aotk_decode_params", "AOTK_DECODE_PARAMS_INIT", _capi.decode_params),
             ("aotk_merge_params", "AOTK_MERGE_PARAMS_INIT", _capi.merge_params),
             ("aotk_kernel_info", "AOTK_KERNEL_INFO_INIT", _capi.kernel_info))
    src = ["#include <stdio.h>", '#include "aotk.h"',
           "static void dump(const char *name, const void *p, size_t n) {",
           '  printf("%s ", name);',
           "  for (size_t i = 0; i < n; i++) printf(\"%02x\", ((const unsigned char *)p)[i]);",
           '  printf("\\n");', "}", "int main(void) {"]
    for cname, macro, _ in cases:
        src += [f"  static const {cname} {macro.lower()} = {macro};",
                f'  dump("{macro}", &{macro.lower()}, sizeof {macro.lower()});']
    src.append("  return 0;\n}")
    with tempfile.TemporaryDirectory() as tmp:
        c_path, exe = os.path.join(tmp, "init_probe.c"), os.path.join(tmp, "init_probe")
        with open(c_path, "w") as f:
            f.write("\n".join(src) + "\n")
        r = subprocess.run([cc, "-std=c11", "-I", ARGS.include_dir, c_path, "-o", exe], capture_output=True, text=True)
        expect(r.returncode == 0, f"the probe did not compile:\n{r.stderr}")
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    c_bytes = dict(line.split() for line in out.splitlines())
    problems = []
    for cname, macro, init in cases:
        p = init()
        py_bytes = ctypes.string_at(ctypes.addressof(p), ctypes.sizeof(p)).hex()
        if py_bytes != c_bytes[macro]:
            fields = type(p)._fields_
            spans = [(n, 2 * getattr(type(p), n).offset, 2 * (getattr(type(p), n).offset + getattr(type(p), n).size))
                     for n, _ in fields]
            differing = [n for n, a, b in spans if py_bytes[a:b] != c_bytes[macro][a:b]]
            problems.append(f"{init.__name__}() differs from {macro} in {differing or 'padding'}")
    expect(not problems, "; ".join(problems))
    print(f"    {len(cases)} initializers match their macros")


@test
def test_c_errors_become_aotk_error():
    import aotk
    from aotk import _capi
    lib = _capi.library()
    e = expect_raises(aotk.AotkError, ["aotk_attn_fwd", "AOTK_ERROR_STRUCT_SIZE", "struct_size"],
                      lambda: lib.check(lib.lib.aotk_attn_fwd(ctypes.byref(_capi.AotkAttnParams()), None),
                                        "aotk_attn_fwd"))
    expect(isinstance(e, RuntimeError), "AotkError is not a RuntimeError")
    expect(e.status == 2 and e.status_name == "AOTK_ERROR_STRUCT_SIZE", f"status {e.status} {e.status_name}")

    # A validation error names the argument (validation runs before the driver is needed).
    p = _capi.attn_params()
    p.q, p.k, p.v, p.out = (made_up_tensor(shape) for shape in ((1, 16, 2, 80), (1, 16, 2, 64), (1, 16, 2, 64),
                                                                (1, 16, 2, 64)))
    e = expect_raises(aotk.AotkError, ["AOTK_ERROR_HEAD_DIM_MISMATCH", "q.shape[3] = 80"],
                      lambda: lib.check(lib.lib.aotk_attn_fwd(ctypes.byref(p), None), "aotk_attn_fwd"))
    expect(e.detail and e.hint, f"detail {e.detail!r}, hint {e.hint!r}")


def made_up_tensor(shape, dtype=None, address=0x10000):
    """An aotk_tensor describing a contiguous tensor at a made-up (16-byte-aligned) address: enough for
    the validation, which runs before the driver is needed and never dereferences."""
    from aotk import _capi
    t = _capi.AotkTensor()
    t.data, t.dtype, t.rank = address, dtype or _capi.AOTK_DTYPE_BFLOAT16, len(shape)
    stride = 1
    for i in reversed(range(len(shape))):
        t.shape[i], t.strides[i] = shape[i], stride
        stride *= shape[i]
    return t


def decode_params_for_test(seqlen_q=1):
    from aotk import _capi
    p = _capi.decode_params()
    batch, heads_q, heads_kv, capacity, d = 2, 8, 2, 64, 64
    p.q = made_up_tensor((batch, seqlen_q, heads_q, d))
    p.k_cache = made_up_tensor((batch, capacity, heads_kv, d), address=0x100000)
    p.v_cache = made_up_tensor((batch, capacity, heads_kv, d), address=0x200000)
    p.cache_seqlens = made_up_tensor((batch,), _capi.AOTK_DTYPE_INT32, address=0x300000)
    p.out = made_up_tensor((batch, seqlen_q, heads_q, d), address=0x400000)
    return p


def merge_params_for_test(lse_heads=4):
    from aotk import _capi
    p = _capi.merge_params()
    p.out_partials = made_up_tensor((3, 2, 5, 4, 64), _capi.AOTK_DTYPE_FLOAT32)
    p.lse_partials = made_up_tensor((3, 2, lse_heads, 5), _capi.AOTK_DTYPE_FLOAT32, address=0x100000)
    p.out = made_up_tensor((2, 5, 4, 64), address=0x200000)
    return p


@test
def test_decode_and_merge_errors():
    """aotk_attn_decode, aotk_attn_merge and their queries through the ctypes signatures: a struct left
    uninitialized, and validation errors naming the argument; a valid call gets as far as the driver."""
    import aotk
    from aotk import _capi
    lib = _capi.library()
    expect_raises(aotk.AotkError, ["aotk_attn_decode", "AOTK_ERROR_STRUCT_SIZE", "AOTK_DECODE_PARAMS_INIT"],
                  lambda: lib.check(lib.lib.aotk_attn_decode(ctypes.byref(_capi.AotkDecodeParams()), None, 0, None),
                                    "aotk_attn_decode"))
    expect_raises(aotk.AotkError, ["aotk_attn_merge", "AOTK_ERROR_STRUCT_SIZE", "AOTK_MERGE_PARAMS_INIT"],
                  lambda: lib.check(lib.lib.aotk_attn_merge(ctypes.byref(_capi.AotkMergeParams()), None),
                                    "aotk_attn_merge"))
    too_long = decode_params_for_test(seqlen_q=_capi.AOTK_DECODE_MAX_SEQLEN_Q + 1)
    expect_raises(aotk.AotkError, ["AOTK_ERROR_INVALID_VALUE", f"q.shape[1] = {_capi.AOTK_DECODE_MAX_SEQLEN_Q + 1}"],
                  lambda: lib.check(lib.lib.aotk_attn_decode(ctypes.byref(too_long), None, 0, None),
                                    "aotk_attn_decode"))
    expect_raises(aotk.AotkError, ["aotk_decode_query", "AOTK_ERROR_INVALID_VALUE", "q.shape[1]"],
                  lib.query, _capi.AOTK_OP_DECODE, too_long)
    splits = decode_params_for_test()
    splits.num_splits = _capi.AOTK_DECODE_MAX_SPLITS + 1
    expect_raises(aotk.AotkError, ["aotk_decode_query", "num_splits"], lib.query, _capi.AOTK_OP_DECODE, splits)
    expect_raises(aotk.AotkError, ["aotk_merge_query", "AOTK_ERROR_SHAPE_MISMATCH", "lse_partials"],
                  lib.query, _capi.AOTK_OP_MERGE, merge_params_for_test(lse_heads=3))
    # Appending: k_new and v_new, the struct's trailing fields, reach the library (a v_new missing or of
    # the wrong heads is refused naming it).
    append = decode_params_for_test()
    append.k_new = made_up_tensor((2, 1, 2, 64), address=0x500000)
    expect_raises(aotk.AotkError, ["aotk_decode_query", "AOTK_ERROR_NULL_POINTER", "v_new.data is NULL"],
                  lib.query, _capi.AOTK_OP_DECODE, append)
    append.v_new = made_up_tensor((2, 1, 3, 64), address=0x600000)
    expect_raises(aotk.AotkError, ["AOTK_ERROR_SHAPE_MISMATCH", "v_new.shape[2] = 3", "heads_kv = 2"],
                  lambda: lib.check(lib.lib.aotk_attn_decode(ctypes.byref(append), None, 0, None), "aotk_attn_decode"))
    append.v_new = made_up_tensor((2, 1, 2, 64), address=0x600000)
    for op, params in ((_capi.AOTK_OP_DECODE, decode_params_for_test()), (_capi.AOTK_OP_DECODE, append),
                       (_capi.AOTK_OP_MERGE, merge_params_for_test())):
        try:
            info = lib.query(op, params)
        except aotk.AotkError as e:
            expect(e.status_name.startswith("AOTK_ERROR_NO_") or e.cuda_result, f"op {op}: unexpected {e}")
        else:
            print(f"    op {op}: {info.kernel_name.decode()}, {info.num_splits} splits (this machine has a GPU)")
            expect(op != _capi.AOTK_OP_DECODE or params is not append or
                   info.features & (1 << _capi.FEATURE_NAMES.index("append_kv")), "appending without append_kv")


@test
def test_preload_without_gpu():
    import aotk
    try:
        aotk.preload()
    except aotk.AotkError as e:
        print(f"    {e}")
        expect(e.status_name.startswith("AOTK_ERROR_NO_") or e.cuda_result, f"unexpected {e.status_name}: {e}")
        return
    print("    preload succeeded: this machine has a GPU")


@test
def test_aotk_library_env():
    # AOTK_LIBRARY set but wrong: import works, the first call fails naming the variable and the path.
    rc, out = run_python("import aotk\n"
                         "try:\n    aotk.version()\nexcept aotk.AotkError as e:\n    print('ERR', e)\n",
                         {"AOTK_LIBRARY": "/nonexistent/libaotk.so"})
    expect(rc == 0 and "ERR" in out and "AOTK_LIBRARY" in out and "/nonexistent/libaotk.so" in out,
           f"rc {rc}: {out}")
    # AOTK_LIBRARY set and right: that file is loaded.
    path = os.path.realpath(os.path.join(ARGS.package_dir, "aotk", "libaotk.so"))
    with tempfile.TemporaryDirectory() as tmp:
        other = os.path.join(tmp, "libaotk-other.so")
        shutil.copy(path, other)
        rc, out = run_python("import aotk; print(aotk.library_path()); print(aotk.version())", {"AOTK_LIBRARY": other})
        expect(rc == 0 and out.splitlines()[0] == other, f"rc {rc}: {out}")


@test
def test_library_too_old():
    """A library that lacks the package's functions (here an empty one) is refused when loaded, naming
    what it lacks and the version needed, not at the first call of a missing function."""
    cc = ARGS.cc or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Skip("no C compiler")
    with tempfile.TemporaryDirectory() as tmp:
        c_path, so = os.path.join(tmp, "empty.c"), os.path.join(tmp, "libaotk-empty.so")
        with open(c_path, "w") as f:
            f.write("int aotk_not_a_function(void) { return 0; }\n")
        r = subprocess.run([cc, "-shared", "-fPIC", c_path, "-o", so], capture_output=True, text=True)
        expect(r.returncode == 0, f"the empty library did not build:\n{r.stderr}")
        rc, out = run_python("import aotk\n"
                             "try:\n    aotk.version()\nexcept aotk.AotkError as e:\n    print('ERR', e)\n",
                             {"AOTK_LIBRARY": so})
    expect(rc == 0 and "ERR" in out and "aotk_attn_decode" in out and "0.4 or newer" in out, f"rc {rc}: {out}")


@test
def test_no_torch_error():
    """Without torch (hidden from the import system here, so this runs whether or not it is installed),
    the tensor functions raise ImportError naming PyTorch; the rest of the package works."""
    code = ("import sys\nsys.modules['torch'] = None  # makes `import torch` raise ImportError\n"
            "import aotk\nprint(aotk.version())\n"
            "calls = {'flash_attn_func': 3, 'flash_attn_varlen_func': 7, 'flash_attn_with_kvcache': 3,"
            " 'merge_attention_states': 2, 'scaled_dot_product_attention': 3, 'selection_attention': 5}\n"
            "for name, nargs in calls.items():\n"
            "    try:\n"
            "        getattr(aotk, name)(*([None] * nargs))\n"
            "    except ImportError as e:\n"
            "        print('IMPORTERROR', name, e)\n")
    rc, out = run_python(code)
    expect(rc == 0, f"rc {rc}: {out}")
    lines = [l for l in out.splitlines() if l.startswith("IMPORTERROR")]
    expect(len(lines) == 6 and all("PyTorch" in l for l in lines), f"expected 6 ImportErrors naming PyTorch: {out}")
    print(f"    {lines[0]}")


@test
def test_torch_argument_errors():
    """With torch: every unsupported argument is refused in Python, naming it, before any device work;
    CPU tensors are refused with a clear error (this machine has no GPU)."""
    torch = torch_or_skip()
    import aotk

    def t(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape).to(dtype)

    q, k, v = t(2, 33, 4, 64), t(2, 40, 2, 64), t(2, 40, 2, 64)
    expect_raises(ValueError, ["q", "cpu", "CUDA"], aotk.flash_attn_func, q, k, v)
    expect_raises(ValueError, ["q", "CUDA"], aotk.flash_attn_func, q, k, v, causal=True, window_size=(8, 0))
    # return_attn_probs is accepted now (flash-attn's (out, softmax_lse, None)): only the CPU tensors are refused.
    expect_raises(ValueError, ["q", "CUDA"], aotk.flash_attn_func, q, k, v, return_attn_probs=True)
    expect_raises(NotImplementedError, ["q.dtype", "float32"], aotk.flash_attn_func, q.float(), k.float(), v.float())
    expect_raises(ValueError, ["k.dtype"], aotk.flash_attn_func, q, k.half(), v)
    expect_raises(NotImplementedError, ["head dim", "12"], aotk.flash_attn_func, t(2, 33, 4, 12), t(2, 40, 2, 12),
                  t(2, 40, 2, 12))
    expect_raises(ValueError, ["q", "k", "head dim"], aotk.flash_attn_func, q, t(2, 40, 2, 32), v)
    expect_raises(ValueError, ["heads", "multiple"], aotk.flash_attn_func, t(2, 33, 3, 64), k, v)
    expect_raises(ValueError, ["dropout_p"], aotk.flash_attn_func, q, k, v, dropout_p=1.0)
    expect_raises(ValueError, ["softmax_scale"], aotk.flash_attn_func, q, k, v, softmax_scale=-1.0)
    expect_raises(ValueError, ["window_size"], aotk.flash_attn_func, q, k, v, window_size=5)
    expect_raises(ValueError, ["softcap"], aotk.flash_attn_func, q, k, v, softcap=-1.0)
    expect_raises(NotImplementedError, ["alibi_slopes", "float32"], aotk.flash_attn_func, q, k, v,
                  alibi_slopes=torch.ones(4, dtype=torch.float16))
    expect_raises(ValueError, ["alibi_slopes", "shape"], aotk.flash_attn_func, q, k, v, alibi_slopes=torch.ones(3))
    expect_raises(TypeError, ["q", "torch.Tensor"], aotk.flash_attn_func, [1.0], k, v)
    expect_raises(ValueError, ["q", "4 dimensions"], aotk.flash_attn_func, t(33, 4, 64), k, v)

    qv, kv = t(50, 4, 64), t(60, 2, 64)
    cu = torch.tensor([0, 20, 50], dtype=torch.int32)
    cuk = torch.tensor([0, 30, 60], dtype=torch.int32)
    expect_raises(ValueError, ["q", "CUDA"], aotk.flash_attn_varlen_func, qv, kv, kv, cu, cuk, 30, 30)
    expect_raises(ValueError, ["q", "CUDA"], aotk.flash_attn_varlen_func, qv, kv, kv, cu, cuk, 30, 30,
                  return_attn_probs=True)
    # block_table: k and v are paged caches [num_pages, page_size, heads_kv, d]; the prefill over the cache.
    kp, table = t(8, 16, 2, 64), torch.zeros(2, 4, dtype=torch.int32)
    paged = dict(block_table=table)
    expect_raises(ValueError, ["q", "CUDA"], aotk.flash_attn_varlen_func, qv, kp, kp, cu, cuk, 30, 30, **paged)
    expect_raises(ValueError, ["k", "4 dimensions", "paged"], aotk.flash_attn_varlen_func, qv, kv, kv, cu, cuk, 30,
                  30, **paged)
    expect_raises(NotImplementedError, ["block_table", "no backward", "no_grad"], aotk.flash_attn_varlen_func,
                  qv.clone().requires_grad_(), kp, kp, cu, cuk, 30, 30, **paged)
    expect_raises(NotImplementedError, ["dropout_p", "block_table"], aotk.flash_attn_varlen_func, qv, kp, kp, cu, cuk,
                  30, 30, dropout_p=0.1, **paged)
    expect_raises(ValueError, ["block_table", "int32"], aotk.flash_attn_varlen_func, qv, kp, kp, cu, cuk, 30, 30,
                  block_table=table.long())
    expect_raises(ValueError, ["block_table", "batch=2"], aotk.flash_attn_varlen_func, qv, kp, kp, cu, cuk, 30, 30,
                  block_table=torch.zeros(3, 4, dtype=torch.int32))
    expect_raises(ValueError, ["cu_seqlens_k", "entries"], aotk.flash_attn_varlen_func, qv, kp, kp, cu, cuk[:2], 30,
                  30, **paged)
    expect_raises(ValueError, ["max_seqlen_q"], aotk.flash_attn_varlen_func, qv, kp, kp, cu, cuk, 0, 30, **paged)
    expect_raises(ValueError, ["max_seqlen_k"], aotk.flash_attn_varlen_func, qv, kp, kp, cu, cuk, 30, 0, **paged)
    expect_raises(ValueError, ["heads", "multiple"], aotk.flash_attn_varlen_func, t(50, 3, 64), kp, kp, cu, cuk, 30,
                  30, **paged)
    expect_raises(ValueError, ["k and v", "first three"], aotk.flash_attn_varlen_func, qv, kp, t(8, 8, 2, 64), cu,
                  cuk, 30, 30, **paged)
    expect_raises(ValueError, ["cu_seqlens_q", "int32"], aotk.flash_attn_varlen_func, qv, kv, kv, cu.long(), cuk, 30, 30)
    expect_raises(ValueError, ["cu_seqlens_k", "entries"], aotk.flash_attn_varlen_func, qv, kv, kv, cu, cuk[:2], 30, 30)
    expect_raises(ValueError, ["max_seqlen_q"], aotk.flash_attn_varlen_func, qv, kv, kv, cu, cuk, 0, 30)

    query, key = t(2, 4, 33, 64), t(2, 2, 40, 64)
    expect_raises(NotImplementedError, ["attn_mask"], aotk.scaled_dot_product_attention, query, key, key,
                  attn_mask=torch.ones(33, 40, dtype=torch.bool))
    expect_raises(ValueError, ["enable_gqa"], aotk.scaled_dot_product_attention, query, key, key)
    expect_raises(ValueError, ["query", "CUDA"], aotk.scaled_dot_product_attention, query, key, key, enable_gqa=True)
    expect_raises(ValueError, ["scale"], aotk.scaled_dot_product_attention, query, key, key, scale=0.0,
                  enable_gqa=True)

    kvcache = aotk.flash_attn_with_kvcache
    qd, kc, vc = t(2, 1, 8, 64), t(2, 100, 2, 64), t(2, 100, 2, 64)
    kn, vn = t(2, 1, 2, 64), t(2, 1, 2, 64)
    expect_raises(ValueError, ["q", "CUDA"], kvcache, qd, kc, vc, cache_seqlens=5)
    seqlens = torch.zeros(2, dtype=torch.int32)
    expect_raises(ValueError, ["q", "CUDA"], kvcache, qd, kc, vc, k=kn, v=vn, cache_seqlens=seqlens)
    expect_raises(ValueError, ["rotary", "k and v"], kvcache, qd, kc, vc, rotary_cos=t(100, 32), rotary_sin=t(100, 32))
    expect_raises(ValueError, ["both rotary_cos and rotary_sin"], kvcache, qd, kc, vc, k=kn, v=vn, cache_seqlens=5,
                  rotary_cos=t(100, 32))
    expect_raises(ValueError, ["rotary_dim", "16"], kvcache, qd, kc, vc, k=kn, v=vn, cache_seqlens=5,
                  rotary_cos=t(100, 12), rotary_sin=t(100, 12))
    expect_raises(ValueError, ["rotary_dim", "64"], kvcache, qd, kc, vc, k=kn, v=vn, cache_seqlens=5,
                  rotary_cos=t(100, 48), rotary_sin=t(100, 48))
    expect_raises(ValueError, ["rotary_cos", "100"], kvcache, qd, kc, vc, k=kn, v=vn, cache_seqlens=5,
                  rotary_cos=t(99, 32), rotary_sin=t(99, 32))
    expect_raises(ValueError, ["rotary_sin.dtype"], kvcache, qd, kc, vc, k=kn, v=vn, cache_seqlens=5,
                  rotary_cos=t(100, 32), rotary_sin=t(100, 32).half())
    expect_raises(ValueError, ["same shape"], kvcache, qd, kc, vc, k=kn, v=vn, cache_seqlens=5,
                  rotary_cos=t(100, 32), rotary_sin=t(100, 16))
    expect_raises(ValueError, ["cache_batch_idx", "block_table"], kvcache, qd, kc, vc,
                  cache_batch_idx=torch.arange(2, dtype=torch.int32), block_table=torch.zeros(2, 1, dtype=torch.int32))
    expect_raises(ValueError, ["cache_batch_idx", "int32"], kvcache, qd, kc, vc,
                  cache_batch_idx=torch.arange(2, dtype=torch.int64))
    expect_raises(ValueError, ["cache_leftpad", "int32"], kvcache, qd, kc, vc, cache_leftpad=seqlens.long())
    expect_raises(ValueError, ["cache_leftpad", "[batch=2]"], kvcache, qd, kc, vc, cache_leftpad=seqlens[:1])
    expect_raises(NotImplementedError, ["17", "16", "flash_attn_varlen_func"], kvcache, t(2, 17, 8, 64), kc, vc)
    expect_raises(NotImplementedError, ["q.dtype"], kvcache, qd.float(), kc.float(), vc.float())
    expect_raises(ValueError, ["both k and v"], kvcache, qd, kc, vc, k=kn, cache_seqlens=5)
    expect_raises(ValueError, ["cache_seqlens"], kvcache, qd, kc, vc, k=kn, v=vn)
    expect_raises(ValueError, ["k must have shape"], kvcache, qd, kc, vc, k=t(2, 1, 4, 64), v=vn, cache_seqlens=5)
    expect_raises(ValueError, ["k.dtype"], kvcache, qd, kc, vc, k=kn.half(), v=vn, cache_seqlens=5)
    expect_raises(ValueError, ["cache_seqlens", "int32"], kvcache, qd, kc, vc, cache_seqlens=seqlens.long())
    expect_raises(ValueError, ["cache_seqlens", "[0, 99]"], kvcache, qd, kc, vc, k=kn, v=vn, cache_seqlens=100)
    expect_raises(TypeError, ["cache_seqlens", "int"], kvcache, qd, kc, vc, cache_seqlens=5.0)
    expect_raises(ValueError, ["num_splits"], kvcache, qd, kc, vc, num_splits=257)
    expect_raises(ValueError, ["k_cache", "batch 3"], kvcache, t(3, 1, 8, 64), kc, vc)
    expect_raises(ValueError, ["block_table", "int32"], kvcache, qd, kc, vc, block_table=torch.zeros(2, 4))
    expect_raises(ValueError, ["heads", "multiple"], kvcache, t(2, 1, 3, 64), kc, vc)
    expect_raises(ValueError, ["k_cache", "contiguous"], kvcache, qd, t(2, 100, 2, 128)[..., ::2], vc)
    expect_raises(ValueError, ["sinks", "shape"], kvcache, qd, kc, vc, sinks=torch.zeros(3))
    expect_raises(ValueError, ["window_size"], kvcache, qd, kc, vc, window_size=3)

    merge = aotk.merge_attention_states
    parts, lses = torch.randn(3, 2, 5, 4, 64), torch.randn(3, 2, 4, 5)
    expect_raises(ValueError, ["out_partials", "CUDA"], merge, parts, lses)
    expect_raises(ValueError, ["out_partials", "CUDA"], merge, list(parts), list(lses))  # a sequence is stacked
    expect_raises(ValueError, ["out_partials", "CUDA"], merge, torch.randn(3, 10, 4, 64), torch.randn(3, 4, 10))
    expect_raises(ValueError, ["out_partials", "5 dimensions"], merge, torch.randn(3, 4, 64), lses)
    expect_raises(ValueError, ["lse_partials", "(3, 2, 4, 5)"], merge, parts, torch.randn(3, 2, 5, 4))
    expect_raises(NotImplementedError, ["lse_partials.dtype"], merge, parts, lses.double())
    expect_raises(NotImplementedError, ["out_partials.dtype"], merge, parts.double(), lses)
    expect_raises(NotImplementedError, ["head_dim", "12"], merge, torch.randn(3, 2, 5, 4, 12), lses)
    expect_raises(NotImplementedError, ["out_dtype"], merge, parts, lses, out_dtype=torch.float64)
    expect_raises(ValueError, ["sinks"], merge, parts, lses, sinks=torch.zeros(5))
    expect_raises(TypeError, ["out_partials", "sequence"], merge, [], lses)

    qs, ks = t(50, 4, 128), t(50, 2, 128)
    idx = torch.zeros(50, 2, 4, dtype=torch.int32)
    expect_raises(ValueError, ["q", "CUDA"], aotk.selection_attention, qs, ks, ks, idx, 64)
    expect_raises(TypeError, ["block_idx", "int32"], aotk.selection_attention, qs, ks, ks, idx.long(), 64)
    expect_raises(NotImplementedError, ["block_size"], aotk.selection_attention, qs, ks, ks, idx, 48)
    expect_raises(NotImplementedError, ["head dims"], aotk.selection_attention, t(50, 4, 32), t(50, 2, 32),
                  t(50, 2, 32), idx, 64)
    expect_raises(ValueError, ["max_seqlen_k"], aotk.selection_attention, qs, ks, ks, idx, 64,
                  cu_seqlens_q=torch.tensor([0, 50], dtype=torch.int32),
                  cu_seqlens_k=torch.tensor([0, 50], dtype=torch.int32))
    expect_raises(ValueError, ["both"], aotk.selection_attention, qs, ks, ks, idx, 64,
                  cu_seqlens_q=torch.tensor([0, 50], dtype=torch.int32))


@test
def test_torch_fake_implementations():
    """The custom ops are registered, and their fake (meta) implementations give the shapes, dtypes and
    strides the CUDA implementations allocate (what torch.compile traces with)."""
    torch = torch_or_skip()
    import aotk
    aotk._ops("flash_attn_func")  # imports torch and registers the ops
    for name in ("attn_fwd", "attn_bwd", "sel_fwd", "sel_bwd"):
        expect(hasattr(torch.ops.aotk, name), f"torch.ops.aotk.{name} is not registered")
    m = dict(device="meta", dtype=torch.bfloat16)
    q, k, v = torch.empty(2, 33, 8, 64, **m), torch.empty(2, 40, 2, 64, **m), torch.empty(2, 40, 2, 32, **m)
    out, lse = torch.ops.aotk.attn_fwd(q, k, v, None, None, 0, 0, 0.0, True, 0, -1, -1, 0.0, None, 0.0, None, False)
    expect(out.shape == (2, 33, 8, 32) and out.dtype == torch.bfloat16, f"out {out.shape} {out.dtype}")
    expect(lse.shape == (2, 8, 33) and lse.dtype == torch.float32, f"lse {lse.shape} {lse.dtype}")
    # torch's layout read through strides: dq must come back laid out like q.
    qt = torch.empty(2, 8, 33, 64, **m).transpose(1, 2)
    dq, dk, dv = torch.ops.aotk.attn_bwd(out, qt, k, v, out, lse, None, None, 0, 0, 0.0, True, 0, -1, -1, 0.0, None,
                                         0.0, None, False)
    expect(dq.shape == qt.shape and dq.stride() == qt.stride(), f"dq {dq.shape} {dq.stride()} vs {qt.stride()}")
    expect(dk.shape == k.shape and dv.shape == v.shape, "dk/dv shapes")
    qv = torch.empty(50, 8, 64, **m)
    kv = torch.empty(60, 2, 64, **m)
    cu = torch.empty(3, device="meta", dtype=torch.int32)
    out, lse = torch.ops.aotk.attn_fwd(qv, kv, kv, cu, cu, 30, 30, 0.0, False, 0, -1, -1, 0.0, None, 0.0, None, False)
    expect(out.shape == (50, 8, 64) and lse.shape == (8, 50), f"varlen out {out.shape} lse {lse.shape}")
    qs, ks, vs = torch.empty(50, 8, 192, **m), torch.empty(50, 2, 192, **m), torch.empty(50, 2, 128, **m)
    idx = torch.empty(50, 2, 4, device="meta", dtype=torch.int32)
    out, lse = torch.ops.aotk.sel_fwd(qs, ks, vs, idx, None, None, None, 0, 64, 0.0)
    expect(out.shape == (50, 8, 128) and lse.shape == (50, 8) and lse.dtype == torch.float32,
           f"sel out {out.shape} lse {lse.shape}")
    dq, dk, dv = torch.ops.aotk.sel_bwd(out, qs, ks, vs, out, lse, idx, None, None, None, 0, 64, 0.0)
    expect(dq.shape == qs.shape and dk.shape == ks.shape and dv.shape == vs.shape, "sel grads' shapes")
    for name in ("decode", "merge"):
        expect(hasattr(torch.ops.aotk, name), f"torch.ops.aotk.{name} is not registered")
    q = torch.empty(3, 4, 8, 64, **m)
    seqlens = torch.empty(3, device="meta", dtype=torch.int32)
    for k_cache, v_cache, table in ((torch.empty(3, 100, 2, 64, **m), torch.empty(3, 100, 2, 32, **m), None),
                                    (torch.empty(10, 16, 2, 64, **m), torch.empty(10, 16, 2, 32, **m),
                                     torch.empty(3, 7, device="meta", dtype=torch.int32))):
        k_new, v_new = torch.empty(3, 2, 2, 64, **m), torch.empty(3, 2, 2, 32, **m)
        for new in ((), (k_new, v_new)):  # without appending, and appending 2 tokens per request
            out, lse = torch.ops.aotk.decode(q, k_cache, v_cache, seqlens, table, None, None, 0.0, True, -1, -1, 0.0,
                                             0, *new)
            expect(out.shape == (3, 4, 8, 32) and out.dtype == torch.bfloat16, f"decode out {out.shape} {out.dtype}")
            expect(lse.shape == (3, 8, 4) and lse.dtype == torch.float32, f"decode lse {lse.shape} {lse.dtype}")
        # Packed queries (cu_seqlens_q, a prefill over the cache): the varlen forward's layouts.
        qp, cu = torch.empty(50, 8, 64, **m), torch.empty(4, device="meta", dtype=torch.int32)
        out, lse = torch.ops.aotk.decode(qp, k_cache, v_cache, seqlens, table, None, None, 0.0, True, -1, -1, 0.0, 0,
                                         None, None, cu, 30)
        expect(out.shape == (50, 8, 32) and out.dtype == torch.bfloat16, f"packed decode out {out.shape} {out.dtype}")
        expect(lse.shape == (8, 50) and lse.dtype == torch.float32, f"packed decode lse {lse.shape} {lse.dtype}")
    # aotk::decode appends in place: its schema marks k_cache and v_cache written ("Tensor(a!)") and no
    # other argument; k_new and v_new are optional (None: no appending), then cu_seqlens_q and max_seqlen_q
    # (None, 0: dense queries) and cache_leftpad (None), last, so that a call without them reads as before.
    schema = torch.ops.aotk.decode.default._schema
    written = sorted(a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write)
    expect(written == ["k_cache", "v_cache"], f"aotk::decode declares {written} written: {schema}")
    defaulted = [(a.name, a.default_value) for a in schema.arguments if a.has_default_value()]
    expect(defaulted == [("k_new", None), ("v_new", None), ("cu_seqlens_q", None), ("max_seqlen_q", 0),
                         ("cache_leftpad", None)],
           f"aotk::decode's defaulted arguments {defaulted}")
    for parts_shape, lse_shape in (((3, 2, 5, 4, 64), (3, 2, 4, 5)), ((3, 10, 4, 64), (3, 4, 10))):
        parts = torch.empty(parts_shape, device="meta", dtype=torch.float32)
        lses = torch.empty(lse_shape, device="meta", dtype=torch.float32)
        out, lse = torch.ops.aotk.merge(parts, lses, None, torch.bfloat16)
        expect(out.shape == parts_shape[1:] and out.dtype == torch.bfloat16, f"merge out {out.shape} {out.dtype}")
        expect(lse.shape == lse_shape[1:] and lse.dtype == torch.float32, f"merge lse {lse.shape} {lse.dtype}")


def fake_cuda_or_skip(torch):
    """FakeTensorMode, once this torch build is seen to make fake CUDA tensors on a machine with no GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    try:
        with FakeTensorMode():
            torch.empty(1, device="cuda")
    except Exception as e:  # noqa: BLE001: any failure here means this torch build cannot fake CUDA
        raise Skip(f"this torch cannot make fake CUDA tensors ({type(e).__name__}: {e})") from None
    return FakeTensorMode


def op_log(torch):
    """A dispatch mode recording every operator call under it as (op, args): [(op, args), ...] in .calls."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpLog(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls.append((func, args))
            return func(*args, **(kwargs or {}))

    return OpLog()


@test
def test_torch_front_ends_on_fake_cuda_tensors():
    """With torch: flash_attn_with_kvcache (contiguous and paged cache, appending k and v),
    merge_attention_states and return_attn_probs run end to end on fake CUDA tensors (FakeTensorMode,
    what torch.compile traces with), so the argument handling and the ops' fake implementations are
    exercised with no GPU. The append is the library's: the step is one aotk::decode call given k and v,
    and no other operator touches the caches (the Python index_put_ it replaced is gone)."""
    torch = torch_or_skip()
    import aotk
    aotk._ops("flash_attn_func")
    FakeTensorMode = fake_cuda_or_skip(torch)
    with FakeTensorMode():
        c = dict(device="cuda", dtype=torch.bfloat16)
        batch, seqlen_q, heads_q, heads_kv = 3, 4, 8, 2
        q = torch.empty(batch, seqlen_q, heads_q, 64, **c)
        k_new, v_new = torch.empty(batch, seqlen_q, heads_kv, 64, **c), torch.empty(batch, seqlen_q, heads_kv, 32, **c)
        seqlens = torch.zeros(batch, dtype=torch.int32, device="cuda")
        table = torch.zeros(batch, 7, dtype=torch.int32, device="cuda")
        for k_cache, v_cache, block_table in ((torch.empty(batch, 100, heads_kv, 64, **c),
                                               torch.empty(batch, 100, heads_kv, 32, **c), None),
                                              (torch.empty(30, 16, heads_kv, 64, **c),
                                               torch.empty(30, 16, heads_kv, 32, **c), table)):
            for cache_seqlens in (seqlens, 5):
                with op_log(torch) as log:
                    out, lse = aotk.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                                            cache_seqlens=cache_seqlens, block_table=block_table,
                                                            causal=True, return_softmax_lse=True)
                decodes = [args for op, args in log.calls if op is torch.ops.aotk.decode.default]
                expect(len(decodes) == 1 and len(decodes[0]) == 15 and decodes[0][13] is k_new and
                       decodes[0][14] is v_new,
                       f"expected one aotk::decode given k and v, got {[str(op) for op, _ in log.calls]}")
                touching = [str(op) for op, args in log.calls if op is not torch.ops.aotk.decode.default and
                            any(a is k_cache or a is v_cache for a in args)]
                expect(not touching, f"operators besides aotk::decode given the caches: {touching}")
                expect(out.shape == (batch, seqlen_q, heads_q, 32) and out.dtype == torch.bfloat16,
                       f"out {out.shape} {out.dtype}")
                expect(lse.shape == (batch, heads_q, seqlen_q) and lse.dtype == torch.float32, f"lse {lse.shape}")
            out = aotk.flash_attn_with_kvcache(q, k_cache, v_cache, block_table=block_table)
            expect(out.shape == (batch, seqlen_q, heads_q, 32), f"out without k/v {out.shape}")
        parts = torch.empty(2, batch, seqlen_q, heads_q, 32, **c)
        lses = torch.empty(2, batch, heads_q, seqlen_q, device="cuda", dtype=torch.float32)
        out, lse = aotk.merge_attention_states(parts, lses, out_dtype=torch.float32)
        expect(out.shape == parts.shape[1:] and out.dtype == torch.float32 and lse.shape == lses.shape[1:],
               f"merge {out.shape} {out.dtype} {lse.shape}")
        # flash_attn_varlen_func with block_table: one aotk::decode with packed queries, cache_seqlens the
        # differences of cu_seqlens_k taken on the device (no host read), nothing given the caches but it.
        k_pages, v_pages = torch.empty(30, 16, heads_kv, 64, **c), torch.empty(30, 16, heads_kv, 32, **c)
        q_packed = torch.empty(70, heads_q, 64, **c)
        cu_q = torch.tensor([0, 3, 3, 70], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, 40, 45, 140], dtype=torch.int32, device="cuda")
        with op_log(torch) as log:
            out, lse, probs = aotk.flash_attn_varlen_func(q_packed, k_pages, v_pages, cu_q, cu_k, 67, 95, causal=True,
                                                          block_table=table, return_attn_probs=True)
        decodes = [args for op, args in log.calls if op is torch.ops.aotk.decode.default]
        expect(len(decodes) == 1 and decodes[0][15] is cu_q and decodes[0][16] == 67 and decodes[0][4] is table,
               f"expected one aotk::decode given cu_seqlens_q and max_seqlen_q, got {[str(op) for op, _ in log.calls]}")
        touching = [str(op) for op, args in log.calls if op is not torch.ops.aotk.decode.default and
                    any(a is k_pages or a is v_pages for a in args)]
        expect(not touching, f"operators besides aotk::decode given the paged caches: {touching}")
        expect(out.shape == (70, heads_q, 32) and out.dtype == torch.bfloat16 and probs is None,
               f"paged varlen out {out.shape} {out.dtype}")
        expect(lse.shape == (heads_q, 70) and lse.dtype == torch.float32, f"paged varlen lse {lse.shape}")
        k = torch.empty(batch, 50, heads_kv, 64, **c)
        result = aotk.flash_attn_func(q, k, k, causal=True, return_attn_probs=True)
        expect(isinstance(result, tuple) and len(result) == 3 and result[2] is None, "return_attn_probs: not a triple")
        expect(result[1].shape == (batch, heads_q, seqlen_q) and not result[1].requires_grad, "softmax_lse")


@test
def test_torch_export_sees_cache_mutation():
    """With torch: torch.export's functional graph of an appending step (the IR torch.compile's
    AOTAutograd also makes) turns aotk::decode into auto_functionalized and reports k_cache and v_cache,
    and only them, as the user inputs it mutates: the compiler knows the caches change."""
    torch = torch_or_skip()
    import aotk
    aotk._ops("flash_attn_func")
    FakeTensorMode = fake_cuda_or_skip(torch)

    class Step(torch.nn.Module):
        def forward(self, q, k_cache, v_cache, k_new, v_new, cache_seqlens):
            return aotk.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=cache_seqlens,
                                                causal=True)

    with FakeTensorMode(allow_non_fake_inputs=True):
        c = dict(device="cuda", dtype=torch.bfloat16)
        inputs = (torch.empty(3, 1, 8, 64, **c), torch.empty(3, 100, 2, 64, **c), torch.empty(3, 100, 2, 32, **c),
                  torch.empty(3, 1, 2, 64, **c), torch.empty(3, 1, 2, 32, **c),
                  torch.zeros(3, dtype=torch.int32, device="cuda"))
    try:
        exported = torch.export.export(Step(), inputs).run_decompositions()
    except Exception as e:  # noqa: BLE001: shown whole; an export that cannot run here says so
        raise AssertionError(f"torch.export of an appending step failed: {type(e).__name__}: {e}") from e
    mutated = sorted(exported.graph_signature.user_inputs_to_mutate.values())
    expect(mutated == ["k_cache", "v_cache"], f"torch.export sees the inputs {mutated} mutated:\n"
           f"{exported.graph_module.code}")
    code = exported.graph_module.code
    expect("auto_functionalized" in code and "aotk.decode" in code, f"no auto_functionalized aotk.decode:\n{code}")
    print(f"    mutated inputs: {mutated}")


@test
def test_pip_install():
    """pip installs the build tree's package (offline, no compiler), and the installed copy loads its own
    libaotk.so."""
    try:
        import setuptools
    except ImportError:
        raise Skip("setuptools is not installed") from None
    version = tuple(int(x) for x in re.findall(r"\d+", setuptools.__version__)[:2])
    if version < (70, 1) and importlib.util.find_spec("wheel") is None:
        raise Skip(f"an offline build needs setuptools >= 70.1 or the wheel package (setuptools "
                   f"{setuptools.__version__}, no wheel)")
    with tempfile.TemporaryDirectory() as tmp:
        src, target = os.path.join(tmp, "src"), os.path.join(tmp, "site")
        shutil.copytree(ARGS.package_dir, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            "--no-build-isolation", "--no-deps", "--no-index", "--target", target, src],
                           capture_output=True, text=True, timeout=600)
        expect(r.returncode == 0, f"pip install failed:\n{r.stdout}\n{r.stderr}")
        env = dict(os.environ)
        env["PYTHONPATH"] = target
        env.pop("AOTK_LIBRARY", None)
        r = subprocess.run([sys.executable, "-c", "import aotk; print(aotk.library_path()); print(aotk.version())"],
                           env=env, cwd=tmp, capture_output=True, text=True)
        expect(r.returncode == 0, f"the installed package failed: {r.stderr}")
        path, version = r.stdout.split()
        expect(path.startswith(target + os.sep) and version == header_version(),
               f"the installed package loaded {path} ({version})")
        print(f"    installed into {target}, loads {os.path.relpath(path, target)} {version}")


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--package-dir", default=os.path.join(here, "..", "..", "build", "python"))
    ap.add_argument("--include-dir", default=os.path.join(here, "..", "..", "include"))
    ap.add_argument("--cc", default=os.environ.get("CC"))
    ARGS = ap.parse_args()
    ARGS.package_dir = os.path.abspath(ARGS.package_dir)
    ARGS.include_dir = os.path.abspath(ARGS.include_dir)
    if not os.path.exists(os.path.join(ARGS.package_dir, "aotk", "libaotk.so")):
        print(f"{ARGS.package_dir}/aotk/libaotk.so does not exist: build first (make)")
        print("0 passed, 0 failed, 1 skipped")
        return 77
    os.environ.pop("AOTK_LIBRARY", None)  # the copy beside the package is the one under test
    sys.path.insert(0, ARGS.package_dir)
    passed = failed = skipped = 0
    for fn in TESTS:
        try:
            fn()
        except Skip as e:
            skipped += 1
            print(f"skip {fn.__name__}: {e}")
        except Exception:  # noqa: BLE001: every failure is reported and counted
            failed += 1
            print(f"FAIL {fn.__name__}:\n{traceback.format_exc()}")
        else:
            passed += 1
            print(f"ok   {fn.__name__}")
        sys.stdout.flush()
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if failed:
        return 1
    return 77 if passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
