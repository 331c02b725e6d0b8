"""Directory checkpoints: a JSON manifest plus one safetensors file, written atomically.

Nothing here can run code on load: no pickle, no ``torch.load``. The manifest
holds the format version, the volley version, the algorithm, its config, plain
JSON state (counters, filter, random generator states) and the SHA-256 of every
file, checked before anything is read. A checkpoint is written into a temporary
directory beside its destination, fsynced, and renamed into place, so a crash
leaves either the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from volley._version import __version__
from volley.coercion import is_json_data
from volley.errors import CheckpointError

FORMAT_VERSION = 1
MANIFEST = "volley_checkpoint.json"
TENSORS = "tensors.safetensors"
_WRITING = ".tmp-"  # in the names of hidden directories that write_checkpoint makes
_ASIDE = ".old-"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fsync(path: Path) -> None:
    """Flush a file or directory to disk (a directory: so the renames inside it survive a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SavedCheckpoint(str):
    """The path of a checkpoint ``Algorithm.save()`` wrote: a string, which also answers RLlib 2.x's
    ``algo.save().checkpoint.path`` (there, ``save()`` returns a result holding a checkpoint)."""

    @property
    def checkpoint(self) -> SavedCheckpoint:
        return self

    @property
    def path(self) -> str:
        return str(self)


def json_part(value: Any, where: str) -> tuple[Any, dict[str, str]]:
    """``value`` without what JSON cannot hold (a config's ``env_config`` may hold a gymnasium
    space, an unknown key any object): each such part left out, by its path and type name."""
    if isinstance(value, dict):
        kept: dict[str, Any] = {}
        left: dict[str, str] = {}
        for key, item in value.items():
            path = f"{where}[{key!r}]" if where else str(key)
            if not isinstance(key, str):
                left[path] = type(item).__name__
                continue
            kept_item, left_item = json_part(item, path)
            left.update(left_item)
            if not left_item or kept_item is not None:
                kept[key] = kept_item
        return kept, left
    if not is_json_data(value):  # a tuple too: JSON would give it back as a list
        return None, {where: type(value).__name__}
    return value, {}


NOT_STORED = "not_stored"  # the manifest's record of the config's parts JSON could not hold


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` on the CPU, each with memory of its own: safetensors refuses tensors that share
    memory, as the layer that two policies' models share does (RLlib's shared_weights_model);
    restoring writes the one layer from either copy."""
    seen: set[int] = set()
    result = {}
    for key, tensor in tensors.items():
        tensor = tensor.detach().cpu().contiguous()
        storage = tensor.untyped_storage().data_ptr()
        result[key] = tensor.clone() if storage in seen else tensor
        seen.add(storage)
    return result


def write_checkpoint(path: str | os.PathLike, tensors: dict[str, torch.Tensor],
                     manifest: dict[str, Any]) -> Path:
    """Write ``tensors`` and ``manifest`` to directory ``path``, atomically; of the manifest's
    ``config``, what JSON holds (the rest is named under ``not_stored``).

    Replacing an existing checkpoint sets the old one aside first (one rename), so a
    crash between the two renames leaves it whole under a hidden name, never half of it.
    """
    if "config" in manifest:
        config, left = json_part(manifest["config"], "")
        manifest = {**manifest, "config": config, NOT_STORED: left}
    dest = Path(path).absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}{_WRITING}", dir=dest.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a checkpoint is an ordinary directory
        save_file(_unshared(tensors), tmp / TENSORS)
        full = {"format_version": FORMAT_VERSION, "volley_version": __version__, **manifest,
                "files": {TENSORS: _sha256(tmp / TENSORS)}}
        (tmp / MANIFEST).write_text(json.dumps(full, indent=1))
        for file in (tmp / TENSORS, tmp / MANIFEST, tmp):
            fsync(file)
        old = _set_aside(dest) if dest.exists() else None
        os.replace(tmp, dest)
        fsync(dest.parent)
        if old is not None:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def remove_checkpoint(path: str | os.PathLike) -> None:
    """Delete a checkpoint directory: renamed out of sight first, so a crash in the middle
    never leaves a half-deleted checkpoint under its own name."""
    shutil.rmtree(_set_aside(Path(path).absolute()))


def remove_leftovers(directory: str | os.PathLike) -> list[Path]:
    """Delete the hidden directories a killed :func:`write_checkpoint` or
    :func:`remove_checkpoint` left in ``directory``; returns what it removed.

    Only for a directory no other process is writing checkpoints into at the time.
    """
    leftovers = [p for p in Path(directory).glob(".*") if p.is_dir()
                 and (_WRITING in p.name or _ASIDE in p.name)]
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    return leftovers


def _set_aside(path: Path) -> Path:
    """Move ``path`` into a new hidden directory beside it; returns that directory."""
    aside = Path(tempfile.mkdtemp(prefix=f".{path.name}{_ASIDE}", dir=path.parent))
    os.replace(path, aside / path.name)
    return aside


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Verify and load a checkpoint directory; every problem is a CheckpointError naming it."""
    src = Path(path)
    if not src.exists():
        raise CheckpointError(f"no checkpoint at '{path}'")
    if not (src / MANIFEST).is_file():
        raise CheckpointError(f"'{path}' is not a volley checkpoint (no {MANIFEST} inside)")
    try:
        manifest = json.loads((src / MANIFEST).read_text())
        version = manifest["format_version"]
        files = manifest["files"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"checkpoint '{path}' is corrupt: its manifest cannot be read ({exc})") from None
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint '{path}' has format version {version!r}, newer than this "
                              f"volley reads ({FORMAT_VERSION}); upgrade volley")
    for name, expected in files.items():
        file = src / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint '{path}' is incomplete: '{name}' is missing")
        if _sha256(file) != expected:
            raise CheckpointError(f"checkpoint '{path}' is corrupt: '{name}' fails its SHA-256 check")
    try:
        tensors = load_file(src / TENSORS)
    except SafetensorError as exc:
        raise CheckpointError(f"checkpoint '{path}' is corrupt: {exc}") from None
    return tensors, manifest


def check_restorable(path: str | os.PathLike, manifest: dict[str, Any], given: dict[str, Any]) -> None:
    """A CheckpointError naming the first part of the config the checkpoint could not store (not
    JSON data) unless ``given`` (the config keys passed to restore it with) sets it again."""
    for part, kind in manifest.get(NOT_STORED, {}).items():
        key = part.split("[")[0]
        if key not in given:
            raise CheckpointError(f"checkpoint '{path}' could not store config {part} (a {kind}, not JSON "
                                  f"data): give it again, Algorithm.from_checkpoint({str(path)!r}, {key}=...)")


def flatten_optimizer(state: dict[str, Any], prefix: str) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into tensors and JSON (param groups, scalar entries)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{prefix}.{index}.{key}"] = value
            else:
                scalars.setdefault(str(index), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict, prefix: str) -> dict[str, Any]:
    """Inverse of :func:`flatten_optimizer`."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith(prefix + "."):
            index, key = name[len(prefix) + 1:].split(".", 1)
            state.setdefault(int(index), {})[key] = value
    for index, entries in meta["scalars"].items():
        state.setdefault(int(index), {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}


REPLAY_PREFIX = "replay."  # a replay buffer's rows: tensors "replay.{shard}.{column}"


def replay_tensors(shards: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Replay buffers' rows (each shard's ``ReplayBuffer.state()``, oldest first) as checkpoint
    tensors ``replay.{shard}.{column}``; how many shards there were goes into the manifest."""
    return {f"{REPLAY_PREFIX}{index}.{name}": torch.as_tensor(column if column.flags.writeable else column.copy())
            for index, columns in enumerate(shards) for name, column in columns.items()}  # Ray's are read-only


def replay_shards(tensors: dict[str, torch.Tensor], count: int) -> list[dict[str, np.ndarray]]:
    """The ``count`` shards' columns that :func:`replay_tensors` saved."""
    shards: list[dict[str, np.ndarray]] = [{} for _ in range(count)]
    for name, tensor in tensors.items():
        if name.startswith(REPLAY_PREFIX):
            index, column = name[len(REPLAY_PREFIX):].split(".", 1)
            shards[int(index)][column] = tensor.numpy()
    return shards
