"""Model files are read from the local file system only: a URL is refused before anything is fetched.

A file from the network may come from anyone, and Lightning opens remote checkpoints with
``weights_only=False`` (lightning_fabric 2.6 ``cloud_io._load``), which runs whatever the pickle says.
Writing checkpoints to object stores (``s3://`` ...) is unaffected.
"""

from __future__ import annotations

from elasticface.utils.lightning_private import is_local_path


class RemoteFileError(ValueError):
    """A model file given as a URL (http://, s3://, ...) instead of a local path."""


def refuse_remote(path: object, option: str) -> str:
    """``str(path)`` when it names a local file; a RemoteFileError naming ``option`` and the URL otherwise."""
    text = str(path)
    if not is_local_path(text):
        raise RemoteFileError(
            f"{option}={text}: a remote file is not opened (a file from the network may come from anyone, and "
            f"opening a checkpoint can run code); download it, check where it comes from, and give the local "
            f"path: {option}=<file>"
        )
    return text
