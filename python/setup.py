# The wheel holds libaotk.so, machine code for Linux x86-64, and Python code for any Python 3: tag it
# "py3-none-<platform>", so that pip installs it on any Python 3 of that platform and nowhere else
# (setuptools alone would call it pure, "py3-none-any"). Everything else is in pyproject.toml.
from setuptools import setup

try:
    from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
except ImportError:
    from wheel.bdist_wheel import bdist_wheel  # older setuptools builds wheels with the wheel package


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"bdist_wheel": PlatformWheel})
