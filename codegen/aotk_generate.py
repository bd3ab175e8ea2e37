"""Compiles the catalog with Triton and writes the kernel images and their table as generated sources.

    python codegen/aotk_generate.py --out-dir build/generated --cache-dir build/kernel-cache [--jobs N]
                                    [--filter 'attn_fwd_bf16_d128*,...']

Runs on a machine with no GPU: it calls triton.compile directly (not triton.tools.compile, whose C
launcher is wrong for a library: notes/triton-aot.md) for each kernel and target, checks the compiled
.entry against the catalog's parameter list, xz-compresses the cubin (and the PTX where kept; in the
workers, into the cache entry beside the raw image) and writes
  aotk_kernel_images.S   the compressed images, embedded with .incbin (fast to assemble)
  aotk_kernel_table.c    one aotk__kernel_entry per kernel: names, launch metadata, sizes, hashes
Compiles run in parallel, longest first, and are cached by content (kernel source, parameter spec, constexprs,
options, target, Triton version, this generator), so a rebuild with nothing changed compiles nothing.
Outputs are deterministic and rewritten only when their content changes.
"""

import argparse
import concurrent.futures
import fnmatch
import hashlib
import importlib.util
import json
import lzma
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import aotk_catalog  # noqa: E402

GENERATOR_VERSION = "3"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS_DIR = os.path.join(REPO_ROOT, "kernels")

# How each Triton parameter type appears in the PTX .entry, and its one-letter kind in the table
# (p pointer, l 64-bit integer, i 32-bit integer, f fp32, t host-side TMA descriptor), which the C
# launcher's packing must match. A descriptor of rank r is r + r + 1 .entry parameters: the 128-byte
# CUtensorMap (".param .align 64 .b8 name[128]"), then r x .u32 shape and r x .u64 strides.
PTX_PARAM_TYPE = {"ptr": [".u64"], "i64": [".u64"], "i32": [".u32"], "fp32": [".f32"]}
PARAM_KIND = {"ptr": "p", "i64": "l", "i32": "i", "fp32": "f", "desc": "t"}
# The table records at most this many descriptors per kernel (src/runtime/aotk_kernel_table.h).
MAX_TMA_DESCRIPTORS = 5
DTYPE_ENUM = {"fp16": "AOTK_DTYPE_FLOAT16", "bf16": "AOTK_DTYPE_BFLOAT16", "": "0"}
FAMILY_ENUM = {family: "AOTK__FAMILY_" + family.upper() for family in aotk_catalog.FAMILIES}


def param_class(triton_type):
    if triton_type.startswith("tensordesc<"):
        return "desc"
    return "ptr" if triton_type.startswith("*") else triton_type


def descriptor_rank(triton_type):
    """tensordesc<bf16[1,128,128]> -> 3."""
    return len(re.search(r"\[([^\]]*)\]", triton_type).group(1).split(","))


def gluon_descriptor_type(triton_type):
    """A Gluon kernel's descriptor type names the shared-memory layout its blocks land in: the default
    NVMMA layout for the block (the widest swizzle that fits), which the kernel allocates with."""
    if param_class(triton_type) != "desc":
        return triton_type
    from triton.experimental.gluon import language as gl
    match = re.fullmatch(r"tensordesc<(\w+)\[([^\]]*)\]>", triton_type)
    dtype = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp32": gl.float32}[match.group(1)]
    block = [int(x) for x in match.group(2).split(",")]
    layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
    return f"tensordesc<{match.group(1)}[{', '.join(map(str, block))}],{layout!r}>"


def ptx_param_types(triton_type):
    if param_class(triton_type) == "desc":
        rank = descriptor_rank(triton_type)
        return [".align"] + [".u32"] * rank + [".u64"] * rank
    return PTX_PARAM_TYPE[param_class(triton_type)]


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def kernel_sources(source_name):
    """The kernel's source file and the kernels/ modules it imports (one level: attn_common.py)."""
    with open(os.path.join(KERNELS_DIR, source_name), "rb") as f:
        source = f.read()
    parts = [source]
    for module in sorted(set(re.findall(rb"^from (\w+) import", source, re.M))):
        path = os.path.join(KERNELS_DIR, module.decode() + ".py")
        if os.path.exists(path):
            with open(path, "rb") as f:
                parts.append(f.read())
    return parts


def cache_key(kernel):
    h = hashlib.sha256()
    # The compile options beyond the tile config (maxnreg) are part of the key where a kernel has any.
    options = aotk_catalog.compile_options(kernel)
    extra = (repr(sorted(options.items())), ) if options else ()
    for part in (GENERATOR_VERSION, aotk_catalog.TRITON_VERSION, repr(kernel), *extra, *kernel_sources(kernel.source)):
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def image_kinds(kernel):
    return ("cubin", "ptx") if aotk_catalog.KEEP_PTX[kernel.arch] else ("cubin",)


