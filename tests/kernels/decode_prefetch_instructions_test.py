"""The decode kernels' software prefetches are really in the compiled kernels.

Prefetching changes no result, so no numeric test can see it vanish, and GCC has deleted it
silently: an out-of-line helper holding only __builtin_prefetch calls is inferred to have no side
effects ("const"), and every call to it is dropped (the K-quant decode kernels lost theirs that
way, worth ~30% of a Q4_K_M model's decode speed on an Intel machine). This disassembles the
AVX-512 and AVX2 kernel objects and checks that, for every weight type whose decode kernels
prefetch (kernels::decode_prefetch_bytes), some function instantiated for that type holds a
prefetcht1.

Usage: decode_prefetch_instructions_test.py OBJECT... (the tachyon_kernels objects; an argument
may hold several, separated by ';')
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

# DType values (src/core/dtype.h) of the weight types each kernel level's decode tiles prefetch.
REPACKED_Q8 = {2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0"}
WIDENED = {1: "F16", 30: "BF16"}
K_QUANTS = {12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}
EXPECTED = {
    "matmul_avx512.cpp.o": {**REPACKED_Q8, **WIDENED, **K_QUANTS},
    "matmul_amx.cpp.o": {**REPACKED_Q8, **WIDENED, **K_QUANTS},
    "matmul_avx2.cpp.o": {**REPACKED_Q8, **WIDENED, **K_QUANTS},
}


def prefetching_types(object_path: Path) -> set[int]:
    """DType values of the functions that hold a prefetcht1 (named in their template arguments)."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(object_path)],
                             check=True, capture_output=True, text=True).stdout
    found = set()
    function = ""
    for line in listing.splitlines():
        if line and not line[0].isspace() and line.endswith(">:"):
            function = line
        elif "prefetcht1" in line:
            found.update(int(value) for value in re.findall(r"\(tachyon::DType\)(\d+)", function))
            # Q6_K's tile kernels are templates on the token count only (left out of line in
            # sanitizer builds).
            if "q6_k_" in function:
                found.add(14)
    return found


def main() -> int:
    if shutil.which("objdump") is None:
        print("SKIP: objdump not found")
        return 0
    # CMake passes $<TARGET_OBJECTS:...> as one ;-separated argument.
    paths = [Path(path) for argument in sys.argv[1:] for path in argument.split(";") if path]
    objects = {path.name: path for path in paths}
    failures = []
    checked = 0
    for name, expected in EXPECTED.items():
        if name not in objects:
            continue  # that kernel level is not built on this machine
        checked += 1
        found = prefetching_types(objects[name])
        for value, type_name in sorted(expected.items()):
            if value not in found:
                failures.append(f"{name}: no prefetcht1 in any {type_name} kernel")
        print(f"{name}: prefetcht1 in the kernels of types {sorted(found)}")
    if checked == 0:
        print("SKIP: no x86 SIMD kernel objects among the arguments")
        return 0
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
