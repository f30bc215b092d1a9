"""The size of an image in an OCI archive, and what it adds above its base image.

    python3 deploy/imagesize.py --engine buildah|docker --base IMAGE ARCHIVE... [--json]

Sizes are of the uncompressed layers (what the image takes once unpacked). The layers above the
base are those of the archive's image whose content (diff ID) is not one of the base image's,
as the engine lists them. Standard library only: `make image` runs it with the host's python3.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import subprocess
import tarfile
from typing import IO, Any

MB = 1_000_000


def base_layers(engine: str, image: str) -> list[str]:
    """The diff IDs of ``image``'s layers, from the engine's store."""
    if engine == "buildah":
        argv = ["buildah", "inspect", "--type", "image", image]
    else:
        argv = ["docker", "image", "inspect", image]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"imagesize: cannot inspect {image}: {done.stderr.strip()}")
    data: Any = json.loads(done.stdout)
    if engine == "buildah":
        return list(data["OCIv1"]["rootfs"]["diff_ids"])
    return list(data[0]["RootFS"]["Layers"])


def _member(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    try:
        member = archive.extractfile(name)
    except KeyError:
        member = None
    if member is None:
        raise SystemExit(f"imagesize: no {name} in the archive (not an OCI archive?)")
    return member


def _blob(archive: tarfile.TarFile, digest: str) -> IO[bytes]:
    algorithm, value = digest.split(":", 1)
    return _member(archive, f"blobs/{algorithm}/{value}")


def _json(archive: tarfile.TarFile, digest: str) -> Any:
    return json.load(_blob(archive, digest))


def layers(path: str) -> tuple[str, list[tuple[str, int]]]:
    """The image's reference name and its layers as (diff ID, uncompressed size), base first."""
    with tarfile.open(path) as archive:
        index = json.load(_member(archive, "index.json"))
        (entry,) = index["manifests"]
        name = entry.get("annotations", {}).get("org.opencontainers.image.ref.name", "")
        manifest = _json(archive, entry["digest"])
        found = []
        for layer in manifest["layers"]:
            stream = _blob(archive, layer["digest"])
            if "gzip" in layer["mediaType"]:
                stream = gzip.GzipFile(fileobj=stream)  # type: ignore[assignment]
            digest, size = hashlib.sha256(), 0
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
            found.append((f"sha256:{digest.hexdigest()}", size))
        return name, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("buildah", "docker"), required=True)
    parser.add_argument("--base", required=True, help="the base image's name")
    parser.add_argument("archives", nargs="+", help="OCI archives (out/sidecar-image.tar)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    base = set(base_layers(args.engine, args.base))
    results = []
    for path in args.archives:
        name, found = layers(path)
        total = sum(size for _, size in found)
        above = sum(size for diff_id, size in found if diff_id not in base)
        results.append(
            {
                "archive": path,
                "image": name,
                "base": args.base,
                "layers": len(found),
                "layers_above_base": sum(1 for diff_id, _ in found if diff_id not in base),
                "size_bytes": total,
                "above_base_bytes": above,
            }
        )
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(
            f"image: {r['archive']}: {r['image'] or '?'} is {r['size_bytes'] / MB:.1f} MB, "
            f"{r['above_base_bytes'] / MB:.1f} MB above {r['base']} "
            f"({r['layers_above_base']} of {r['layers']} layers)"
        )


if __name__ == "__main__":
    main()