def pack_images(kernel, entry_dir):
    """Runs in a worker process. Writes the entry's images as the library embeds them, next to the raw
    ones: kernel.<kind>.xz and kernel.<kind>.json (raw size and FNV-1a hash), unless they are there.
    Done here, not in the main process, because compressing and hashing ~240 MB of images with
    preset 9 takes about 220 s of one core: in the workers it overlaps the compiles, and a cached
    entry never redoes it."""
    for kind in image_kinds(kernel):
        info_path = os.path.join(entry_dir, f"kernel.{kind}.json")
        if os.path.exists(info_path):
            continue
        with open(os.path.join(entry_dir, f"kernel.{kind}"), "rb") as f:
            raw = f.read()
        if kind == "ptx":
            raw += b"\0"  # the driver takes PTX as a NUL-terminated string
        packed = lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)
        info = json.dumps({"raw_bytes": len(raw), "fnv1a64": f"{fnv1a64(raw):016x}"})
        # Each file lands whole (write, then rename), the .json last: its presence means both are done.
        for name, data in ((f"kernel.{kind}.xz", packed), (f"kernel.{kind}.json", info.encode())):
            fd, tmp = tempfile.mkstemp(dir=entry_dir)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(entry_dir, name))


def compile_kernel(kernel, cache_dir):
    """Runs in a worker process. Compiles one kernel into cache_dir/<key>/ unless it is there, and
    packs its images."""
    entry_dir = os.path.join(cache_dir, cache_key(kernel))
    if os.path.exists(os.path.join(entry_dir, "meta.json")):
        pack_images(kernel, entry_dir)
        return entry_dir, 0.0
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # never touch a GPU, even where there is one
    # Triton's own cache lives in the build tree, not in ~/.triton: a clean build is really clean, and
    # the build never writes outside its directory.
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if triton.__version__ != aotk_catalog.TRITON_VERSION:
        raise RuntimeError(f"Triton {triton.__version__} found; the catalog pins {aotk_catalog.TRITON_VERSION}")
    if KERNELS_DIR not in sys.path:
        sys.path.insert(0, KERNELS_DIR)  # the kernels import their shared pieces (attn_common.py)
    spec = importlib.util.spec_from_file_location(f"aotk_kernel_{kernel.source[:-3]}",
                                                  os.path.join(KERNELS_DIR, kernel.source))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, kernel.function)

    arg_names = list(fn.arg_names)
    constexpr_values = dict(kernel.constexprs)
    runtime_names = [n for n in arg_names if n not in constexpr_values]
    if runtime_names != [p[0] for p in kernel.params]:
        raise RuntimeError(f"{kernel.name}: catalog parameters {[p[0] for p in kernel.params]} do not match "
                           f"the kernel's {runtime_names}")
    param_types = {name: ttype for name, ttype, _ in kernel.params}
    gluon = kernel.family in aotk_catalog.GLUON_FAMILIES
    if gluon:
        param_types = {name: gluon_descriptor_type(t) for name, t in param_types.items()}
    signature = {n: ("constexpr" if n in constexpr_values else param_types[n]) for n in arg_names}
    constexprs = {(arg_names.index(n),): v for n, v in kernel.constexprs}
    attrs = {(arg_names.index(n),): [["tt.divisibility", 16]] for n, _, hinted in kernel.params
             if hinted == aotk_catalog.ALWAYS or (hinted is True and kernel.aligned)}

    start = time.time()
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource
        source = GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    else:
        source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": kernel.config.num_warps, "num_stages": kernel.config.num_stages,
               **aotk_catalog.compile_options(kernel)}
    compiled = triton.compile(source, target=GPUTarget("cuda", kernel.arch, 32), options=options)
    elapsed = time.time() - start
    md = compiled.metadata
    ptx = compiled.asm["ptx"]

    # The launcher passes the runtime parameters in catalog order, then Triton's two hidden scratch
    # pointers. Check that against what the compiler actually emitted.
    entry = re.search(r"\.entry\s+(\w+)\s*\(([^)]*)\)", ptx, re.S)
    if entry is None or entry.group(1) != md.name:
        raise RuntimeError(f"{kernel.name}: no .entry {md.name} in the PTX")
    ptx_types = re.findall(r"\.param\s+(\.\w+)", entry.group(2))
    expected = [ptx for _, t, _ in kernel.params for ptx in ptx_param_types(t)] + [".u64", ".u64"]
    if ptx_types != expected:
        raise RuntimeError(f"{kernel.name}: PTX .entry parameters {ptx_types}, expected {expected}")
    if md.shared > aotk_catalog.MAX_SHARED_BYTES[kernel.arch]:
        raise RuntimeError(f"{kernel.name}: sm_{kernel.arch} config needs {md.shared} bytes of shared memory, "
                           f"over the {aotk_catalog.MAX_SHARED_BYTES[kernel.arch]} allowed")
    if md.global_scratch_size or md.profile_scratch_size:
        raise RuntimeError(f"{kernel.name}: needs {md.global_scratch_size} bytes of global scratch; the runtime "
                           "passes none (launches do not allocate); give the family a workspace first")

    # Host-side descriptors: what the runtime's cuTensorMapEncodeTiled call needs besides the tensor
    # itself. The compiler may split a block into narrower boxes (a 128-byte swizzle holds at most 128
    # bytes of the innermost dimension), so the box comes from here, not from the catalog's block.
    descriptors = [{"swizzle": d["swizzle"], "box": list(d["block_size"])} for d in (md.tensordesc_meta or [])]
    expected_descriptors = sum(param_class(t) == "desc" for _, t, _ in kernel.params)
    if len(descriptors) != expected_descriptors or len(descriptors) > MAX_TMA_DESCRIPTORS:
        raise RuntimeError(f"{kernel.name}: {len(descriptors)} descriptors in the metadata, {expected_descriptors} "
                           f"in the catalog (at most {MAX_TMA_DESCRIPTORS})")
    for d in descriptors:
        if len(d["box"]) != 3 or d["swizzle"] not in (0, 1, 2, 3):
            raise RuntimeError(f"{kernel.name}: unsupported descriptor {d}")
    meta = {"function_name": md.name, "num_warps": md.num_warps, "shared_bytes": md.shared,
            "descriptors": descriptors,
            "num_ctas": md.num_ctas, "global_scratch_bytes": md.global_scratch_size,
            "profile_scratch_bytes": md.profile_scratch_size, "triton_version": triton.__version__,
            "ptxas_version": _ptxas_version_string(kernel.arch),
            "compile_seconds": round(elapsed, 2)}
    os.makedirs(cache_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=cache_dir)
    with open(os.path.join(tmp, "kernel.cubin"), "wb") as f:
        f.write(compiled.asm["cubin"])
    with open(os.path.join(tmp, "kernel.ptx"), "w") as f:
        f.write(ptx)
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    try:
        os.rename(tmp, entry_dir)
    except OSError:  # another build filled the same entry first; its content is the same
        shutil.rmtree(tmp, ignore_errors=True)
    pack_images(kernel, entry_dir)
    return entry_dir, elapsed


