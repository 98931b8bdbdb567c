"""What every ``data prepare`` step does with an official download: check a file's md5 against the
one torchvision's data set class records for it (read at call time from that class), extract an
archive into a staging folder (tar: only regular files and folders inside it, ``filter="data"``), and
take a file that ships either as itself or inside a ``.tar.gz`` of the same name; the same for zips."""
from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from pathlib import Path

from harness.errors import DataError


def verify_md5(path: Path, md5: str) -> None:
    """A DataError unless ``path``'s md5 is ``md5`` (torchvision's ``check_integrity``)."""
    from torchvision.datasets.utils import check_integrity

    if not check_integrity(str(path), md5):
        raise DataError(f"{path} is not the official file (its md5 is not {md5}, the one torchvision records "
                        f"for it): download it again")


def extract(archive: Path, into: Path) -> int:
    """Extract ``archive`` (tar, tar.gz, tgz) into ``into``; the number of files written."""
    files = 0
    try:
        with tarfile.open(archive) as tar:
            for member in tar:  # one pass over the stream: a 100 GB .tar.gz is decompressed once
                if member.isfile() or member.isdir():
                    tar.extract(member, into, filter="data")
                    files += member.isfile()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(f"{archive} cannot be extracted ({exc}): a truncated or damaged download; "
                        f"download it again") from exc
    return files


def file_or_tarred(download: Path, name: str) -> Path | None:
    """``download/name``, or ``download/name.tar.gz`` (iNaturalist ships its JSON files so); None if neither."""
    for candidate in (download / name, download / f"{name}.tar.gz"):
        if candidate.is_file():
            return candidate
    return None


def place(source: Path, name: str, into: Path) -> None:
    """Write the file ``name`` into ``into``: copied from ``source``, or taken out of it when it is the
    ``.tar.gz`` that holds it (at its top level, as the official archives have it)."""
    into.mkdir(parents=True, exist_ok=True)
    if source.name == name:
        shutil.copyfile(source, into / name)
        return
    try:
        with tarfile.open(source) as tar:
            member = next((m for m in tar.getmembers() if m.isfile() and Path(m.name).name == name), None)
            if member is None:
                raise DataError(f"{source} holds no {name}; expected the official archive of that file")
            with tar.extractfile(member) as f, open(into / name, "wb") as out:
                shutil.copyfileobj(f, out)
    except (tarfile.TarError, EOFError) as exc:
        raise DataError(f"{source} cannot be read ({exc}): download it again") from exc


def lift(folder: Path, into: Path) -> None:
    """Move ``folder``'s entries up into ``into`` and remove it: an archive's top folder whose
    content is the reader's root."""
    for item in folder.iterdir():
        os.rename(item, into / item.name)
    folder.rmdir()


def open_zip(archive: Path) -> zipfile.ZipFile:
    """The zip ``archive`` opened; one DataError line where it cannot be read."""
    try:
        return zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{archive} cannot be read ({exc}): a truncated or damaged download; "
                        f"download it again") from exc


def extract_zip(archive: Path, into: Path) -> list[str]:
    """Extract the zip ``archive`` into ``into`` (zipfile keeps every member inside it); the files' names."""
    try:
        with open_zip(archive) as zf:
            names = [n for n in zf.namelist() if not n.endswith("/")]
            zf.extractall(into)
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise DataError(f"{archive} cannot be extracted ({exc}): a truncated or damaged download; "
                        f"download it again") from exc
    return names


def zip_member(archive: Path, name: str, into: Path) -> Path:
    """The zip member whose file name is ``name`` (at any depth: packings differ) written to ``into/name``."""
    with open_zip(archive) as zf:
        member = next((m for m in zf.namelist() if Path(m).name == name and not m.endswith("/")), None)
        if member is None:
            raise DataError(f"{archive} holds no {name}; expected the official archive")
        into.mkdir(parents=True, exist_ok=True)
        try:
            with zf.open(member) as f, open(into / name, "wb") as out:
                shutil.copyfileobj(f, out)
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise DataError(f"{archive} cannot be read ({exc}): download it again") from exc
    return into / name
