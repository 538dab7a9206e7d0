"""Builds mha's extension against the repository's libmha.so (make builds it when absent) and
ships that library inside the package, found through the extension's $ORIGIN rpath."""
import glob
import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD = os.environ.get("MHA_BUILD", os.path.join(REPO, "build"))


def version():
    """libmha's version, from the header that defines it (one place)."""
    with open(os.path.join(REPO, "include", "mha.h")) as f:
        text = f.read()
    return ".".join(re.search(rf"#define MHA_VERSION_{p} (\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH"))


def soname():
    """libmha.so.0.MINOR: the name the extension links and loads (the ABI's)."""
    names = [os.path.basename(p) for p in glob.glob(os.path.join(BUILD, "libmha.so.*")) if p.count(".") == 3]
    if not names:
        raise RuntimeError(f"no libmha.so.0.N in {BUILD}")
    return sorted(names)[-1]


class BuildExt(build_ext):
    def run(self):
        if not os.path.exists(os.path.join(BUILD, "libmha.so")):
            subprocess.check_call(["make", "-C", REPO, os.path.relpath(os.path.join(BUILD, "libmha.so"), REPO)])
        name = soname()
        for ext in self.extensions:
            ext.extra_link_args += [os.path.join(BUILD, name), "-Wl,-rpath,$ORIGIN"]
        super().run()
        dest = os.path.join(self.build_lib, "mha")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.realpath(os.path.join(BUILD, name)), os.path.join(dest, name))


setup(
    version=version(),
    ext_modules=[Extension("mha._mha", sources=["mha/_mha.c"], include_dirs=[os.path.join(REPO, "include")],
                           define_macros=[("Py_LIMITED_API", "0x030B0000")], py_limited_api=True,
                           extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra"])],
    cmdclass={"build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