def _ptxas_version_string(arch):
    import subprocess
    from triton.backends.nvidia.compiler import get_ptxas
    out = subprocess.check_output([get_ptxas(arch).path, "--version"], text=True)
    match = re.search(r"release (\S+?),\s*V(\S+)", out)
    return match.group(2) if match else out.strip().splitlines()[-1]


# Rough compile times on the 2-core build machine (Triton 3.6.0, the 2026-11-26 CI logs), for the
# order of the queue only: the workers take the longest first, so the build does not end waiting for
# one long compile started last. The index sort's 8192-element sort took 50-97 s and was once the last
# job, with the other core idle; every other kernel takes under 15 s.
_COMPILE_SECONDS = (("sel_index_order", 80.0), ("attn_fwd_", 5.0), ("attn_bwd_", 3.0), ("sel_", 2.0))


def expected_compile_seconds(kernel):
    return next((s for prefix, s in _COMPILE_SECONDS if kernel.name.startswith(prefix)), 1.0)


def write_if_changed(path, content):
    data = content.encode() if isinstance(content, str) else content
    if os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == data:
                return
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--filter", default=os.environ.get("AOTK_KERNELS", ""),
                        help="comma-separated globs on kernel names (default: all; env AOTK_KERNELS)")
    args = parser.parse_args()

    full_catalog = aotk_catalog.catalog()
    patterns = [p.strip() for p in args.filter.split(",") if p.strip()]
    kernels = [k for k in full_catalog if not patterns or any(fnmatch.fnmatch(k.name, p) for p in patterns)]
    if not kernels:
        sys.exit(f"aotk_generate: the filter {args.filter!r} matches no kernel")

    start = time.time()
    entry_dirs = {}
    compiled_now = 0
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(compile_kernel, k, os.path.abspath(args.cache_dir)): k
                   for k in sorted(kernels, key=expected_compile_seconds, reverse=True)}
        for future in concurrent.futures.as_completed(futures):
            kernel = futures[future]
            try:
                entry_dirs[kernel], seconds = future.result()
            except Exception as e:  # report which kernel, then stop the build
                # Triton's CompilationError names the outermost call; the error itself is in the chain.
                causes, cause = [], e.__cause__ or e.__context__
                while cause is not None and len(causes) < 8:
                    causes.append(f"\n  caused by {type(cause).__name__}: {cause}")
                    cause = cause.__cause__ or cause.__context__
                sys.exit(f"aotk_generate: sm_{kernel.arch} {kernel.name}: {e}{''.join(causes)}")
            if seconds:
                compiled_now += 1
                print(f"  compiled sm_{kernel.arch} {kernel.name} ({seconds:.1f} s)", flush=True)

    out_dir = os.path.abspath(args.out_dir)
    image_dir = os.path.join(out_dir, "images")
    os.makedirs(image_dir, exist_ok=True)
    asm_lines = ["/* Generated by codegen/aotk_generate.py: do not edit. The kernel images, xz-compressed. */",
                 '\t.section .note.GNU-stack,"",@progbits', "\t.section .rodata.aotk_images,\"a\""]
    rows = []
    triton_versions, ptxas_versions = set(), set()
    for index, kernel in enumerate(kernels):
        entry_dir = entry_dirs[kernel]
        with open(os.path.join(entry_dir, "meta.json")) as f:
            meta = json.load(f)
        triton_versions.add(meta["triton_version"])
        ptxas_versions.add(meta["ptxas_version"])
        image_fields = {}
        for kind in ("cubin", "ptx"):
            if kind not in image_kinds(kernel):
                image_fields[kind] = "{0, 0, 0, 0}"
                continue
            with open(os.path.join(entry_dir, f"kernel.{kind}.xz"), "rb") as f:
                packed = f.read()
            with open(os.path.join(entry_dir, f"kernel.{kind}.json")) as f:
                info = json.load(f)
            file_name = f"sm{kernel.arch}_{kernel.name}.{kind}.xz"
            write_if_changed(os.path.join(image_dir, file_name), packed)
            symbol = f"aotk__image_{index}_{kind}"
            # The hash in the comment makes this file change whenever an image does, so the assembler
            # reruns (it cannot see into the .incbin files).
            asm_lines += [f"\t.globl {symbol}", f"\t.hidden {symbol}", "\t.balign 16", f"{symbol}:",
                          f'\t.incbin "{os.path.join(image_dir, file_name)}"  /* fnv1a64 {info["fnv1a64"]} */']
            image_fields[kind] = f"{{{symbol}, {len(packed)}u, {info['raw_bytes']}u, 0x{info['fnv1a64']}ull}}"
        kinds = "".join(PARAM_KIND[param_class(t)] for _, t, _ in kernel.params)
        descriptors = meta.get("descriptors", [])
        tma = ", ".join(f"{{{d['swizzle']}, {{{', '.join(str(b) for b in d['box'])}}}}}" for d in descriptors)
        rows.append(
            f"  {{{c_string(kernel.name)}, {c_string(meta['function_name'])}, {FAMILY_ENUM[kernel.family]}, {kernel.arch}, "
            f"{DTYPE_ENUM[kernel.dtype]}, {kernel.head_dim_qk}, {kernel.head_dim_v}, {int(kernel.aligned)}, "
            f"{int(kernel.extras)}, {kernel.block_size}, {kernel.config.block_p}, {kernel.config.block_m}, "
            f"{kernel.config.block_n}, {meta['num_warps']}, {kernel.config.num_stages}, {meta['shared_bytes']}, "
            f"{kernel.min_seqlen}, {c_string(kinds)},\n   {image_fields['cubin']},\n   {image_fields['ptx']}"
            # Every field written out, none left to zero-initialization (-Wmissing-field-initializers).
            + f",\n   {len(descriptors)}, {{{tma if descriptors else '{0, {0, 0, 0}}'}}}" + "},")

    externs = [f"extern const unsigned char aotk__image_{i}_{kind}[];"
               for i, k in enumerate(kernels) for kind in ("cubin", "ptx")
               if kind == "cubin" or aotk_catalog.KEEP_PTX[k.arch]]
    table = "\n".join([
        "/* Generated by codegen/aotk_generate.py from codegen/aotk_catalog.py: do not edit. */",
        '#include "aotk_kernel_table.h"',
        "",
        *externs,
        "",
        "const aotk__kernel_entry aotk__kernel_table[] = {",
        *rows,
        "};",
        f"const int aotk__kernel_count = {len(kernels)};",
        f"const int aotk__catalog_kernel_count = {len(full_catalog)};",
        f"const char aotk__triton_version[] = {c_string(', '.join(sorted(triton_versions)))};",
        f"const char aotk__ptxas_version[] = {c_string(', '.join(sorted(ptxas_versions)))};",
        f"const char aotk__kernel_filter[] = {c_string(','.join(patterns))};",
        "",
    ])
    write_if_changed(os.path.join(out_dir, "aotk_kernel_table.c"), table)
    write_if_changed(os.path.join(out_dir, "aotk_kernel_images.S"), "\n".join(asm_lines) + "\n")
    print(f"aotk_generate: {len(kernels)} kernels ({compiled_now} compiled, {len(kernels) - compiled_now} cached) "
          f"in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
